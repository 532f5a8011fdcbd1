// Command fakegpu is the local cluster's one emulated part: a device plugin that advertises
// GPUs the machine does not have, through the kubelet's real device-plugin API (v1beta1), so
// the scheduler, the kubelet's allocation and the container's environment work as on a GPU
// node. Each device is a fake ID; a container granted some gets NVIDIA_VISIBLE_DEVICES (the
// IDs, as NVIDIA's plugin sets it) and CUDA_VISIBLE_DEVICES (their ordinals, as NVIDIA's
// container runtime sets it). Nothing is isolated and no driver is mounted.
//
//	fakegpu --dir /var/lib/kubelet/device-plugins --resource nvidia.com/gpu --count 4
//
// It re-registers when the kubelet's socket is re-created (a kubelet restart).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func newPlugin(resource string, count int) *plugin {
	p := &plugin{}
	prefix := strings.NewReplacer("/", "-", ".", "-").Replace(resource)
	for i := 0; i < count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{
			ID: fmt.Sprintf("%s-fake-%d", prefix, i), Health: pluginapi.Healthy})
	}
	return p
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done() // the devices never change; the kubelet closes the stream
	return nil
}

func (p *plugin) ordinal(id string) (int, bool) {
	for i, d := range p.devices {
		if d.ID == id {
			return i, true
		}
	}
	return 0, false
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ordinals := make([]string, 0, len(c.DevicesIds))
		for _, id := range c.DevicesIds {
			i, ok := p.ordinal(id)
			if !ok {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			ordinals = append(ordinals, strconv.Itoa(i))
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ","),
				"CUDA_VISIBLE_DEVICES":   strings.Join(ordinals, ","),
			}})
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func register(dir, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource})
	return err
}

// inode of the kubelet's socket: a new one means the kubelet restarted and forgot us.
func inode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return sysIno(fi)
}

func main() {
	dir := flag.String("dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource to advertise")
	count := flag.Int("count", 4, "how many devices")
	flag.Parse()

	endpoint := "sweeper-fakegpu-" + strings.NewReplacer("/", "-", ".", "-").Replace(*resource) + ".sock"
	sock := filepath.Join(*dir, endpoint)
	kubeletSock := filepath.Join(*dir, "kubelet.sock")
	registered := uint64(0)
	var srv *grpc.Server
	for {
		if registered == 0 || inode(kubeletSock) != registered {
			if srv != nil {
				srv.Stop()
			}
			_ = os.Remove(sock)
			_ = os.MkdirAll(*dir, 0o755) // the kubelet makes it too, maybe after we start
			lis, err := net.Listen("unix", sock)
			if err != nil {
				log.Fatalf("fakegpu: listen %s: %v", sock, err)
			}
			srv = grpc.NewServer()
			pluginapi.RegisterDevicePluginServer(srv, newPlugin(*resource, *count))
			go func() { _ = srv.Serve(lis) }()
			if err := register(*dir, endpoint, *resource); err != nil {
				srv.Stop()
				srv = nil
				log.Printf("fakegpu: register with the kubelet: %v (retrying)", err)
				time.Sleep(time.Second)
				continue
			}
			registered = inode(kubeletSock)
			log.Printf("fakegpu: %d x %s registered", *count, *resource)
		}
		time.Sleep(time.Second)
	}
}
