"""Backends: where trial runners run (local processes, one Kubernetes Indexed Job)."""
