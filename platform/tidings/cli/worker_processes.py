"""``tidings worker --processes N``: N worker processes of one App on one machine, supervised.

A worker is one Python process, so it uses one core. To use more, run several in the same
consumer group; each needs its own RocksDB directory and, as a static group member, its own
``group.instance.id`` (two processes sharing one fence each other: the coordinator takes the
second join as the first process restarted). This module derives both, starts the N children
(``tidings worker`` again, with ``--processes 1`` and the derived values last on the command
line, where they win) and watches them:

- instance ids ``{base}-{i}`` for i in 0..N-1, ``base`` being ``--instance-id``, else
  ``$TIDINGS_INSTANCE_ID`` (the chart sets it to the pod's name), else the host name;
- data dirs ``{data dir}/process-{i}``; metrics ports ``PORT + i`` when ``--metrics-port`` is set;
- SIGTERM or SIGINT to the supervisor: SIGTERM to every child, then SIGKILL to those still
  running after their stop grace and 5 s more; the supervisor exits 0 when every child did;
- a child that ends on its own (a fatal error exits 70): the others are stopped as above and
  the supervisor exits with that child's status (70 when it was 0 or a signal), so that the
  container's supervisor restarts the whole set: one process never idles while a sibling is
  gone, and a restart brings each back on its own id and data dir;
- the supervisor dies: the kernel SIGKILLs every child (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ..shell.runtime.children import die_with_parent

#: What a supervisor exits with when a child ended on its own without a failure status.
FATAL_EXIT = 70
#: Seconds between looks at the children.
_POLL_S = 0.2
#: Beyond the children's own stop grace, before they are SIGKILLed.
_KILL_MARGIN_S = 5.0
MAX_PROCESSES = 64


@dataclass(frozen=True, slots=True)
class Child:
    """What one child process of the set is started with."""

    index: int
    instance_id: str
    data_dir: Path
    metrics_port: int | None


def plan(count: int, *, instance_id: str | None, data_dir: Path, metrics_port: int | None,
         hostname: Callable[[], str] = socket.gethostname) -> list[Child]:
    """The ``count`` children: ids, data dirs and metrics ports, derived as the module says."""
    base = instance_id or os.environ.get("TIDINGS_INSTANCE_ID") or hostname()
    if metrics_port is not None and metrics_port + count - 1 > 65535:
        raise ValueError(f"--metrics-port {metrics_port} with --processes {count} needs ports up to "
                         f"{metrics_port + count - 1}: choose a port at most {65536 - count}")
    return [Child(i, f"{base}-{i}", data_dir / f"process-{i}",
                  None if metrics_port is None else metrics_port + i) for i in range(count)]


def command(argv: Sequence[str], child: Child) -> list[str]:
    """The child's command line: the supervisor's own ``tidings`` arguments with the child's
    values appended (argparse keeps the last of a repeated option)."""
    extra = ["--processes", "1", "--instance-id", child.instance_id, "--data-dir", str(child.data_dir)]
    if child.metrics_port is not None:
        extra += ["--metrics-port", str(child.metrics_port)]
    return [sys.executable, "-m", "tidings.cli.main", *argv, *extra]


def supervise(argv: Sequence[str], children: Sequence[Child], *, stop_grace_s: float,
              out: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> int:
    """Start ``children`` and watch them until a signal or a child's end; return the exit status."""
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    running: dict[int, tuple[Child, subprocess.Popen[bytes]]] = {}
    try:
        for child in children:
            process = subprocess.Popen(command(argv, child), preexec_fn=die_with_parent())
            running[child.index] = (child, process)
            port = "" if child.metrics_port is None else f", metrics on port {child.metrics_port}"
            out(f"tidings worker: process {child.index} (pid {process.pid}) started: instance id "
                f"{child.instance_id}, data dir {child.data_dir}{port}")
        while not stopping:
            for child, process in list(running.values()):
                code = process.poll()
                if code is None or stopping:  # a terminal's Ctrl-C reaches the children too
                    continue
                del running[child.index]
                status = code if code > 0 else FATAL_EXIT
                out(f"tidings worker: process {child.index} (pid {process.pid}, instance id "
                    f"{child.instance_id}) ended with status {code}; stopping the other "
                    f"{len(running)} and exiting {status} so that the set is restarted whole")
                _stop(running, stop_grace_s, out)
                return status
            time.sleep(_POLL_S)
        out(f"tidings worker: signal {stopping[0]}: stopping {len(running)} process(es)")
        codes = _stop(running, stop_grace_s, out)
        return 0 if all(code == 0 for code in codes) else FATAL_EXIT
    finally:
        # Whatever happened above (even an error starting the second child): none is left.
        _stop(running, 0, out, quiet=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(running: dict[int, tuple[Child, subprocess.Popen[bytes]]], grace_s: float,
          out: Callable[[str], None], *, quiet: bool = False) -> list[int]:
    """SIGTERM every running child, SIGKILL those left after ``grace_s`` + a margin; reap all."""
    for _, process in running.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s + _KILL_MARGIN_S
    codes = []
    for child, process in running.values():
        try:
            codes.append(process.wait(max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if not quiet:
                out(f"tidings worker: process {child.index} (pid {process.pid}) did not stop in "
                    f"{grace_s + _KILL_MARGIN_S:.0f} s: SIGKILL")
            process.kill()
            codes.append(process.wait())
    running.clear()
    return codes
