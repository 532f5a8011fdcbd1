"""Test support: fixtures, helpers and the fake Kubernetes API server (not collected as tests)."""
