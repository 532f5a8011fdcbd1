"""The storage proxy: ``sweeper proxy`` serves Optuna's gRPC storage proxy and sweeper's own
index-protocol service on one port, so hundreds of runners reach the study through a few
database connections and no runner holds the database password.

- :mod:`.service`: the wire of sweeper's service (JSON messages, method table, errors);
- :mod:`.client`: ``grpc://host:port`` as a storage (``ProxyStorage``), retried while the
  proxy is unavailable;
- :mod:`.server`: the grpc.Server with both services, health checks, request metrics;
- :mod:`.metrics`: the Prometheus metrics and their HTTP endpoint.

Nothing here is imported at ``import sweeper`` time beyond the client's class (grpc itself is
imported on first use).
"""
