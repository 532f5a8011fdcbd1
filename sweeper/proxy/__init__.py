"""The storage proxy: ``sweeper proxy`` serves Optuna's gRPC storage proxy and sweeper's own
index-protocol service on one port, so hundreds of runners reach the study through a few
database connections and no runner holds the database password.

- :mod:`.server`: the grpc.Server with both services, health checks, request metrics;
- :mod:`.auth`, :mod:`.kubeauth`, :mod:`.policy`, :mod:`.limits`, :mod:`.tls`: who may call,
  what, how often, over which channel;
- :mod:`.metrics`: the Prometheus metrics and their HTTP endpoint.

The client end (``grpc://host:port`` as a storage) and the wire both ends speak live in
:mod:`sweeper.study.remote`, so opening a storage never imports the server.
"""
