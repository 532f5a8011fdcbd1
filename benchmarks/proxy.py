"""Item 7, the storage proxy (issue 13), each side by side with the direct path:

* threshold: local sweeps of W workers (N = ``per_worker`` x W trials of ``t`` s) direct and
  through ``sweeper run --proxy`` (an in-process proxy), interleaved: wall / ideal and peak
  PostgreSQL connections per W. Where the proxy is no slower (or the direct path runs out of
  connections) is where ``sweeper run`` turns it on by default.
* connections: W = 64 workers, N = 640 trials of 0.5 s, direct vs through the proxy: peak
  connections (target: the proxy's pool + the orchestrator's, and at most 10), wall / ideal,
  executed trials per index (exactly 1.000).
* latency: a runner's claim and tell through a ``sweeper proxy`` process in studies of 100 and
  10,000 trials (target: p50 and p95 at 10,000 within 1.5x of 100).
* capacity: the proxy process's CPU-seconds per trial (claim + reports + tell, measured on a
  sweep of W workers through it), per heartbeat and per report (measured by calling it in a
  loop), and the heartbeat calls one replica serves per second; from these, the pods of
  10-minute trials one replica supports (see ``capacity_table``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.common import (
    REPO,
    ConnectionSampler,
    Disturbed,
    Row,
    fresh_database,
    median,
    summary_ms,
    undisturbed,
    verdict,
)
from benchmarks.sweeps import run_sweep, sleep_spec

#: Heartbeat interval (s) and reports per 10-minute trial assumed by the capacity figures.
HEARTBEAT_S = 5.0
TRIAL_S = 600.0
REPORTS_PER_TRIAL = 60


# --------------------------------------------------------------------------- a proxy process


class ProxyProcess:
    """``sweeper proxy`` for ``url`` on a free port (the URL travels in the environment)."""

    def __init__(self, url: str) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        env = dict(os.environ, SWEEPER_STORAGE=url,
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "sweeper"), "proxy", "--port", str(self.port),
             "--metrics-port", "0"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        from sweeper.study.remote.client import ProxyStorage

        client = ProxyStorage(self.url)
        try:
            client.wait_ready(60)
        finally:
            client.close()

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    def cpu_s(self) -> float:
        """User + system CPU seconds of the proxy process so far (all its threads)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- sweeps


def _executed_per_index(url: str, study: str) -> dict[str, Any]:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://", 1))
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT ua.value_json, t.state FROM trials t JOIN studies s "
            "ON s.study_id = t.study_id JOIN trial_user_attributes ua ON ua.trial_id = "
            "t.trial_id AND ua.key = 'sweeper:index' WHERE s.study_name = :n"),
            {"n": study}).all()
    engine.dispose()
    finished = [idx for idx, state in rows if str(state) in ("COMPLETE", "PRUNED")]
    executed = [idx for idx, state in rows if str(state) in ("COMPLETE", "PRUNED", "FAIL")]
    distinct = len(set(finished))
    return {"executed": len(executed), "finished": len(finished), "distinct": distinct,
            "per_index": len(executed) / distinct if distinct else float("nan")}


def local_sweep(w: int, n: int, t: float, proxy: bool) -> dict[str, Any]:
    """One local sweep, direct or through ``sweeper run --proxy``'s in-process proxy."""
    name = f"bench-proxy-{'on' if proxy else 'off'}"
    with fresh_database("proxy") as (db, url), ConnectionSampler(db) as sampler:
        cpu0 = time.process_time()
        run = run_sweep(url, sleep_spec(name, n, t, w), max_starting=w, proxy=proxy)
        cpu = time.process_time() - cpu0
        executed = _executed_per_index(url, name)
    if run.workers_started != w:
        raise Disturbed(f"{run.workers_started} of {w} workers started")
    return {"w": w, "n": n, "t_s": t, "proxy": proxy, "wall_s": run.wall_s,
            "ideal_s": n * t / w, "peak": sampler.peak, "orchestrator_cpu_s": cpu,
            "ready_s": run.phases.get("ready_s", []), **executed}


def threshold(ws: list[int], per_worker: int, t: float, log: Any) -> list[dict[str, Any]]:
    out = []
    for w in ws:
        for proxy in (False, True):
            r = undisturbed(partial(local_sweep, w, per_worker * w, t, proxy),
                            f"threshold W={w} proxy={proxy}", log)
            log(f"  W={w} {'proxy ' if proxy else 'direct'}: {r['wall_s']:.1f}s = "
                f"{r['wall_s'] / r['ideal_s']:.2f}x ideal, peak {r['peak']} connections")
            out.append(r)
    return out


def pays_from(runs: list[dict[str, Any]]) -> int | None:
    """The smallest W from which the proxied sweep was no slower than the direct one (2%
    tolerance: the runs are single samples on a shared machine), at every larger W too."""
    by_w: dict[int, dict[bool, float]] = {}
    for r in runs:
        by_w.setdefault(r["w"], {})[r["proxy"]] = r["wall_s"]
    ws = sorted(by_w)
    ok = [w for w in ws if by_w[w][True] <= by_w[w][False] * 1.02]
    for w in ws:
        if all(x in ok for x in ws if x >= w):
            return w
    return None


# --------------------------------------------------------------------------- latency


def latency(small: int, large: int, samples: int, log: Any) -> dict[str, Any]:
    """scaling._Study's claim + tell, with the runner's storage a ``sweeper proxy`` process
    (the resets between samples go to the database directly and are not timed)."""
    from benchmarks.scaling import _Study
    from sweeper.study import Sweep, open_storage

    with fresh_database("plat_small") as (_, url_small), \
            fresh_database("plat_large") as (_, url_large):
        log(f"proxy latency: preparing studies of {small} and {large} trials")
        studies = [_Study(url_small, small), _Study(url_large, large)]
        proxies = [ProxyProcess(url_small), ProxyProcess(url_large)]
        try:
            for s, p in zip(studies, proxies, strict=True):
                s.sweep = Sweep(open_storage(p.url), s.sweep.study_id, s.sweep.spec)
                s.sweeper_op(timed=False)
            log(f"proxy latency: {samples} claims + tells per size through the proxy, "
                "interleaved")
            for _ in range(samples):
                for s in studies:
                    s.sweeper_op(timed=True)
        finally:
            for s in studies:
                s.close()
            for p in proxies:
                p.close()
    return {str(s.n): {"claim_ms": summary_ms(s.claim), "tell_ms": summary_ms(s.tell),
                       "raw_claim_s": s.claim, "raw_tell_s": s.tell} for s in studies}


# --------------------------------------------------------------------------- capacity


def _loop_cpu(proxy: ProxyProcess, storage: Any, trial_id: int, k: int,
              call: str) -> float:
    cpu0 = proxy.cpu_s()
    for step in range(k):
        if call == "heartbeat":
            storage.record_heartbeat(trial_id)
        else:  # a report: the intermediate value and the other metrics, as ctx.report does
            storage.set_trial_intermediate_value(trial_id, step, float(step))
            storage.set_trial_user_attrs(trial_id, {"acc": 0.5, "lr": 0.01})
    return (proxy.cpu_s() - cpu0) / k


def _heartbeat_rate(url: str, trial_id: int, clients: int, seconds: float) -> float:
    from sweeper.study import open_storage

    stop = time.monotonic() + seconds
    counts = [0] * clients

    def beat(k: int) -> None:
        storage = open_storage(url)
        while time.monotonic() < stop:
            storage.record_heartbeat(trial_id)
            counts[k] += 1

    threads = [threading.Thread(target=beat, args=(k,)) for k in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(counts) / seconds


def capacity(w: int, n: int, t: float, log: Any) -> dict[str, Any]:
    from sweeper.spec import parse_spec_dict
    from sweeper.study import create_or_resume, open_storage

    name = "bench-capacity"
    with fresh_database("pcap") as (db, url), ConnectionSampler(db) as sampler:
        proxy = ProxyProcess(url)
        try:
            cpu0 = proxy.cpu_s()
            run = run_sweep(proxy.url, sleep_spec(name, n, t, w) | {
                "trial": {"entrypoint": "trial_runner.examples.synthetic:sleep",
                          "fixed": {"duration": t, "steps": 5}, "retries": 0}},
                max_starting=w)
            sweep_cpu = proxy.cpu_s() - cpu0
            executed = _executed_per_index(url, name)
            storage = open_storage(proxy.url)
            spec = parse_spec_dict(sleep_spec("bench-calls", 1, 0.0, 1), source="<bench>")
            sweep, _ = create_or_resume(storage, spec)
            [a] = storage.attempts(sweep.study_id, 0)
            storage.claim(a.trial_id)
            log("proxy capacity: per-call CPU (heartbeats, reports) and heartbeat rate")
            hb_cpu = _loop_cpu(proxy, storage, a.trial_id, 500, "heartbeat")
            report_cpu = _loop_cpu(proxy, storage, a.trial_id, 300, "report")
            rate = _heartbeat_rate(proxy.url, a.trial_id, clients=16, seconds=5.0)
            storage.close()
        finally:
            proxy.close()
    return {"w": w, "n": n, "t_s": t, "reports_per_trial": 5, "wall_s": run.wall_s,
            "workers_started": run.workers_started, "peak_connections": sampler.peak,
            "proxy_cpu_s": sweep_cpu, "cpu_per_trial_s": sweep_cpu / n,
            "cpu_per_heartbeat_s": hb_cpu, "cpu_per_report_s": report_cpu,
            "heartbeats_per_s_16_clients": rate, **executed}


def capacity_table(c: dict[str, Any]) -> dict[str, Any]:
    """Pods of 10-minute trials one replica supports, from the measured CPU costs: each pod
    per second costs a trial's fixed work over 600 s (the sweep's CPU per trial minus its
    5 reports), a heartbeat every 5 s and a report every 10 s; one replica serves one core
    (its handlers hold the GIL). The heartbeat rate measured under load bounds it too."""
    fixed = max(0.0, c["cpu_per_trial_s"] - c["reports_per_trial"] * c["cpu_per_report_s"])
    per_pod_cpu_per_s = fixed / TRIAL_S + c["cpu_per_heartbeat_s"] / HEARTBEAT_S \
        + REPORTS_PER_TRIAL * c["cpu_per_report_s"] / TRIAL_S
    pods_cpu = 1.0 / per_pod_cpu_per_s if per_pod_cpu_per_s else float("inf")
    pods_rate = c["heartbeats_per_s_16_clients"] * HEARTBEAT_S
    return {"fixed_cpu_per_trial_s": fixed, "cpu_per_pod_per_s": per_pod_cpu_per_s,
            "pods_per_replica_cpu": pods_cpu, "pods_per_replica_heartbeat_rate": pods_rate,
            "pods_per_replica": min(pods_cpu, pods_rate),
            "trials_per_s_per_replica": 1.0 / c["cpu_per_trial_s"]}


# --------------------------------------------------------------------------- item


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    raw: dict[str, Any] = {}
    rows: list[Row] = []

    ws, per_w, t = sizes["px_threshold_ws"], sizes["px_threshold_per_w"], sizes["px_threshold_t"]
    log(f"proxy threshold: W in {ws}, {per_w} trials of {t}s per worker, direct vs --proxy")
    runs = threshold(ws, per_w, t, log)
    raw["threshold"] = runs
    pays = pays_from(runs)
    table = "; ".join(
        f"W={w}: direct {r0['wall_s'] / r0['ideal_s']:.2f}x ({r0['peak']} conn), proxy "
        f"{r1['wall_s'] / r1['ideal_s']:.2f}x ({r1['peak']} conn)"
        for w in ws for r0 in runs if r0["w"] == w and not r0["proxy"]
        for r1 in runs if r1["w"] == w and r1["proxy"])
    rows.append(Row("proxy threshold: local wall/ideal by W", table,
                    "where the proxy is no slower", "INFO", {"pays_from_w": pays}))

    w, n, t = sizes["px_conn_w"], sizes["px_conn_n"], sizes["px_conn_t"]
    log(f"proxy connections: W={w}, N={n}, t={t}s, direct and through the proxy")
    direct = undisturbed(partial(local_sweep, w, n, t, False), "proxy conn direct", log)
    proxied = undisturbed(partial(local_sweep, w, n, t, True), "proxy conn proxied", log)
    raw["connections"] = {"direct": direct, "proxied": proxied}
    from sweeper.proxy.server import DEFAULT_MAX_OVERFLOW, DEFAULT_POOL_SIZE

    budget = min(10, DEFAULT_POOL_SIZE + DEFAULT_MAX_OVERFLOW + 2)
    rows.append(Row(f"peak connections W={w} through the proxy",
                    f"proxy {proxied['peak']} vs direct {direct['peak']}",
                    f"<= pool + orchestrator = {budget}, <= 10",
                    verdict(proxied["peak"] <= budget), {"proxied": proxied["peak"],
                                                         "direct": direct["peak"]}))
    px, dx = (r["wall_s"] / r["ideal_s"] for r in (proxied, direct))
    rows.append(Row(f"wall/ideal W={w} N={n} t={t}s",
                    f"proxy {proxied['wall_s']:.1f}s = {px:.2f}x, direct "
                    f"{direct['wall_s']:.1f}s = {dx:.2f}x (ideal {direct['ideal_s']:.1f}s)",
                    "-", "INFO", {"proxy": px, "direct": dx}))
    dup_ok = proxied["per_index"] == 1.0 and direct["per_index"] == 1.0 \
        and proxied["distinct"] == n and direct["distinct"] == n
    rows.append(Row(f"executed trials per index W={w}",
                    f"proxy {proxied['per_index']:.3f} ({proxied['executed']} runs, "
                    f"{proxied['distinct']} indexes), direct {direct['per_index']:.3f}",
                    "exactly 1.000", verdict(dup_ok), {}))

    small, large = sizes["latency_sizes"]
    lat = undisturbed(partial(latency, small, large, sizes["latency_samples"], log),
                      "proxy latency", log)
    raw["latency"] = lat
    s, g = lat[str(small)], lat[str(large)]
    for key, what in (("claim_ms", "claim"), ("tell_ms", "tell")):
        for q in ("p50", "p95"):
            r = g[key][q] / s[key][q]
            rows.append(Row(f"{what} latency {q} through the proxy {large:,}/{small:,} trials",
                            f"{g[key][q]:.2f} / {s[key][q]:.2f} ms = {r:.2f}", "<= 1.5",
                            verdict(r <= 1.5), {"ratio": r}))

    w, n, t = sizes["px_cap_w"], sizes["px_cap_n"], sizes["px_cap_t"]
    log(f"proxy capacity: W={w}, N={n} trials of {t}s through a proxy process")
    cap = undisturbed(partial(capacity, w, n, t, log), "proxy capacity", log)
    table_ = capacity_table(cap)
    raw["capacity"] = {**cap, **table_}
    rows.append(Row("proxy CPU per trial (claim + 5 reports + tell)",
                    f"{cap['cpu_per_trial_s'] * 1000:.1f} ms CPU (W={w}, N={n}); heartbeat "
                    f"{cap['cpu_per_heartbeat_s'] * 1000:.2f} ms, report "
                    f"{cap['cpu_per_report_s'] * 1000:.2f} ms; {cap['peak_connections']} "
                    "connections", "-", "INFO", {}))
    rows.append(Row("one proxy replica, pods of 10-minute trials",
                    f"{table_['trials_per_s_per_replica']:.0f} trials/s; "
                    f"{table_['pods_per_replica_cpu']:,.0f} pods by CPU, "
                    f"{table_['pods_per_replica_heartbeat_rate']:,.0f} by heartbeat rate "
                    f"({cap['heartbeats_per_s_16_clients']:.0f}/s measured)", "-", "INFO", {}))
    return rows, raw


def main() -> int:
    """``python -m benchmarks.proxy threshold [W ...]``: only the threshold measurement."""
    import json

    ws = [int(x) for x in sys.argv[2:]] or [8, 16, 32, 64]
    runs = threshold(ws, 4, 1.0, lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps({"runs": [{k: v for k, v in r.items() if k != "ready_s"} for r in runs],
                      "pays_from_w": pays_from(runs), "median_ready_s": [
                          median(r["ready_s"]) for r in runs]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
