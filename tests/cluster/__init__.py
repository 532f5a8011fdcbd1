"""The local Kubernetes cluster the backend tests run against: a real control plane built from
Kubernetes' own Go modules (tools/cluster), and the process node (node.py), the one emulated
part. ``python -m tests.cluster up|down|status`` is what ``make cluster-up`` and
``make cluster-down`` run."""
