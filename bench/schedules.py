"""Schedule dispatch lag and memory (SPEC §6/§10; issue 10: p99 ≤ 1 s, < 1 KB per idle schedule).

Part of ``python -m bench`` (skip with ``--no-schedules``); also runs alone::

    .venv/bin/python -m bench.schedules [--quick]

which uses ``TIDINGS_BOOTSTRAP`` when set, else starts a local broker.

One worker subprocess runs ``bench.schedule_apps:app`` (8 partitions). This process registers
R schedules through the client: R - D idle ones (every day, next due tomorrow), then D that
are all due in the same second T (``every(1 h)`` anchored at T - 1 h). The worker's resident
memory is read before and after the idle ones are registered. At T the worker's dispatcher
fires the D schedules, the schedule aggregate decides their runs, the dispatcher starts them
and each run's activity notes how late it began. Two lags per run, from its due time:

- **start stored**: the timestamp of the run's ``start`` record on the workflow's inbox
  (the dispatcher's decide -> start is done; this is the dispatch lag);
- **first step began**: when the run's activity began in the worker.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import TopicPartition

from tidings.shell.runtime.connection import KafkaConnection
from tidings import ScheduleRule
from tidings.core.schedule import CatchUp, parse_run_id
from tidings.core.schedule.aggregate import CreateSchedule
from tidings.shell.client.client import Client
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from . import schedule_apps
from .aggregates import Cpu, CpuMeter
from .report import Row, alone, print_report, latency, rate

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class Workload:
    """How many schedules are registered, and how many of them are due in the same second."""

    registered: int
    due_together: int
    in_flight: int = 1000


DEFAULT = Workload(registered=100_000, due_together=10_000)
QUICK = Workload(registered=20_000, due_together=2_000)


@dataclass(frozen=True, slots=True)
class ScheduleFigures:
    workload: Workload
    create_s: float  # registering the idle schedules
    rss_per_idle_bytes: float
    stored_lags_s: list[float]
    began_lags_s: list[float]
    all_began_s: float  # due time -> the last run began
    cpu: Cpu


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def run(
    bootstrap: str,
    workload: Workload,
    *,
    workdir: Path,
    stack: ExitStack,
    progress: Callable[[str], None],
    profile: Path | None = None,
) -> ScheduleFigures:
    """Start a worker, register the schedules, measure the lag of the ones due together."""
    app_id = f"benchsched{uuid.uuid4().hex[:10]}"
    app, _ = schedule_apps.build(app_id)
    apply_topics(KafkaConnection.of(bootstrap), app.topic_specs(), out=lambda _: None)
    lag_path = workdir / "schedule-lags.log"
    worker = WorkerProcess("bench.schedule_apps:app", bootstrap=bootstrap, data_dir=workdir / "schedule-worker",
                           log_path=workdir / "schedule-worker.log",
                           env={"BENCH_SCHEDULE_APP_ID": app_id, "BENCH_SCHEDULE_LAG": str(lag_path),
                                **({"BENCH_PROFILE": str(profile)} if profile else {})},
                           cwd=ROOT)
    stack.callback(worker.stop)
    progress(f"schedules: starting worker for app {app_id} (log: {worker.log_path})")
    worker.start()
    client = Client(bootstrap, app=app)
    stack.callback(client.close)
    try:
        return asyncio.run(_drive(client, bootstrap, app_id, worker, lag_path, workload, progress))
    except BaseException:
        progress(f"the schedule worker's log ends with:\n{worker.log_tail(30)}")
        raise
    finally:
        progress(f"schedules: stopping worker (pid {worker.pid})")
        worker.stop()


async def _drive(client: Client, bootstrap: str, app_id: str, worker: WorkerProcess, lag_path: Path,
                 w: Workload, progress: Callable[[str], None]) -> ScheduleFigures:
    gate = asyncio.Semaphore(w.in_flight)
    prefix = uuid.uuid4().hex[:6]

    async def create(schedule_id: str, rule: ScheduleRule, at: datetime) -> None:
        command = CreateSchedule(workflow="tick", input=None, rule=rule.to_data(), catch_up=CatchUp.LATEST, at=at)
        async with gate:
            reply = await client.send_envelope("schedule", schedule_id, command, TIMEOUT_S)
        if reply.status != "accepted":
            raise RuntimeError(f"{schedule_id}: {reply}")

    async def create_many(ids: list[str], rule: ScheduleRule, at: datetime, what: str) -> float:
        began = time.perf_counter()
        for start in range(0, len(ids), 10_000):
            await asyncio.gather(*(create(i, rule, at) for i in ids[start:start + 10_000]))
            progress(f"schedules: {min(start + 10_000, len(ids)):,} of {len(ids):,} {what} registered")
        return time.perf_counter() - began

    daily = ScheduleRule.every(timedelta(days=1))
    warm = [f"warm-{prefix}-{n}" for n in range(1_000)]
    await create_many(warm, daily, datetime.now(UTC), "warm-up")
    await asyncio.sleep(3)  # the dispatcher folds them too
    assert worker.pid is not None
    rss_before = _rss_bytes(worker.pid)
    idle = [f"idle-{prefix}-{n}" for n in range(w.registered - w.due_together)]
    create_s = await create_many(idle, daily, datetime.now(UTC), "idle")
    await asyncio.sleep(5)
    rss_per_idle = (_rss_bytes(worker.pid) - rss_before) / max(1, len(idle))
    per_second = len(idle) / create_s if create_s > 0 else 1_000.0

    # All due in one second T, far enough ahead that they are all registered by then.
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=int(w.due_together / per_second * 1.5) + 15)
    together = [f"due-{prefix}-{n}" for n in range(w.due_together)]
    await create_many(together, ScheduleRule.every(timedelta(hours=1)), due - timedelta(hours=1), "due together")
    progress(f"schedules: {w.due_together:,} due at {due:%H:%M:%S} UTC, "
             f"in {(due - datetime.now(UTC)).total_seconds():.0f} s")
    meter = CpuMeter(worker.pid)
    await asyncio.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds() - 1))
    cpu_before = meter.read()
    began = await asyncio.to_thread(_wait_lags, lag_path, set(f"{i}@" for i in together), w.due_together, progress)
    cpu = meter.since(cpu_before)
    stored = await asyncio.to_thread(_stored_lags, bootstrap, f"{app_id}.workflow.tick.inbox", w.due_together)
    return ScheduleFigures(w, create_s, rss_per_idle, stored, began, max(began), cpu)


def _wait_lags(path: Path, prefixes: set[str], count: int, progress: Callable[[str], None]) -> list[float]:
    deadline = time.monotonic() + TIMEOUT_S
    shown = 0
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        lags = {line.split()[0]: float(line.split()[1]) for line in lines}
        if len(lags) >= count:
            return list(lags.values())
        if len(lags) // 1000 > shown:
            shown = len(lags) // 1000
            progress(f"schedules: {len(lags):,} of {count:,} runs began")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count - len(lags)} of {count} runs did not begin in {TIMEOUT_S:g} s")
        time.sleep(0.2)


def _stored_lags(bootstrap: str, topic: str, count: int) -> list[float]:
    consumer = KafkaConnection.of(bootstrap).consumer(**{"group.id": f"bench-sched-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        lags: dict[str, float] = {}
        deadline = time.monotonic() + 60
        while len(lags) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() or message.key() is None:
                    continue
                run = message.key().decode()
                _, due = parse_run_id(run)
                lags.setdefault(run, message.timestamp()[1] / 1000 - due.timestamp())
        return list(lags.values())
    finally:
        consumer.close()


def rows(f: ScheduleFigures) -> list[Row]:
    w = f.workload
    return [
        Row(f"schedule dispatch lag, due → start stored, p50 / p99 ({w.due_together:,} due in one second, "
            f"{w.registered:,} registered)", latency(f.stored_lags_s), "p99 ≤ 1 s", "—"),
        Row("schedule lag, due → the run's first step began, p50 / p99", latency(f.began_lags_s), "—", "—"),
        Row("memory per idle schedule (worker RSS growth / schedules)", f"{f.rss_per_idle_bytes:,.0f} B",
            "< 1 KB", "—"),
        Row("schedules registered through the client", rate(w.registered - w.due_together, f.create_s), "—", "—"),
    ]


def notes(f: ScheduleFigures) -> list[str]:
    w = f.workload
    return [
        f"schedule run: one worker process (8 partitions) hosts the schedule aggregate, its dispatcher and "
        f"the workflow; the last of the {w.due_together:,} runs due together began {f.all_began_s:.2f} s "
        f"after the due time. Each run is a fire command, a RunsDecided event, a start record, a report "
        f"command and a RunStarted event, then the workflow's own records.",
        f"CPU of the schedule burst: {f.cpu.describe(w.due_together, f.all_began_s).replace('command', 'run')}.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="cProfile the worker; write its stats to FILE and print the top")
    args = parser.parse_args(argv)
    with alone("tidings-bench-sched-") as (bootstrap, workdir, stack, progress):
        figures = run(bootstrap, QUICK if args.quick else DEFAULT, workdir=workdir, stack=stack,
                      progress=progress, profile=args.profile)
    print_report(rows(figures), notes(figures), args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
