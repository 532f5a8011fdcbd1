// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain) at the version
// k8s.io/kubernetes pins, built in this module so that the apiserver and its store come
// from one build list.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
