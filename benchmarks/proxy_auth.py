"""Issue 28: the storage proxy's throughput with authentication and authorisation on, against
off, in one run (target: on / off >= 0.9).

The proxy runs in a child process (``python -m benchmarks.proxy_auth serve``) on a fresh
PostgreSQL database, with ``--auth`` off, or on as a trial pod's calls meet it in a cluster:
the Kubernetes authenticator with its TokenReview answered once and then cached (the
steady state: one review per token per minute), the pod's sweep checked on every call
(``sweeper.proxy.policy``, a trial's study cached). ``CLIENTS`` threads of this process
(one channel each, as pods have) call what a runner calls most: heartbeats (sweeper's JSON
service) and reports (Optuna's protobuf service), for ``SECONDS`` each round; rounds of off
and on alternate, and the medians are compared.

    python -m benchmarks.proxy_auth [--rounds 3] [--seconds 8] [--clients 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, fresh_database

SWEEP = "bench-auth"
TOKEN = "a-pods-projected-token-stand-in"


def serve(url: str, port: int, auth: bool) -> None:
    """The proxy process: auth off, or the Kubernetes authenticator whose review is stubbed
    to what the API server answers for a pod of sweep SWEEP (then cached, as in a cluster)."""
    from sweeper.backends.kubernetes.client import ClientFactory
    from sweeper.proxy.kubeauth import KubernetesAuthenticator
    from sweeper.proxy.policy import Caller
    from sweeper.proxy.server import ProxyServer

    class Reviewed(KubernetesAuthenticator):
        def _review(self, token: str) -> Caller:
            time.sleep(0.005)  # one TokenReview's round trip, paid once per token and TTL
            return Caller(f"pod sweeper/{token}", sweep=SWEEP)  # each client a pod

    authenticator = Reviewed(ClientFactory(), "sweeper") if auth else None
    server = ProxyServer(url, port=port, auth=authenticator).start()
    print("serving", flush=True)
    server.wait()


def _prepare(url: str) -> list[int]:
    """The sweep and one RUNNING trial per client."""
    from sweeper.study import create_or_resume, open_storage
    from tests.support.helpers import make_spec

    storage = open_storage(url)
    sweep, _ = create_or_resume(storage, make_spec(name=SWEEP))
    trials = [storage.attempts(sweep.study_id, i)[0].trial_id for i in range(8)]
    for t in trials:
        storage.claim(t)
    storage.close()
    return trials


def _cpu_s(pid: int) -> float:
    """A process's CPU seconds so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _round(url: str, auth: bool, trials: list[int], clients: int, seconds: float,
           workload: str) -> tuple[float, float]:
    """Calls per second served in one round, and the proxy process's CPU ms per call."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SWEEPER_BENCH_URL": url}
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.proxy_auth", "serve",
                             str(port), "on" if auth else "off"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
        from sweeper.study.remote.client import ProxyStorage

        storages = []
        for k in range(clients):  # each client its own pod's token
            os.environ["SWEEPER_PROXY_TOKEN"] = f"{TOKEN}-{k}"
            storages.append(ProxyStorage(f"grpc://127.0.0.1:{port}"))
        for st in storages:
            st.wait_ready(30)
        counts = [0] * clients
        stop = threading.Event()

        def work(k: int) -> None:
            st, trial = storages[k], trials[k % len(trials)]
            step = 0
            while not stop.is_set():
                if workload == "reads":  # light calls: the proxy's own cost weighs more
                    st.attempts(st.get_study_id_from_name(SWEEP), k % len(trials))
                    counts[k] += 2
                    continue
                st.record_heartbeat(trial)
                st.set_trial_intermediate_value(trial, step, 0.5)
                step += 1
                counts[k] += 2

        threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # warm-up: connections, caches, the one review
        start, before, cpu = time.perf_counter(), sum(counts), _cpu_s(proc.pid)
        time.sleep(seconds)
        calls = sum(counts) - before
        rate = calls / (time.perf_counter() - start)
        cpu_ms = (_cpu_s(proc.pid) - cpu) * 1000 / max(1, calls)
        stop.set()
        for t in threads:
            t.join()
        for st in storages:
            st.close()
        return rate, cpu_ms
    finally:
        proc.terminate()
        proc.wait(10)


def auth_path_us(n: int = 20000) -> dict[str, float]:
    """What the interceptor itself adds per call, without gRPC or a database (the token's
    cached review, the request decoded, the policy's cached lookups): microseconds by method."""
    import json

    from optuna.storages._grpc.auto_generated import api_pb2

    from sweeper.proxy.auth import _decode, bearer
    from sweeper.proxy.kubeauth import KubernetesAuthenticator
    from sweeper.proxy.policy import Caller, Policy, Scope

    class Reviewed(KubernetesAuthenticator):
        def _review(self, token: str) -> Caller:
            return Caller("pod sweeper/bench-0", sweep=SWEEP)

    auth = Reviewed(None, "sweeper")  # type: ignore[arg-type]
    policy = Policy(Scope(lambda trial_id: 1, lambda name: 1))
    intermediate = api_pb2.SetTrialIntermediateValueRequest
    cases = [("/sweeper.v1.IndexProtocol/Heartbeat", json.dumps({"trial_id": 5}).encode(), None),
             ("/optuna.StorageService/SetTrialIntermediateValue",
              intermediate(trial_id=5, step=1, intermediate_value=0.5).SerializeToString(),
              intermediate.FromString)]
    out = {}
    for path, raw, decode in cases:
        start = time.perf_counter()
        for _ in range(n):
            caller = auth.authenticate(bearer([("authorization", "Bearer a.b.c")]) or "")
            _, view = _decode(path, raw, decode, None, "bench")  # type: ignore[arg-type]
            assert policy.check(caller, path, view) is None
        out[path.rsplit("/", 1)[1]] = (time.perf_counter() - start) / n * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["serve"]:
        serve(os.environ["SWEEPER_BENCH_URL"], int(args[1]), args[2] == "on")
        return 0
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--workload", choices=["runner", "reads"], default="runner",
                   help="runner: heartbeats and reports (database writes); reads: a study "
                        "lookup and an index's attempts (one indexed query)")
    opts = p.parse_args(args)
    with fresh_database("auth") as (_, url):
        trials = _prepare(url)
        rates: dict[bool, list[float]] = {False: [], True: []}
        cpus: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(opts.rounds):
            for auth in (False, True):
                rate, cpu_ms = _round(url, auth, trials, opts.clients, opts.seconds,
                                      opts.workload)
                rates[auth].append(rate)
                cpus[auth].append(cpu_ms)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    cpu_off, cpu_on = statistics.median(cpus[False]), statistics.median(cpus[True])
    load = os.getloadavg()
    result: dict[str, Any] = {
        "off": rates[False], "on": rates[True], "ratio": on / off,
        "load": f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}"}
    print(f"calls/s, auth off: {', '.join(f'{r:.0f}' for r in rates[False])} "
          f"(median {off:.0f})")
    print(f"calls/s, auth on:  {', '.join(f'{r:.0f}' for r in rates[True])} "
          f"(median {on:.0f})")
    print(f"ratio on/off: {result['ratio']:.3f} (target >= 0.9); load average {result['load']}")
    print("the auth path alone: " + ", ".join(f"{k} {v:.1f} us" for k, v in
                                              auth_path_us().items()))
    print(f"proxy CPU per call: off {cpu_off:.2f} ms, on {cpu_on:.2f} ms (medians; rounds "
          f"off {', '.join(f'{c:.2f}' for c in cpus[False])}, "
          f"on {', '.join(f'{c:.2f}' for c in cpus[True])})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
