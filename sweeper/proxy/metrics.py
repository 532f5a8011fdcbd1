"""Prometheus metrics (``prometheus-client``), served on ``/metrics`` by ``sweeper proxy
--metrics-port`` and ``sweeper run --metrics-port``.

Two kinds, named by Prometheus' conventions (base units, ``_seconds``, ``_total``):

- read from the study at scrape time (``IndexStore.study_stats``), so they are
  right after any restart and the same on every proxy replica (aggregate with ``max``):
  ``sweeper_trials{study,state}``, ``sweeper_trial_duration_seconds{study}`` (finished trials),
  ``sweeper_best_value{study,objective}``;
- observed by the proxy as calls pass through it: ``sweeper_index_claim_seconds`` (claiming a
  WAITING trial or creating the next attempt of an index), ``sweeper_tell_seconds`` (finishing
  a trial), ``sweeper_heartbeats_total`` (runner heartbeats seen) and
  ``sweeper_proxy_request_seconds{method}`` (every call, by method).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sweeper.study.remote import wire

if TYPE_CHECKING:
    from sweeper.study.store import IndexStore

logger = logging.getLogger(__name__)

#: Trial durations: seconds to hours (GPU trials run long).
DURATION_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600,
                                       7200, 14400, 43200, 86400)
#: Protocol steps and proxy calls: a millisecond to seconds.
LATENCY_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25, 0.5, 1, 2.5, 5, 10)

_HEARTBEAT = f"/{wire.SERVICE}/Heartbeat"


class ProxyMetrics:
    """What the proxy observes, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Histogram(
            "sweeper_proxy_request_seconds", "Time the storage proxy took to serve a call, by "
            "method (Optuna's storage API and sweeper's index protocol).", ["method"],
            buckets=LATENCY_BUCKETS, registry=registry)
        self.claims = Histogram(
            "sweeper_index_claim_seconds", "Time to claim an index's trial (WAITING -> RUNNING) "
            "or create its next attempt, in the proxy.", buckets=LATENCY_BUCKETS,
            registry=registry)
        self.tells = Histogram(
            "sweeper_tell_seconds", "Time to finish a trial (COMPLETE, PRUNED or FAIL), in the "
            "proxy.", buckets=LATENCY_BUCKETS, registry=registry)
        self.heartbeats = Counter(
            "sweeper_heartbeats", "Runner heartbeats the proxy recorded.", registry=registry)

    def observe(self, method: str, seconds: float, *, tell: bool = False,
                claim: bool = False) -> None:
        """``claim``: the call claimed an index's trial or created its next attempt
        (:func:`sweeper.study.remote.wire.is_claim`); ``tell``: it finished a trial."""
        self.requests.labels(method.rsplit("/", 1)[-1]).observe(seconds)
        if claim:
            self.claims.observe(seconds)
        elif method == _HEARTBEAT:
            self.heartbeats.inc()
        elif tell:
            self.tells.observe(seconds)


class StudyCollector(Collector):
    """Trials by state, duration histogram and best value, read from the storage when
    Prometheus scrapes. ``study_id`` None: every study in the storage (the proxy)."""

    def __init__(self, storage: Callable[[], IndexStore | None],
                 study_id: Callable[[], int | None] | None = None,
                 buckets: Sequence[float] = DURATION_BUCKETS) -> None:
        self._get_storage = storage
        self._get_study_id = study_id
        self._buckets = list(buckets)

    def collect(self) -> Iterator[Metric]:

        storage = self._get_storage()
        study_id = self._get_study_id() if self._get_study_id is not None else None
        if storage is None or (self._get_study_id is not None and study_id is None):
            return
        try:
            stats = storage.study_stats(study_id, self._buckets)
        except Exception as e:  # noqa: BLE001 - a scrape must answer; the next one retries
            logger.warning("metrics: cannot read the study (%s)", type(e).__name__)
            return
        trials = GaugeMetricFamily("sweeper_trials", "Trials of the study in each state.",
                                   labels=["study", "state"])
        durations = HistogramMetricFamily(
            "sweeper_trial_duration_seconds", "Duration of finished trials (COMPLETE, PRUNED, "
            "FAIL), from start to finish.", labels=["study"])
        best = GaugeMetricFamily("sweeper_best_value", "Best value of each objective among "
                                 "COMPLETE trials.", labels=["study", "objective"])
        for s in stats:
            for state, n in sorted(s.states.items()):
                trials.add_metric([s.study, state], n)
            bounds = [*(_bound(b) for b in self._buckets), "+Inf"]
            durations.add_metric([s.study], list(zip(bounds, s.duration_buckets, strict=True)),
                                 s.duration_sum_s)
            for objective, value in sorted(s.best.items()):
                best.add_metric([s.study, objective], value)
        yield trials
        yield durations
        yield best

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected only at scrape time (registering must not query)


def _bound(b: float) -> str:
    return repr(float(b))


def serve_metrics(registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> Any:
    """Serve ``registry`` on http://host:port/metrics in a daemon thread; returns the server
    (``shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
