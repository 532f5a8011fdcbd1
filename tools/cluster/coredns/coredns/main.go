// CoreDNS for the local cluster's real node, with only the plugins a cluster's DNS needs:
// kubernetes (Service and Pod names), forward and cache (everything else), errors and ready.
// A main of our own keeps the build small: CoreDNS's own main links every plugin and SDK.
// The directive order is CoreDNS's (plugin.cfg of the pinned version).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"ready", "errors", "cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
