"""The index store over gRPC: the client end of ``sweeper proxy`` (``grpc://host:port``), and
the wire both ends share.

- :mod:`.client`: :class:`~.client.ProxyStorage`, the index store's second implementation
  (beside :mod:`sweeper.study.sql`): Optuna's gRPC storage client plus sweeper's own service
  on the same channel, retried while the proxy is unavailable;
- :mod:`.wire`: sweeper's service, one method per operation of the index store, derived from
  its signatures; :mod:`.codec`, its values encoded by their type hints;
- :mod:`.credentials`: the credential every call carries and how the channel is secured;
  :mod:`.localsecret`, the secret file of a proxy on loopback.

The server (:mod:`sweeper.proxy`) imports the wire from here; nothing here imports it.
"""
