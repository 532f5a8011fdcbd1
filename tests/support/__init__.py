"""Test support: fixtures and helpers, among them the tests' view of the local Kubernetes
cluster (k8s_cluster); not collected as tests."""
