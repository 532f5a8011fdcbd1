"""Objectives the Kubernetes end-to-end tests run inside pods (imported by the runner as
``tests.support.k8s_objectives:NAME``: the test image holds this repository's tests/ under
its working directory)."""

from __future__ import annotations

import time

from trial_runner.context import TrialContext


def flaky(ctx: TrialContext) -> float:
    """Index 0 raises on its first attempt (the runner exits RETRY: the pod fails and the Job
    replaces it); index 1 always returns NaN (the runner exits NO_RETRY: FailIndex)."""
    if ctx.index == 0 and ctx.attempt == 0:
        raise RuntimeError("flaky: the first attempt of index 0 fails")
    if ctx.index == 1:
        return float("nan")
    print(f"objective output of index {ctx.index}", flush=True)
    return float(ctx.index)


def slow(ctx: TrialContext) -> float:
    """Takes ``delay`` seconds (fixed), reporting as it goes: long enough to cancel mid-trial."""
    delay = float(ctx.params.get("delay", 1.0))
    for step in range(4):
        time.sleep(delay / 4)
        ctx.report(step, loss=float(ctx.index) + 4 - step)
    print(f"objective output of index {ctx.index}", flush=True)
    return float(ctx.index)


def fails_on_index_1(ctx: TrialContext) -> float:
    """Index 1 raises on every attempt (a retryable failure each time, until the Job's
    backoffLimitPerIndex is spent); every other index returns its number."""
    if ctx.index == 1:
        raise RuntimeError(f"fails_on_index_1: attempt {ctx.attempt} of index 1 fails")
    return float(ctx.index)


def always_fails(ctx: TrialContext) -> float:
    """Every attempt raises the same error: a deterministic bug."""
    raise KeyError("step")


def hog(ctx: TrialContext) -> float:
    """Index 0 allocates ``mb`` MiB (fixed) in the runner's own process and touches every page,
    past any small memory limit: on a real node the kernel OOM-kills the container. Every other
    index returns its number."""
    if ctx.index == 0:
        block = bytearray(int(ctx.params["mb"]) * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        print(f"hog: index 0 holds {len(block) >> 20} MiB", flush=True)
    return float(ctx.index)


def inspect_pod(ctx: TrialContext) -> float:
    """What the container gives the trial, as trial attributes: its user, whether the root
    filesystem takes a write, where HOME and temporary files go and whether they take one, the
    size of /dev/shm, and the kernel's view of its privileges (/proc/self/status: effective
    capabilities, no_new_privs, seccomp mode)."""
    import os
    import tempfile
    from pathlib import Path

    try:
        Path("/app/probe").write_text("x")
        root_writable = True
    except OSError:
        root_writable = False
    home = Path(os.environ["HOME"], "probe")
    home.write_text("x")
    with tempfile.NamedTemporaryFile() as f:
        tmp = f.name
    shm = os.statvfs("/dev/shm")
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text()
                  .splitlines() if ":" in line)
    ctx.set("pod", {"uid": os.getuid(), "gid": os.getgid(), "root_writable": root_writable,
                    "home": str(home.parent), "tmp": str(Path(tmp).parent),
                    "shm_bytes": shm.f_blocks * shm.f_frsize,
                    "cap_eff": status["CapEff"].strip(),
                    "no_new_privs": status["NoNewPrivs"].strip(),
                    "seccomp": status["Seccomp"].strip()})
    return float(ctx.index)
