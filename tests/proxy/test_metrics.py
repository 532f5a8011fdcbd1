"""Prometheus metrics: /metrics scraped during and after a real local sweep (worker processes,
the in-process proxy), each counter checked against the study itself; the CLI's
``--metrics-port`` on ``sweeper run`` and ``sweeper proxy``."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from sweeper.backends.local.backend import LocalBackend
from sweeper.proxy.metrics import ProxyMetrics, StudyCollector, serve_metrics
from sweeper.study import create_or_resume, open_storage
from tests.support.chaos import REPO, SWEEPER, chaos_spec
from tests.support.helpers import make_spec
from tests.support.proxy import ProxyProcess, free_port

#: Every metric the README, the Grafana dashboard and the issue name.
NAMES = {"sweeper_trials", "sweeper_trial_duration_seconds", "sweeper_best_value",
         "sweeper_index_claim_seconds", "sweeper_tell_seconds", "sweeper_heartbeats",
         "sweeper_proxy_request_seconds"}


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """sample name + sorted labels -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def families(port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return {f.name for f in text_string_to_metric_families(r.read().decode())}


def test_metrics_during_and_after_a_local_sweep_match_the_study(
        tmp_path: Path, storage_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPER_HEARTBEAT_INTERVAL", "0.1")
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    spec = make_spec(name="metered", method="random", trials=6, parallelism=2,
                     trial={"entrypoint": "trial_runner.examples.synthetic:quadratic",
                            "fixed": {"epochs": 3, "delay": 0.25}})
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, spec)
    registry = CollectorRegistry()
    registry.register(StudyCollector(lambda: storage, lambda: sweep.study_id))
    port = free_port()
    server = serve_metrics(registry, port, "127.0.0.1")
    running_seen: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.1):
            running_seen.append(value(scrape(port), "sweeper_trials", study="metered",
                                      state="RUNNING"))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = LocalBackend(tmp_path / "logs", metrics=registry).run(
            sweep, range(6), storage_url=storage_url, tick=lambda: None)
    finally:
        stop.set()
        watcher.join()
    try:
        assert result.finished == tuple(range(6))
        assert max(running_seen) >= 1  # scraped while trials ran
        samples = scrape(port)
        assert families(port) >= NAMES
    finally:
        server.shutdown()

    trials = sweep.study().get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == len(trials) == 6
    assert value(samples, "sweeper_trials", study="metered", state="COMPLETE") == 6
    assert value(samples, "sweeper_trials", study="metered", state="WAITING") == 0
    assert value(samples, "sweeper_trial_duration_seconds_count", study="metered") == 6
    total = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in complete)
    assert value(samples, "sweeper_trial_duration_seconds_sum", study="metered") == \
        pytest.approx(total, abs=1e-3)
    assert value(samples, "sweeper_trial_duration_seconds_bucket", study="metered",
                 le="0.5") == 0  # 3 epochs of 0.25 s each
    assert value(samples, "sweeper_best_value", study="metered", objective="loss") == \
        pytest.approx(min(t.value for t in complete))
    # what the proxy saw the workers do: one claim and one tell per trial, heartbeats
    assert value(samples, "sweeper_index_claim_seconds_count") == 6
    assert value(samples, "sweeper_tell_seconds_count") == 6
    assert value(samples, "sweeper_heartbeats_total") >= 6
    assert value(samples, "sweeper_proxy_request_seconds_count", method="Take") >= 6
    # each report is one batched write of the trial (its value and the metrics' attributes)
    assert value(samples, "sweeper_proxy_request_seconds_count", method="WriteTrial") >= 6 * 3
    assert value(samples, "sweeper_proxy_request_seconds_count",
                 method="SetTrialIntermediateValue") == 0


def test_proxy_metrics_count_only_what_they_name() -> None:
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry)
    metrics.observe("/sweeper.v1.IndexProtocol/Claim", 0.002, claim=True)
    metrics.observe("/sweeper.v1.IndexProtocol/NewAttempt", 0.004, claim=True)
    metrics.observe("/sweeper.v1.IndexProtocol/Take", 0.004)  # looked, claimed nothing
    metrics.observe("/sweeper.v1.IndexProtocol/Heartbeat", 0.001)
    metrics.observe("/optuna.StorageService/SetTrialStateValues", 0.003, tell=True)
    metrics.observe("/optuna.StorageService/SetTrialStateValues", 0.003)  # RUNNING: no tell
    get = registry.get_sample_value
    assert get("sweeper_index_claim_seconds_count") == 2
    assert get("sweeper_tell_seconds_count") == 1
    assert get("sweeper_heartbeats_total") == 1
    assert get("sweeper_proxy_request_seconds_count", {"method": "SetTrialStateValues"}) == 2


def test_a_claim_is_a_claim_or_next_attempt_call_or_a_first_look_that_claimed() -> None:
    from optuna.trial import TrialState

    from sweeper.proxy import service as wire
    from sweeper.study.values import Attempt, Taken

    take = wire.OPERATIONS["take"]
    claimed = Attempt(7, 3, TrialState.RUNNING, 0, 0.0)
    assert wire.is_claim(wire.OPERATIONS["claim"].path, b"false")
    assert wire.is_claim(wire.OPERATIONS["new_attempt"].path, None)
    assert wire.is_claim(take.path, take.encode_reply(Taken([claimed], claimed)))
    assert not wire.is_claim(take.path, take.encode_reply(Taken([claimed])))
    assert not wire.is_claim(take.path, None) and not wire.is_claim(take.path, b"{")
    assert not wire.is_claim(wire.OPERATIONS["attempts"].path, b"[]")


@pytest.mark.slow
def test_sweeper_run_serves_metrics_while_it_runs(tmp_path: Path, pg_url: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(chaos_spec("served", 8, 2, 1.0, 1)))
    port = free_port()
    env = dict(os.environ, SWEEPER_STORAGE=pg_url, PYTHONPATH=str(REPO),
               SWEEPER_CHECKPOINT_DIR=str(tmp_path / "ckpt"))
    proc = subprocess.Popen([str(SWEEPER), "run", str(spec), "--metrics-port", str(port)],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    seen = None
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                samples = scrape(port)
            except OSError:
                time.sleep(0.2)
                continue
            if value(samples, "sweeper_trials", study="served", state="RUNNING") >= 1:
                seen = samples
                break
            time.sleep(0.2)
        study = optuna.load_study(study_name="served", storage=open_storage(pg_url))
        done = len(study.get_trials(states=(TrialState.COMPLETE,)))
    finally:
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"metrics on http://0.0.0.0:{port}/metrics" in err
    assert seen is not None, "no scrape showed a RUNNING trial"
    assert value(seen, "sweeper_trials", study="served", state="COMPLETE") <= done
    assert value(seen, "sweeper_index_claim_seconds_count") >= \
        value(seen, "sweeper_trials", study="served", state="RUNNING")


@pytest.mark.slow
def test_sweeper_proxy_serves_metrics_of_every_study(tmp_path: Path, pg_url: str) -> None:
    create_or_resume(open_storage(pg_url), make_spec(name="one"))
    create_or_resume(open_storage(pg_url), make_spec(name="two", method="random"))
    port = free_port()
    with ProxyProcess(pg_url, tmp_path, metrics_port=port):
        samples = scrape(port)
    assert value(samples, "sweeper_trials", study="one", state="WAITING") == 10
    assert value(samples, "sweeper_trials", study="two", state="WAITING") == 6
    assert (tmp_path / "proxy.log").read_text().count("***") >= 1  # the URL, redacted
    assert pg_url.split(":")[2].split("@")[0] not in (tmp_path / "proxy.log").read_text()
