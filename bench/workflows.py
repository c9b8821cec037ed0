"""Workflows through one worker, and replay / idle memory in-process (SPEC §10's workflow rows).

Part of ``python -m bench`` (skip with ``--no-workflows``); also runs alone::

    .venv/bin/python -m bench.workflows [--quick]

which uses ``TIDINGS_BOOTSTRAP`` when set, else starts a local broker.

One worker subprocess runs ``bench.workflow_apps:app`` (4 partitions). In order:

1. idle latency: one ``one-activity`` instance at a time, start → outcome;
2. throughput: N ``one-activity`` instances started at once, first start → last outcome;
2b. flow (skip with ``--no-flows``): the worker also runs ``app.workflow_flow`` from
   ``{app}.flow-source`` through ``one-activity`` to ``{app}.flow-sink`` with parallelism 64;
   F JSON elements written at once by a raw producer, first write → last outcome read from
   the sink (elements/s, next to the row above: SPEC's target is ≥ 80 % of it). For
   reference, F ``one-activity`` workflows from this process with at most 64 between start
   and outcome (the flow's bound, without the flow);
3. ten steps: M ``ten-steps`` instances at once; ten activity steps each, steps/s;
3b. sends: S ``one-send`` instances at once, each one ``ctx.send`` to an aggregate hosted by
   the same worker, first start → last outcome (send round trips/s);
4. recovery: K ``slow-activity`` instances (the activity sleeps in its thread) started, the
   worker SIGKILLed while they are in flight, restarted on the same data dir: restart →
   all K outcomes read back.

With ``exactly_once`` the worker runs with ``TIDINGS_PROCESSING_GUARANTEE=exactly_once`` and
only 1, 2 and 3 are measured (the rows issue 11 compares between the guarantees). Either way
the worker serves its Prometheus metrics on a free port, scraped right before and right after
1, 2, 2b and 3 (``bench.scrape``).

Pure, in this process (no broker): replay of a 1,000 / 10,000 / 50,000-step journal built by
the in-memory interpreter, and memory per idle instance waiting on a signal (tracemalloc
over 1,000 instances).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidings.shell.runtime.connection import KafkaConnection
from tidings.core.workflow import (
    ActivityResult,
    JournalRecord,
    Retry,
    Start,
    WorkflowContext,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
    replay,
)
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from tidings.shell.runtime.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from . import hops, workflow_apps
from .aggregates import Cpu, CpuMeter
from .report import (
    EXACTLY_ONCE_LATENCY_TARGET,
    EXACTLY_ONCE_TARGET,
    Row,
    alone,
    latency,
    p50,
    print_report,
    rate,
    ratio,
    versus,
)
from .scrape import Phase, Scraper, describe, free_port, worker_env

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Workload:
    """How much to run."""

    latency_runs: int
    one_activity: int
    ten_steps: int
    recovery: int
    recovery_sleep_s: float
    sends: int = 2000
    flow: int = 2000
    replay_steps: tuple[int, ...] = (1_000, 10_000, 50_000)


#: The warm-up before the idle latency, as the peers' benches run it (not measured).
WARM_ONE, WARM_TEN = 200, 20

DEFAULT = Workload(latency_runs=200, one_activity=2000, ten_steps=500, recovery=2000, recovery_sleep_s=0.05)
QUICK = Workload(latency_runs=50, one_activity=1000, ten_steps=200, recovery=2000, recovery_sleep_s=0.05,
                 sends=1000, flow=1000)


@dataclass(frozen=True, slots=True)
class WorkflowFigures:
    """What one run measured (seconds)."""

    workload: Workload
    latencies_s: list[float]
    one_activity_s: float
    ten_steps_s: float
    replay_s: dict[int, float]
    idle_bytes: float
    # None when not measured (an exactly-once run measures latency, one-activity, ten-steps).
    sends_s: float | None = None
    kill_after_s: float | None = None
    recovery_s: float | None = None
    first_after_restart_s: float | None = None
    # Recovery: slow-activity bodies that ran to the end twice, and that started twice.
    bodies_twice: int | None = None
    bodies_started_twice: int | None = None
    recovery_phases: str = ""
    hop_notes: tuple[str, ...] | list[str] = ()
    flow_s: float | None = None
    bounded_s: float | None = None
    one_activity_cpu: Cpu | None = None
    flow_cpu: Cpu | None = None
    ten_steps_cpu: Cpu | None = None
    exactly_once: bool = False
    latency_phase: Phase = Phase()
    one_activity_phase: Phase = Phase()
    flow_phase: Phase = Phase()
    ten_steps_phase: Phase = Phase()


def run(
    bootstrap: str,
    workload: Workload,
    *,
    workdir: Path,
    stack: ExitStack,
    progress: Callable[[str], None],
    flows: bool = True,
    exactly_once: bool = False,
    brief: bool = False,
) -> WorkflowFigures:
    """Start a worker, drive it, SIGKILL and restart it, stop it; measure replay and memory.

    With ``flows``, the worker also runs the flow stage and the flow row is measured. With
    ``exactly_once`` the worker runs exactly-once and only the latency, one-activity and
    ten-step phases run (no flow, sends, recovery; replay and memory are not measured again);
    ``brief`` runs only those phases too, at least once (the three-node rows).
    """
    short = exactly_once or brief
    flows = flows and not short
    replay_s: dict[int, float] = {}
    idle_bytes = float("nan")
    if not short:
        progress("workflows: replay of " + " / ".join(f"{n:,}" for n in workload.replay_steps)
                 + "-step journals (in-process)")
        replay_s = replay_seconds(workload.replay_steps)
        progress("workflows: memory per idle instance waiting on a signal (tracemalloc)")
        idle_bytes = idle_instance_bytes()

    app_id = f"benchwf{'eos' if exactly_once else ''}{uuid.uuid4().hex[:10]}"
    app = workflow_apps.build(app_id, flow=flows)
    apply_topics(KafkaConnection.of(bootstrap), app.topic_specs(), out=lambda _: None)
    if flows:
        # The flow's source is a producer's topic, not the app's: made here, before the
        # worker checks that it exists.
        admin = KafkaConnection.of(bootstrap).admin()
        for future in admin.create_topics([NewTopic(workflow_apps.flow_source(app_id),
                                                    num_partitions=workflow_apps.PARTITIONS,
                                                    replication_factor=1)]).values():
            future.result(30)
    handles = {h.name: h for h in app.workflows}
    for handle in handles.values():
        stack.callback(handle.close)
    for client in list(app._clients.values()):
        stack.callback(client.close)

    # A restarted worker (recovery) binds the same port again: its predecessor is dead by then.
    port = free_port()
    bodies = workdir / f"{app_id}-bodies.log"

    def worker(name: str) -> WorkerProcess:
        process = WorkerProcess("bench.workflow_apps:app", bootstrap=bootstrap,
                                data_dir=workdir / f"{app_id}-worker",
                                log_path=workdir / f"{app_id}-{name}.log",
                                env={"BENCH_WORKFLOW_APP_ID": app_id,
                                     "BENCH_WORKFLOW_FLOW": "1" if flows else "0",
                                     "TIDINGS_INSTANCE_ID": "wf-worker",
                                     "BENCH_WORKFLOW_BODIES": str(bodies),
                                     **worker_env(port, exactly_once=exactly_once)}, cwd=ROOT)
        stack.callback(process.stop)
        return process

    first = worker("wf-worker")
    guarantee = "exactly-once" if exactly_once else "at-least-once"
    progress(f"workflows: starting worker for app {app_id}, {guarantee}, metrics on port {port} "
             f"(log: {first.log_path})")
    first.start()
    started = [first]

    def another(name: str) -> WorkerProcess:
        started.append(worker(name))
        return started[-1]

    try:
        figures = asyncio.run(_drive(bootstrap, handles, workload, first, another, progress,
                                     app_id if flows else None, Scraper(port),
                                     full=not short))
    except BaseException:
        progress(f"the workflow worker's log ends with:\n{started[-1].log_tail(30)}")
        raise
    finally:
        progress(f"workflows: stopping worker (pid {started[-1].pid})")
        started[-1].stop()
    calls = figures.pop("latency_calls")
    try:
        figures["hop_notes"] = hops.summary(hops.split(bootstrap, app_id, "one-activity", calls))
    except Exception as exc:  # noqa: BLE001 - an explanation, not a figure: never fail the run for it
        figures["hop_notes"] = [f"hops: not split ({type(exc).__name__}: {exc})"]
    if figures.get("recovery_s") is not None:
        figures["bodies_twice"], figures["bodies_started_twice"] = workflow_apps.bodies_twice(str(bodies))
    return WorkflowFigures(workload=workload, replay_s=replay_s, idle_bytes=idle_bytes,
                           exactly_once=exactly_once, **figures)


async def _drive(
    bootstrap: str,
    handles: dict[str, Any],
    w: Workload,
    first: WorkerProcess,
    worker: Callable[[str], WorkerProcess],
    progress: Callable[[str], None],
    flow_app: str | None,
    scraper: Scraper,
    *,
    full: bool = True,
) -> dict[str, Any]:
    one, ten, slow = handles["one-activity"], handles["ten-steps"], handles["slow-activity"]
    sends = handles["one-send"]
    run_id = uuid.uuid4().hex[:6]

    async def all_at_once(handle: Any, prefix: str, count: int, input: Callable[[int], Any]) -> float:
        # execute: start and wait, one inbox record per instance (start + value is two).
        began = time.perf_counter()
        await asyncio.gather(*(handle.execute(f"{prefix}-{n}", input(n), TIMEOUT_S, bootstrap=bootstrap)
                               for n in range(count)))
        return time.perf_counter() - began

    async def bounded(handle: Any, prefix: str, count: int, at_most: int) -> float:
        # As the flow stage does from its worker: start, await the outcome, next.
        slots = asyncio.Semaphore(at_most)

        async def one_element(n: int) -> None:
            async with slots:
                await handle.execute(f"{prefix}-{n}", n, TIMEOUT_S, bootstrap=bootstrap)

        began = time.perf_counter()
        await asyncio.gather(*(one_element(n) for n in range(count)))
        return time.perf_counter() - began

    progress("workflows: warming up (first outcome once the worker has joined)")
    warm = ((one, 0), (ten, 0), (slow, 0.0), (sends, 0)) if full else ((one, 0), (ten, 0))
    for handle, value in warm:
        await handle.start(f"warm-{run_id}", value, bootstrap=bootstrap)
        await handle.value(f"warm-{run_id}", TIMEOUT_S, bootstrap=bootstrap)
    # As the peers' benches warm up (../shared/peers/*/bench.py: 200 one-step at once and 20
    # ten-step, not measured): every partition's first run, and the client's first wait on
    # each outcomes partition, are not the idle latency.
    progress(f"workflows: warming up like the peers: {WARM_ONE} one-activity at once, {WARM_TEN} ten-step")
    await all_at_once(one, f"warm1-{run_id}", WARM_ONE, lambda n: n)
    await all_at_once(ten, f"warm10-{run_id}", WARM_TEN, lambda n: n)

    progress(f"workflows: one-activity latency, {w.latency_runs} runs one at a time")
    scraped = scraper.before()
    latencies = []
    calls: dict[str, tuple[float, float]] = {}  # wall clock, for the hops (bench.hops)
    for n in range(w.latency_runs):
        called = time.time()
        began = time.perf_counter()
        await one.execute(f"lat-{n}", n, TIMEOUT_S, bootstrap=bootstrap)
        latencies.append(time.perf_counter() - began)
        calls[f"lat-{n}"] = (called, time.time())
    latency_phase = scraper.since(scraped)

    progress(f"workflows: {w.one_activity:,} one-activity workflows at once")
    assert first.pid is not None
    meter = CpuMeter(first.pid)
    scraped = scraper.before()
    before = meter.read()
    one_s = await all_at_once(one, "thr", w.one_activity, lambda n: n)
    one_cpu = meter.since(before)
    one_phase = scraper.since(scraped)
    flow_s = flow_cpu = bounded_s = None
    flow_phase = Phase()
    if flow_app is not None:
        progress(f"workflows: flow: {w.flow:,} elements at once through one-activity, parallelism "
                 f"{workflow_apps.FLOW_PARALLELISM}, topic to topic")
        scraped = scraper.before()
        before = meter.read()
        flow_s = await asyncio.to_thread(flow_seconds, bootstrap, flow_app, w.flow)
        flow_cpu = meter.since(before)
        flow_phase = scraper.since(scraped)
        progress(f"workflows: {w.flow:,} one-activity workflows from this client, at most "
                 f"{workflow_apps.FLOW_PARALLELISM} in flight (the flow's bound, for reference)")
        bounded_s = await bounded(one, "bound", w.flow, workflow_apps.FLOW_PARALLELISM)
    progress(f"workflows: {w.ten_steps:,} ten-step workflows at once")
    scraped = scraper.before()
    before = meter.read()
    ten_s = await all_at_once(ten, "ten", w.ten_steps, lambda n: n)
    ten_cpu = meter.since(before)
    ten_phase = scraper.since(scraped)
    measured = dict(latencies_s=latencies, latency_calls=calls, one_activity_s=one_s, one_activity_cpu=one_cpu,
                    flow_s=flow_s, flow_cpu=flow_cpu, bounded_s=bounded_s, ten_steps_s=ten_s,
                    ten_steps_cpu=ten_cpu, latency_phase=latency_phase,
                    one_activity_phase=one_phase, flow_phase=flow_phase, ten_steps_phase=ten_phase)
    if not full:
        return measured
    progress(f"workflows: {w.sends:,} one-send workflows at once (workflow → aggregate round trips)")
    sends_s = await all_at_once(sends, "send", w.sends, lambda n: n)

    progress(f"workflows: recovery: starting {w.recovery:,} workflows whose activity sleeps "
             f"{w.recovery_sleep_s * 1000:.0f} ms")
    began = time.perf_counter()
    await asyncio.gather(*(slow.start(f"rec-{n}", w.recovery_sleep_s, bootstrap=bootstrap)
                           for n in range(w.recovery)))
    await asyncio.sleep(0.3)  # the worker has taken up the starts; activities are running
    kill_after_s = time.perf_counter() - began
    first.kill()
    progress(f"workflows: worker SIGKILLed {kill_after_s:.2f} s after the first start; restarting it "
             "on the same data dir")
    restarted = worker("wf-worker-restarted")
    began = time.perf_counter()
    restart_wall = time.time()
    restarted.start()
    ended: list[float] = []

    async def outcome(n: int) -> None:
        await slow.value(f"rec-{n}", TIMEOUT_S, bootstrap=bootstrap)
        ended.append(time.perf_counter() - began)

    await asyncio.gather(*(outcome(n) for n in range(w.recovery)))
    recovery_s = max(ended)
    progress(f"workflows: all {w.recovery:,} finished {recovery_s:.2f} s after the restart")
    return dict(measured, sends_s=sends_s, kill_after_s=kill_after_s, recovery_s=recovery_s,
                first_after_restart_s=min(ended),
                recovery_phases=recovery_phases(restarted.log_tail(400), restart_wall))


#: What the restarted worker's log says, and when: (label, the line's text).
_PHASES = (("imports done", "[^Worker]: Starting..."), ("joined", "Worker ready: joined group"),
           ("last catch-up began", "from the journal: offsets"))


def recovery_phases(log: str, restart_wall: float) -> str:
    """When, after the restart, the restarted worker's log says it got past each phase."""
    import datetime as dt

    found: dict[str, float] = {}
    for line in log.splitlines():
        for label, text in _PHASES:
            if text in line and line.startswith("[") and (label not in found or label.startswith("last")):
                try:
                    at = dt.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                except ValueError:
                    continue
                found[label] = at - restart_wall
    return ", ".join(f"{label} {found[label]:.2f} s" for label, _ in _PHASES if label in found)


def flow_seconds(bootstrap: str, app_id: str, count: int) -> float:
    """Seconds from writing ``count`` elements to the flow's source to reading their last outcome.

    A raw producer writes JSON ints spread evenly over the source's partitions, as any
    producer could; a raw consumer reads the sink. One element goes through first, so the
    worker's flow consumer has joined before the clock starts.

    Raises:
        RuntimeError: An outcome is not the ``finished`` ``n + 1`` of its element.
    """
    source, sink = workflow_apps.flow_source(app_id), workflow_apps.flow_sink(app_id)
    consumer = KafkaConnection.of(bootstrap).consumer(**{"group.id": f"bench-flow-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(sink, p, 0) for p in range(workflow_apps.PARTITIONS)])
    producer = KafkaConnection.of(bootstrap).producer(**{"linger.ms": 5, "enable.idempotence": True})

    def write(numbers: range) -> None:
        for n in numbers:
            producer.produce(source, str(n).encode(), partition=n % workflow_apps.PARTITIONS)
        producer.flush(30)

    def outcomes(numbers: range) -> None:
        waiting = {f"flow-{n}": n for n in numbers}
        deadline = time.monotonic() + TIMEOUT_S
        while waiting:
            if time.monotonic() > deadline:
                raise RuntimeError(f"flow: {len(waiting):,} outcomes missing after {TIMEOUT_S:.0f} s")
            for message in consumer.consume(1000, 0.1):
                value = message.value()
                if message.error() is not None or value is None:
                    continue
                body = json.loads(value)
                n = waiting.pop(body["id"], None)
                if n is not None and (body["outcome"], body.get("value")) != ("finished", n + 1):
                    raise RuntimeError(f"flow: element {n} ended {body}")

    try:
        write(range(10**9, 10**9 + 1))  # the warm-up element
        outcomes(range(10**9, 10**9 + 1))
        began = time.perf_counter()
        write(range(count))
        outcomes(range(count))
        return time.perf_counter() - began
    finally:
        consumer.close()


# -- pure measurements ------------------------------------------------------------------


async def _loop_body(ctx: WorkflowContext, steps: int) -> int:
    total = 0
    for _ in range(steps):
        total += await ctx.activity("add", Retry.none, lambda a: 1, type=int)
    return total


def _journal(definition: WorkflowDefinition, steps: int) -> list[JournalRecord]:
    """Run a definition whose every step is one activity, feeding results directly."""
    instance = WorkflowInstance(definition, "i")
    records = list(instance.advance(Start(steps), 0).records)
    now = 0
    while instance.status is WorkflowStatus.RUNNING:
        now += 1
        (path,) = instance.pending_paths
        records += instance.advance(ActivityResult(path, 1, 1), now).records
    return records


def replay_seconds(lengths: tuple[int, ...]) -> dict[int, float]:
    """Seconds to replay a journal of each length (all but the outcome record, so it decides)."""
    definition = define_workflow("loop", _loop_body)
    timings = {}
    for steps in lengths:
        records = _journal(definition, steps)
        began = time.perf_counter()
        replay(definition, "i", records[:-1], 10**12)
        timings[steps] = time.perf_counter() - began
    return timings


def idle_instance_bytes(count: int = 1_000) -> float:
    """Bytes allocated per instance left waiting on a signal (tracemalloc, ``count`` instances)."""

    async def idle(ctx: WorkflowContext, _: None) -> object:
        return await ctx.wait_signal("wake")

    definition = define_workflow("idle", idle)
    instances = []
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(count):
            instance = WorkflowInstance(definition, f"i-{n}")
            instance.advance(Start(None), 0)
            instances.append(instance)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")) / len(instances)


# -- the table --------------------------------------------------------------------------


#: The one-activity path's Kafka hops, in order (docs/architecture.md, "How a workflow flows"):
#: each is at least one raw single-record round trip. The activity itself is no hop (it runs in
#: the worker); the Started/StepStarted ack may overlap it when its input depends on nothing
#: unacknowledged, so the sum is an upper bound of what Kafka alone costs.
ONE_ACTIVITY_HOPS = (
    "start: client produce → inbox consume",
    "journal produce + ack (Started, StepStarted)",
    "journal produce + ack (StepCompleted, Ended)",
    "outcome: produce → client consume",
)
ONE_ACTIVITY_LATENCY_TARGET = "≤ 4 / ≤ 10 ms"
ROUND_TRIP_RATIO_TARGET = 4.0


def rows(f: WorkflowFigures, raw_e2e: str = "—", raw_round_trips_s: Sequence[float] = ()) -> list[Row]:
    """The workflow rows of the bench table, each against issue 11's target (else SPEC §10's)."""
    w = f.workload
    raw_latency = latency(raw_round_trips_s) if raw_round_trips_s else "—"
    listed = [
        Row(f"one-activity workflows, start → outcome ({w.one_activity:,} at once)",
            rate(w.one_activity, f.one_activity_s), "≥ 2,000 /s", raw_e2e),
        *([] if f.flow_s is None else [flow_row(f.flow_s, w, f.one_activity_s)]),
        *([] if f.bounded_s is None else [
            Row(f"one-activity workflows from a client, at most {workflow_apps.FLOW_PARALLELISM} in flight "
                f"(the flow's bound; {w.flow:,} workflows)", rate(w.flow, f.bounded_s), "—",
                rate(w.one_activity, f.one_activity_s))]),
        Row(f"ten-step workflows ({w.ten_steps:,} at once, 10 activities each)",
            rate(w.ten_steps * workflow_apps.STEPS, f.ten_steps_s, "steps/s"), "≥ 5,000 steps/s", raw_e2e),
        *([] if f.sends_s is None else [
            Row(f"workflow → aggregate send round trips ({w.sends:,} workflows at once, one ctx.send each, "
                "start → outcome)", rate(w.sends, f.sends_s), "≥ 1,000 /s", raw_e2e)]),
        Row(f"one-activity latency, idle worker, p50 / p99 ({w.latency_runs} runs)",
            latency(f.latencies_s), ONE_ACTIVITY_LATENCY_TARGET, raw_latency),
    ]
    if raw_round_trips_s:
        listed.append(Row("one-activity idle p50 ÷ raw single-record round trip p50",
                          ratio(p50(f.latencies_s), p50(raw_round_trips_s)),
                          f"≤ {ROUND_TRIP_RATIO_TARGET:.0f} ×", raw_latency))
    if f.recovery_s is not None:
        listed.append(Row(f"recovery after SIGKILL, {w.recovery:,} in flight "
                          f"({w.recovery_sleep_s * 1000:.0f} ms activity), restart → all finished",
                          f"{f.recovery_s:.2f} s" + ("" if f.bodies_twice is None else
                                                     f" ({f.bodies_twice:,} bodies ran twice)"),
                          "≤ 2 s, below both peers"))
    if f.replay_s:
        replays = " / ".join(f"{f.replay_s[n] * 1000:,.0f}" for n in w.replay_steps)
        lengths = " / ".join(f"{n // 1000}k" for n in w.replay_steps)
        listed += [
            Row(f"replay of a {lengths}-step journal (in-process)", f"{replays} ms", "< 1 s for 10k, linear"),
            Row("memory per idle instance waiting on a signal (tracemalloc)",
                f"{f.idle_bytes:,.0f} B", "< 2 KB"),
        ]
    return listed


def exactly_once_rows(eos: WorkflowFigures, alo: WorkflowFigures,
                      raw_round_trips_s: Sequence[float] = ()) -> list[Row]:
    """The workflow rows measured again exactly-once, each next to its at-least-once figure."""
    w = eos.workload
    one, one_alo = w.one_activity / eos.one_activity_s, alo.workload.one_activity / alo.one_activity_s
    steps = w.ten_steps * workflow_apps.STEPS / eos.ten_steps_s
    steps_alo = alo.workload.ten_steps * workflow_apps.STEPS / alo.ten_steps_s
    return [
        Row(f"exactly-once: one-activity workflows ({w.one_activity:,} at once)",
            f"{one:,.0f} /s ({versus(one, one_alo)})", EXACTLY_ONCE_TARGET, f"{one_alo:,.0f} /s at-least-once"),
        Row(f"exactly-once: ten-step workflows ({w.ten_steps:,} at once)",
            f"{steps:,.0f} steps/s ({versus(steps, steps_alo)})", EXACTLY_ONCE_TARGET,
            f"{steps_alo:,.0f} steps/s at-least-once"),
        Row(f"exactly-once: one-activity latency, idle, p50 / p99 ({w.latency_runs} runs)",
            f"{latency(eos.latencies_s)} (p50 "
            f"{versus(p50(eos.latencies_s), p50(alo.latencies_s), higher_is_better=False)})",
            EXACTLY_ONCE_LATENCY_TARGET, f"{latency(alo.latencies_s)} at-least-once"),
    ]


def flow_row(flow_s: float, w: Workload, one_activity_s: float) -> Row:
    """The flow throughput row, with its share of the one-activity row."""
    share = (w.flow / flow_s) / (w.one_activity / one_activity_s) if flow_s > 0 and one_activity_s > 0 else 0
    return Row(f"flow throughput: elements/s through a one-activity workflow, parallelism "
               f"{workflow_apps.FLOW_PARALLELISM}, topic to topic ({w.flow:,} elements)",
               f"{rate(w.flow, flow_s, 'elements/s')} ({share:.0%} of one-activity)",
               "≥ 80 % of one-activity", rate(w.one_activity, one_activity_s))


def notes(f: WorkflowFigures, raw_round_trips_s: Sequence[float] = ()) -> list[str]:
    """Lines printed under the table about the workflow runs (``f``'s guarantee says which)."""
    w = f.workload
    lines = []
    if f.recovery_s is not None and f.kill_after_s is not None and f.first_after_restart_s is not None:
        lines.append(
            f"workflow runs: one worker process (4 partitions, up to 256 activity threads per workflow); "
            f"recovery: {w.recovery:,} started, SIGKILL {f.kill_after_s:.2f} s after the first start, "
            f"after the restart: {f.recovery_phases or 'no log'}, first outcome {f.first_after_restart_s:.2f} s, "
            f"last {f.recovery_s:.2f} s; activity bodies run to the end twice: "
            f"{f.bodies_twice}, started twice: {f.bodies_started_twice} (a body that ended but whose "
            "step record was not yet stored when the worker died runs again: at-least-once).")
    if raw_round_trips_s and not f.exactly_once:
        lines.append(hops_note(f.latencies_s, raw_round_trips_s))
    lines += [line if not f.exactly_once else line.replace("one-activity idle", "exactly-once one-activity idle", 1)
              for line in f.hop_notes]
    lines += metrics_notes(f)
    if not f.exactly_once:
        lines += _flow_notes(f)
    return lines


def hops_note(latencies_s: Sequence[float], raw_round_trips_s: Sequence[float]) -> str:
    """The latency arithmetic: how much of the one-activity p50 Kafka's hops account for."""
    hops = len(ONE_ACTIVITY_HOPS)
    raw, measured = p50(raw_round_trips_s) * 1e3, p50(latencies_s) * 1e3
    return (f"one-activity latency arithmetic: {hops} Kafka hops ({'; '.join(ONE_ACTIVITY_HOPS)}; the "
            f"activity runs in the worker) × raw round trip p50 {raw:.1f} ms = {hops * raw:.1f} ms vs "
            f"measured p50 {measured:.1f} ms: {measured - hops * raw:+.1f} ms is ours (decide, threads, "
            "waits), the rest Kafka (a produce + ack costs less than a full round trip, so Kafka's "
            "share is an upper bound).")


def metrics_notes(f: WorkflowFigures) -> list[str]:
    """Per phase, what the worker's own metrics say its main thread did (``bench.scrape``)."""
    w = f.workload
    mode = "exactly-once" if f.exactly_once else "at-least-once"
    phases = [
        (f"idle latency ({w.latency_runs} one-activity)", f.latency_phase, sum(f.latencies_s),
         ["one-activity"]),
        (f"{w.one_activity:,} one-activity at once", f.one_activity_phase, f.one_activity_s,
         ["one-activity"]),
        *([] if f.flow_s is None else [
            (f"flow ({w.flow:,} elements)", f.flow_phase, f.flow_s, ["one-activity"])]),
        (f"{w.ten_steps:,} ten-step at once", f.ten_steps_phase, f.ten_steps_s, ["ten-steps"]),
    ]
    return [f"worker metrics, workflows {mode}, {label}: "
            + describe(phase, wall_s, kind="workflow", exactly_once=f.exactly_once, workflows=names)
            for label, phase, wall_s, names in phases if phase.delta]


def _flow_notes(f: WorkflowFigures) -> list[str]:
    """Where the flow row's time goes: the worker's CPU per element against the one-activity row's."""
    w = f.workload
    if f.flow_s is None or f.flow_cpu is None or f.one_activity_cpu is None:
        return []
    one, flow = f.one_activity_cpu, f.flow_cpu
    return [
        f"flow run: {w.flow:,} JSON elements written at once by a raw producer to 4 partitions; the stage "
        f"runs in the same worker process as the workflow, so its client side (start, outcome watch, "
        f"sink write) shares that process's core. Worker CPU per element: flow "
        f"{flow.worker_s / w.flow * 1e3:.2f} ms ({flow.worker_s / f.flow_s:.0%} of a core), one-activity "
        f"{one.worker_s / w.one_activity * 1e3:.2f} ms ({one.worker_s / f.one_activity_s:.0%} of a core) plus "
        f"{one.client_s / w.one_activity * 1e3:.2f} ms in the bench process, its client.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workflows", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--no-flows", action="store_true", help="skip the flow throughput row")
    parser.add_argument("--exactly-once", action="store_true",
                        help="then measure the latency, one-activity and ten-step rows exactly-once too")
    args = parser.parse_args(argv)
    workload = QUICK if args.quick else DEFAULT
    with alone("tidings-bench-wf-") as (bootstrap, workdir, stack, progress):
        figures = run(bootstrap, workload, workdir=workdir, stack=stack,
                      progress=progress, flows=not args.no_flows)
        eos = run(bootstrap, workload, workdir=workdir, stack=stack, progress=progress,
                  exactly_once=True) if args.exactly_once else None
    listed = rows(figures) + (exactly_once_rows(eos, figures) if eos is not None else [])
    print_report(listed, notes(figures) + (notes(eos) if eos is not None else []), None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
