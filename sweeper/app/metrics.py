"""``sweeper run --metrics-port``: the sweep's study metrics for Prometheus while it runs,
read from the storage on each scrape (opened on the first one)."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from sweeper.study import StudyStorage

logger = logging.getLogger("sweeper.proxy.metrics")


class LazyStudy:
    """The storage and study id a ``sweeper run`` scrape reads: opened on the first scrape
    (a connection or two, none while nobody scrapes), the study found once it exists."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.storage: StudyStorage | None = None
        self.study_id: int | None = None

    def get_storage(self) -> StudyStorage | None:
        if self.storage is None:
            from sweeper.study import open_storage

            try:
                # prepared: the run creates the schema; Optuna's own check would hold a
                # second connection at once
                self.storage = open_storage(self.url, prepared=True)
            except Exception as e:  # noqa: BLE001 - a scrape must answer; the next one retries
                logger.warning("metrics: cannot open the storage (%s)", type(e).__name__)
        return self.storage

    def get_study_id(self) -> int | None:
        if self.study_id is None and self.storage is not None:
            try:
                self.study_id = self.storage.get_study_id_from_name(self.name)
            except KeyError:
                return None
        return self.study_id


def serve_run_metrics(port: int, url: str, name: str,
                      host: str = "0.0.0.0") -> CollectorRegistry:
    """``sweeper run --metrics-port``: the sweep's study metrics on http://host:port/metrics.
    Returns the registry, for the local backend's in-process proxy to add its own to."""
    from sweeper.proxy.metrics import StudyCollector, serve_metrics

    registry = CollectorRegistry()
    study = LazyStudy(url, name)
    registry.register(StudyCollector(study.get_storage, study.get_study_id))
    serve_metrics(registry, port, host)
    return registry
