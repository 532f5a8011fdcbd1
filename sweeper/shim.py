"""The split pod of a ``trial.command`` sweep: what sweeper's runner (a native sidecar from
sweeper's image) and the shim in the user's container (the user's image, any image with a POSIX
``sh`` and ``sleep``) agree on. Pure: the shim's text and the names of the files they exchange
in a shared emptyDir; no I/O.

The runner claims an index and hands over the program as order ``N`` (``N.sh``, then
``N.order`` saying ``run``); the shim runs it with stdout and stderr to ``N.out`` and ``N.err``
(which the runner follows and copies to its own log), writes the program's PID to ``N.pid``
and, when it ends, its exit status to ``N.status``. The runner stops a program the pruner or a
timeout stops by signalling that PID (the pod shares one process namespace). The last order is
``exit CODE``: the shim exits with the code the runner decided, the one the Job's
``podFailurePolicy`` reads on the user's container. A SIGTERM or SIGINT the shim gets (the pod
is deleted or evicted) is passed on to the program and named in ``signal``, so the runner
records the attempt as interrupted (resumable), as a runner in the program's container would.
"""

from __future__ import annotations

from sweeper import protocol

#: The shared emptyDir's volume name and where both containers mount it.
VOLUME = "sweeper-exchange"
DIR = "/run/sweeper"
#: The runner's container: a native sidecar (an init container that keeps running).
RUNNER_CONTAINER = "sweeper-runner"
#: Written by the shim once it is up: its PID (the runner claims nothing before).
READY = "shim"
#: Written by the shim when the kubelet (or anyone) signals it: ``TERM`` or ``INT``.
SIGNAL = "signal"
#: The shim, run as ``sh -c SCRIPT sweeper-shim DIR`` (no ``$(NAME)``: Kubernetes expands it).
#: Only shell built-ins and ``sleep`` (it looks for the runner's next order every 0.05 s); an
#: image without ``sleep`` is a configuration error (the Job fails, as for a bad spec).
SCRIPT = """\
command -v sleep > /dev/null 2>&1 || {
  echo "sweeper-shim: this image has no sleep command (a command trial needs sh, sleep)" >&2
  exit @EXIT_CONFIG@
}
d=$1; n=0; pid=
on() { echo "$1" > "$d/signal"; [ -z "$pid" ] || kill -"$1" "$pid" 2>/dev/null; }
trap 'on TERM' TERM
trap 'on INT' INT
echo "$$" > "$d/shim"
while :; do
  while [ ! -f "$d/$n.order" ]; do sleep 0.05; done
  read -r verb code < "$d/$n.order"
  if [ "$verb" = exit ]; then exit "$code"; fi
  . "$d/$n.sh" > "$d/$n.out" 2> "$d/$n.err" &
  pid=$!
  echo "$pid" > "$d/$n.pid"
  while :; do wait "$pid"; s=$?; kill -0 "$pid" 2>/dev/null || break; done
  pid=
  echo "$s" > "$d/$n.status"
  n=$((n + 1))
done
""".replace("@EXIT_CONFIG@", str(protocol.EXIT_CONFIG))


def shim_command() -> list[str]:
    """The user's container's command: the shim, whatever the image's entrypoint. Kubernetes
    reads ``$(NAME)`` in a command as a variable and ``$$`` as an escaped ``$``: the shell's
    ``$$`` is written ``$$$$``."""
    return ["/bin/sh", "-c", SCRIPT.replace("$$", "$$$$"), "sweeper-shim", DIR]


def order_file(n: int) -> str:
    return f"{n}.order"


def script_file(n: int) -> str:
    return f"{n}.sh"


def stdout_file(n: int) -> str:
    return f"{n}.out"


def stderr_file(n: int) -> str:
    return f"{n}.err"


def pid_file(n: int) -> str:
    return f"{n}.pid"


def status_file(n: int) -> str:
    return f"{n}.status"


def run_order() -> str:
    return "run\n"


def exit_order(code: int) -> str:
    return f"exit {int(code)}\n"


def quote(word: str) -> str:
    """One word for ``sh``, single-quoted (the only quoting with no special characters
    inside)."""
    return "'" + word.replace("'", "'\\''") + "'"


def program_script(argv: list[str], env: dict[str, str], cwd: str | None = None) -> str:
    """``N.sh``: the trial's environment exported, then the program exec'd with ``argv``
    exactly (no word splitting, no expansion), so the PID the shim records is the program's."""
    lines = [f"export {name}={quote(value)}" for name, value in env.items()]
    if cwd is not None:
        lines.append(f"cd {quote(cwd)} || exit 127")
    lines.append("exec " + " ".join(quote(a) for a in argv))
    return "\n".join(lines) + "\n"
