"""One worker against ``tidings worker --processes 2`` on the one-activity row (issue 20).

Part of ``python -m bench`` (skip with ``--no-processes``); also runs alone::

    .venv/bin/python -m bench.processes [--quick]

For each of 1 and 2 worker processes, in that order and back to back: a fresh app
(``bench.workflow_apps``, 4 partitions), its worker started (``--processes 2`` for the second),
the group waited for until every process holds partitions, 16 instances to warm up, then N
``one-activity`` workflows started at once, first start → last outcome. Beside each figure:
the CPU the machine had left free meanwhile (``/proc/stat``), since the broker and this
process (the client) share the same two cores with the workers.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.processes import WorkerProcess
from tidings.testing.topics import group_assignment

from . import workflow_apps
from .report import Row, alone, print_report, rate

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300.0
WARM = 16


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """Seconds for ``count`` one-activity workflows, and the machine's CPU left free, per process count."""

    count: int
    seconds: dict[int, float]
    free: dict[int, float]


def cpu_times() -> tuple[float, float]:
    """(idle, total) jiffies of the whole machine."""
    with open("/proc/stat") as stat:
        fields = [float(x) for x in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def run(bootstrap: str, count: int, *, workdir: Path, stack: ExitStack,
        progress: Callable[[str], None], counts: tuple[int, ...] = (1, 2)) -> ProcessFigures:
    """Measure the one-activity row with each number of worker processes in ``counts``."""
    seconds: dict[int, float] = {}
    free: dict[int, float] = {}
    for processes in counts:
        seconds[processes], free[processes] = _one(bootstrap, count, processes, workdir, stack, progress)
    return ProcessFigures(count, seconds, free)


def _one(bootstrap: str, count: int, processes: int, workdir: Path, stack: ExitStack,
         progress: Callable[[str], None]) -> tuple[float, float]:
    app_id = f"benchwfp{processes}{uuid.uuid4().hex[:10]}"
    app = workflow_apps.build(app_id)
    apply_topics(KafkaConnection.of(bootstrap), app.topic_specs(), out=lambda _: None)
    handle: Any = {h.name: h for h in app.workflows}["one-activity"]
    worker = WorkerProcess("bench.workflow_apps:app", bootstrap=bootstrap, data_dir=workdir / f"{app_id}-data",
                           log_path=workdir / f"{app_id}.log",
                           env={"BENCH_WORKFLOW_APP_ID": app_id, "TIDINGS_INSTANCE_ID": "bench"},
                           cwd=ROOT, args=("--processes", str(processes)))
    stack.callback(worker.stop)
    progress(f"processes: {processes} worker process(es) for app {app_id} (log: {worker.log_path})")
    worker.start()
    deadline = time.monotonic() + 120
    while True:
        held = group_assignment(bootstrap, app_id, f"{app_id}.workflow.one-activity.inbox")
        if len(held) == processes and all(held.values()):
            break
        if not worker.running or time.monotonic() > deadline:
            raise RuntimeError(f"{processes} worker process(es) did not join:\n{worker.log_tail(30)}")
        time.sleep(0.5)

    async def drive() -> tuple[float, float]:
        await asyncio.gather(*(handle.start(f"warm-{n}", n, bootstrap=bootstrap) for n in range(WARM)))
        await asyncio.gather(*(handle.value(f"warm-{n}", TIMEOUT_S, bootstrap=bootstrap) for n in range(WARM)))
        idle, total = cpu_times()
        began = time.perf_counter()
        await asyncio.gather(*(handle.execute(f"p-{n}", n, TIMEOUT_S, bootstrap=bootstrap) for n in range(count)))
        elapsed = time.perf_counter() - began
        idle_after, total_after = cpu_times()
        return elapsed, (idle_after - idle) / max(1.0, total_after - total)

    progress(f"processes: {count:,} one-activity workflows at once, {processes} process(es)")
    try:
        return asyncio.run(drive())
    finally:
        # Closed here, not at the end of the bench: an idle client of a stopped app would warn
        # that its readers are deaf while the next app is measured.
        handle.close()
        for client in list(app._clients.values()):
            client.close()
        worker.stop()


def rows(f: ProcessFigures) -> list[Row]:
    """The row of issue 20: two processes against one, with the CPU left free beside each."""
    if 1 not in f.seconds or 2 not in f.seconds:
        return []
    one, two = f.count / f.seconds[1], f.count / f.seconds[2]
    return [Row(f"one-activity workflows, two worker processes of one app (--processes 2) ÷ one "
                f"({f.count:,} at once)",
                f"{two / one:.2f} × ({rate(f.count, f.seconds[2])} vs {rate(f.count, f.seconds[1])}; "
                f"CPU left free {f.free[2]:.0%} vs {f.free[1]:.0%})", "≥ 1.5 ×",
                "broker and client on the same 2 cores")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.processes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 workflows instead of 2,000")
    args = parser.parse_args(argv)
    with alone("tidings-bench-processes-") as (bootstrap, workdir, stack, progress):
        figures = run(bootstrap, 1000 if args.quick else 2000, workdir=workdir, stack=stack, progress=progress)
    print_report(rows(figures), [], None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
