"""``python -m tests.cluster up|down|status``: start, stop or describe the local cluster."""

from __future__ import annotations

import argparse
import sys

from .control_plane import ClusterError, default_layout, down, is_up, leftovers, up


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.cluster")
    p.add_argument("command", choices=("up", "down", "status", "leaks"))
    p.add_argument("--no-build", action="store_true", help="fail instead of building binaries")
    args = p.parse_args(argv)
    lo = default_layout()
    try:
        if args.command == "up":
            seconds = up(lo, build=not args.no_build,
                         say=lambda line: print(f"cluster-up: {line}", flush=True))
            if seconds:
                print(f"cluster-up: ready in {seconds:.1f} s", flush=True)
            print("cluster ready")
            print(f"export KUBECONFIG={lo.kubeconfig}")
        elif args.command == "down":
            stopped = down(lo)
            print(f"cluster-down: stopped {', '.join(stopped) or 'nothing (nothing was running)'}; "
                  f"removed {lo.run}")
        elif args.command == "leaks":
            left = leftovers(lo)
            for line in left:
                print(f"cluster-leaks: still running: {line}", file=sys.stderr)
            return 1 if left else 0
        else:
            print("up" if is_up(lo) else "down")
            return 0 if is_up(lo) else 1
    except ClusterError as e:
        print(f"cluster-{args.command}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
