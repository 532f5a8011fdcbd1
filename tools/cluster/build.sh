#!/usr/bin/env bash
# Build the local cluster's binaries into .cluster/bin (an ignored build output): etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, the node's kubelet and kube-proxy and
# the fake GPU device plugin from the pinned wrapper module tools/cluster/k8s, CoreDNS from
# tools/cluster/coredns, Kueue's manager from tools/cluster/kueue and JobSet's
# from tools/cluster/jobset (each with its CRDs and webhook manifests).
# A stamp of the inputs (go.mod, go.sum, sources, this script) makes a second run a no-op;
# changing a pin rebuilds. Go's own build cache makes a rebuild after a small change cheap.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/tools/cluster"
BIN="${CLUSTER_BIN:-$ROOT/.cluster/bin}"

die() { echo "cluster-build: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed; install Go >= 1.26 (Debian: apt-get install golang-go, or go.dev/dl) and run make cluster-up again"

# One module at a time: NAME DIR PACKAGES...
build_module() {
	local name="$1" dir="$2"; shift 2
	local stamp="$BIN/.$name.stamp" want
	want="$(cd "$dir" && cat go.mod go.sum $(find . -name '*.go' | sort) "$HERE/build.sh" | sha256sum | cut -c1-16)-$(go env GOVERSION)"
	if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		for b in "$@"; do [[ -x "$BIN/$(basename "$b")" ]] || { want="missing"; break; }; done
		[[ "$want" != missing ]] && return 0
	fi
	local version ldflags module
	case "$name" in
		k8s) module=k8s.io/kubernetes ;;
		kueue) module=sigs.k8s.io/kueue ;;
		jobset) module=sigs.k8s.io/jobset ;;
		coredns) module=github.com/coredns/coredns ;;
		*) die "build_module: no version source for $name" ;;
	esac
	version="$(awk -v m="$module" '$1==m{print $2; exit} $1=="require" && $2==m{print $3; exit}' "$dir/go.mod")"
	[[ -n "$version" ]] || die "$module is not required in $dir/go.mod"
	local major minor
	major="$(echo "${version#v}" | cut -d. -f1)"; minor="$(echo "${version#v}" | cut -d. -f2)"
	ldflags="-s -w"
	if [[ "$name" == k8s ]]; then
		for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
			ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
		done
	elif [[ "$name" != coredns ]]; then  # CoreDNS's version is a constant of its source
		ldflags+=" -X $module/pkg/version.GitVersion=$version"
	fi
	echo "cluster-build: building $name ($version): $*" >&2
	mkdir -p "$BIN"
	local start=$SECONDS
	(cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$BIN/" "$@") \
		|| die "building $name failed (see the go output above); fix it, then run make cluster-up again"
	echo "$want" > "$stamp"
	echo "cluster-build: $name built in $((SECONDS - start)) s" >&2
}

build_module k8s "$HERE/k8s" ./etcd k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy ./fakegpu
# The real node's DNS: CoreDNS with the plugins a cluster needs (tools/cluster/coredns).
build_module coredns "$HERE/coredns" ./coredns
if [[ -d "$HERE/kueue" ]]; then
	build_module kueue "$HERE/kueue" ./kueue-manager
	# Kueue's CRDs and webhook configurations from the same module version, for tests/cluster/kueue.py.
	kueue_src="$(cd "$HERE/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
	[[ -d "$kueue_src/config/components/crd/bases" ]] || die "sigs.k8s.io/kueue is not in the module cache; run: cd tools/cluster/kueue && go mod download"
	rm -rf "$BIN/kueue-crds" && mkdir -p "$BIN/kueue-crds"
	install -m 0644 "$kueue_src"/config/components/crd/bases/*.yaml "$BIN/kueue-crds/"
	install -m 0644 "$kueue_src/config/components/webhook/manifests.yaml" "$BIN/kueue-webhooks.yaml"
fi
if [[ -d "$HERE/jobset" ]]; then
	build_module jobset "$HERE/jobset" ./jobset-manager
	# JobSet's CRD and webhook configurations from the same module version, for tests/cluster/jobset.py.
	jobset_src="$(cd "$HERE/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)"
	[[ -d "$jobset_src/config/components/crd/bases" ]] || die "sigs.k8s.io/jobset is not in the module cache; run: cd tools/cluster/jobset && go mod download"
	rm -rf "$BIN/jobset-crds" && mkdir -p "$BIN/jobset-crds"
	install -m 0644 "$jobset_src"/config/components/crd/bases/*.yaml "$BIN/jobset-crds/"
	install -m 0644 "$jobset_src/config/components/webhook/manifests.yaml" "$BIN/jobset-webhooks.yaml"
fi
