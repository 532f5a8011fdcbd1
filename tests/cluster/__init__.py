"""The local Kubernetes cluster the backend tests run against: a real control plane and a real
node (kubelet, kube-proxy, CoreDNS, containerd and runc; realnode.py), built from their own Go
modules (tools/cluster) and Debian's packages, running images built locally (tools/cluster/
images.sh); GPUs come from a fake device plugin of ours, the one emulated part.
``python -m tests.cluster up|down|status`` is what ``make cluster-up`` and ``make cluster-down``
run."""
