"""Aggregate commands end to end through one ``tidings worker`` process (issue 11: ≥ 5,000 /s
through the client, ≥ 10,000 /s fed by a raw producer).

One worker subprocess runs ``bench.apps:app`` (the bank account aggregate, 8 partitions).
This process is the client, and a single Python process can be the bottleneck, so the
worker is measured two ways:

- **through the tidings client**: ``client.send_envelope`` for N deposits over K accounts,
  a bounded number in flight, from the first send to the last reply;
- **fed by a raw producer**: the same command envelopes encoded up front and produced with
  a bare confluent-kafka producer (keyed by aggregate id, ``murmur2_random``, ``reply_to``
  set), while a bare consumer counts the replies: first produce to last reply. The
  producer's own rate (encode + produce + acks) is the client-side ceiling of that run.

Single-command latency is timed on an idle worker, one command at a time.

With ``exactly_once`` the worker runs with ``TIDINGS_PROCESSING_GUARANTEE=exactly_once`` and
everything above is measured again. Either way the worker serves its Prometheus metrics on a
free port and each phase is bracketed by two scrapes (``bench.scrape``), so the notes can say
where the worker's main thread spent the phase.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from examples.bank import account
from tidings.shell.runtime.connection import KafkaConnection
from tidings import App
from tidings.codec import avro
from tidings.codec.payloads import payload_of
from tidings.core.records import CommandEnvelope, ReplyEnvelope
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from . import apps
from .report import (
    EXACTLY_ONCE_LATENCY_TARGET,
    EXACTLY_ONCE_TARGET,
    Row,
    latency,
    p50,
    rate,
    ratio,
    versus,
)
from .scrape import Phase, Scraper, describe, free_port, worker_env

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Workload:
    """How much to send."""

    accounts: int
    warm_up: int
    commands: int
    in_flight: int
    pings: int


@dataclass(frozen=True, slots=True)
class Cpu:
    """CPU seconds (user + system, all threads) the worker and this process used in a phase."""

    worker_s: float
    client_s: float

    def describe(self, commands: int, wall_s: float) -> str:
        """Say how much CPU each side spent per command and how busy it was."""
        return (f"worker {self.worker_s / commands * 1e3:.2f} ms CPU/command "
                f"({self.worker_s / wall_s:.0%} of a core), this client process "
                f"{self.client_s / commands * 1e3:.2f} ms CPU/command "
                f"({self.client_s / wall_s:.0%} of a core)")


@dataclass(frozen=True, slots=True)
class AggregateFigures:
    """What one run measured (seconds; counts of commands)."""

    workload: Workload
    client_s: float
    statuses: dict[str, int]
    send_only_s: float
    fed_s: float
    latencies_s: list[float]
    client_cpu: Cpu
    fed_cpu: Cpu
    exactly_once: bool = False
    client_phase: Phase = Phase()
    fed_phase: Phase = Phase()
    latency_phase: Phase = Phase()


class CpuMeter:
    """Reads the CPU time of the worker (``/proc/PID/stat``) and of this process."""

    def __init__(self, worker_pid: int) -> None:
        self._stat = Path(f"/proc/{worker_pid}/stat")
        self._tick = os.sysconf("SC_CLK_TCK")

    def read(self) -> tuple[float, float]:
        try:
            # Fields after the parenthesised command name; utime and stime are 14th and 15th.
            fields = self._stat.read_text().rsplit(")", 1)[1].split()
            worker = (int(fields[11]) + int(fields[12])) / self._tick
        except (OSError, IndexError, ValueError):
            worker = float("nan")
        mine = os.times()
        return worker, mine.user + mine.system

    def since(self, before: tuple[float, float]) -> Cpu:
        worker, mine = self.read()
        return Cpu(worker - before[0], mine - before[1])


def run(
    bootstrap: str,
    workload: Workload,
    *,
    workdir: Path,
    stack: ExitStack,
    progress: Callable[[str], None],
    profile: Path | None = None,
    exactly_once: bool = False,
) -> AggregateFigures:
    """Start a worker, drive it, stop it; return the figures.

    Args:
        bootstrap: The broker.
        workload: How many accounts, commands, in flight, pings.
        workdir: Where the worker's RocksDB and log go.
        stack: The worker's stop is registered here too, so Ctrl-C stops it.
        progress: Where progress lines go.
        profile: Write the worker's cProfile stats here (it is stopped cleanly first).
        exactly_once: Run the worker with ``processing_guarantee="exactly_once"``.
    """
    app_id = f"bench{'eos' if exactly_once else ''}{uuid.uuid4().hex[:10]}"
    app = apps.build(app_id)
    apply_topics(KafkaConnection.of(bootstrap), app.topic_specs(), out=lambda _: None)
    port = free_port()
    env = {"BENCH_APP_ID": app_id, **worker_env(port, exactly_once=exactly_once)}
    if profile is not None:
        env["BENCH_PROFILE"] = str(profile.resolve())
    worker = WorkerProcess(
        "bench.apps:app",
        bootstrap=bootstrap,
        data_dir=workdir / app_id,
        log_path=workdir / f"{app_id}.log",
        env=env,
        cwd=ROOT,
    )
    stack.callback(worker.stop)
    guarantee = "exactly-once" if exactly_once else "at-least-once"
    progress(f"starting worker for app {app_id}, {guarantee}, metrics on port {port} "
             f"(log: {worker.log_path})")
    worker.start()
    assert worker.pid is not None
    meter = CpuMeter(worker.pid)
    scraper = Scraper(port)
    client = app.client(bootstrap)
    stack.callback(client.close)
    try:
        client_s, statuses, latencies, client_cpu, client_phase, latency_phase = asyncio.run(
            _through_client(app, bootstrap, workload, meter, scraper, progress))
        progress(f"raw producer: {workload.commands:,} pre-encoded deposits straight to the "
                 "commands topic, counting replies")
        scraped = scraper.before()
        before = meter.read()
        send_only_s, fed_s = _fed_by_raw_producer(app, bootstrap, workload)
        fed_cpu = meter.since(before)
        fed_phase = scraper.since(scraped)
        progress(f"{workload.commands / fed_s:,.0f} commands/s; "
                 f"{fed_cpu.describe(workload.commands, fed_s)}")
    except BaseException:
        progress(f"the worker's log ends with:\n{worker.log_tail(30)}")
        raise
    finally:
        progress(f"stopping worker (pid {worker.pid})")
        worker.stop()
    return AggregateFigures(workload, client_s, statuses, send_only_s, fed_s, latencies,
                            client_cpu, fed_cpu, exactly_once, client_phase, fed_phase,
                            latency_phase)


async def _through_client(
    app: App, bootstrap: str, workload: Workload, meter: CpuMeter, scraper: Scraper,
    progress: Callable[[str], None],
) -> tuple[float, dict[str, int], list[float], Cpu, Phase, Phase]:
    client = app.client(bootstrap)
    ids = [f"account-{i}" for i in range(workload.accounts)]
    progress("waiting for the worker to join its group and answer a first command")
    started = time.perf_counter()
    await client.send_envelope("account", ids[0], account.Open(owner="bench"), TIMEOUT_S)
    progress(f"worker answered after {time.perf_counter() - started:.1f} s; "
             f"opening {workload.accounts:,} accounts")
    await _drive(app, bootstrap, ((i, account.Open(owner="bench")) for i in ids[1:]),
                 workload.in_flight)
    progress(f"warming up: {workload.warm_up:,} deposits")
    await _drive(app, bootstrap, _deposits(ids, workload.warm_up), workload.in_flight)

    progress(f"measuring: {workload.commands:,} deposits over {workload.accounts:,} accounts, "
             f"{workload.in_flight:,} in flight, through the tidings client")
    scraped = scraper.before()
    before = meter.read()
    started = time.perf_counter()
    replies = await _drive(app, bootstrap, _deposits(ids, workload.commands), workload.in_flight)
    client_s = time.perf_counter() - started
    cpu = meter.since(before)
    client_phase = scraper.since(scraped)
    statuses = Counter(reply.status for reply in replies)
    progress(f"{workload.commands / client_s:,.0f} commands/s ({dict(statuses)}); "
             f"{cpu.describe(workload.commands, client_s)}")
    progress(f"timing {workload.pings} single commands on the idle worker")

    await asyncio.sleep(1.0)  # let the worker go idle
    scraped = scraper.before()
    latencies = []
    for aggregate_id, command in _deposits(ids, workload.pings):
        started = time.perf_counter()
        await client.send_envelope("account", aggregate_id, command, TIMEOUT_S)
        latencies.append(time.perf_counter() - started)
    return client_s, dict(statuses), latencies, cpu, client_phase, scraper.since(scraped)


async def _drive(
    app: App, bootstrap: str, commands: Iterable[tuple[str, Any]], in_flight: int
) -> list[ReplyEnvelope]:
    """Send every command, at most ``in_flight`` awaiting a reply at once."""
    client = app.client(bootstrap)
    queue = iter(commands)
    replies: list[ReplyEnvelope] = []

    async def lane() -> None:
        for aggregate_id, command in queue:
            replies.append(await client.send_envelope("account", aggregate_id, command, TIMEOUT_S))

    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return replies


def _deposits(ids: list[str], count: int) -> Iterator[tuple[str, account.Deposit]]:
    deposit = account.Deposit(amount=Decimal(1))
    return ((ids[i % len(ids)], deposit) for i in range(count))


def _fed_by_raw_producer(app: App, bootstrap: str, workload: Workload) -> tuple[float, float]:
    """Produce pre-built command envelopes raw and count replies.

    Returns:
        Seconds to encode, produce and get every command acked (the client side alone);
        seconds from the first produce to the last reply (the worker).
    """
    (handle,) = app.aggregates
    topic = handle.topics.commands
    ids = [f"account-{i}" for i in range(workload.accounts)]
    expected: set[bytes] = set()
    consumer = KafkaConnection.of(bootstrap).consumer(**{"group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                         # Under exactly-once only committed replies count (librdkafka's
                         # default too; said here because the count depends on it).
                         "isolation.level": "read_committed"})
    replies = app.replies_topic
    ends = [TopicPartition(replies, p, consumer.get_watermark_offsets(
        TopicPartition(replies, p), 10)[1]) for p in range(app.partitions)]
    consumer.assign(ends)
    counted: list[tuple[float, int]] = []  # (when the last reply came, how many came)
    ready = threading.Event()

    def count_replies() -> None:
        try:
            consumer.consume(1, 0.5)  # connected and fetching before the first command goes
            ready.set()
            seen = 0
            deadline = time.monotonic() + TIMEOUT_S
            while seen < workload.commands and time.monotonic() < deadline:
                for message in consumer.consume(10_000, 0.1):
                    if message.error() is None and message.key() in expected:
                        seen += 1
            counted.append((time.perf_counter(), seen))
        finally:
            ready.set()
            consumer.close()

    producer = KafkaConnection.of(bootstrap).producer(**{"partitioner": "murmur2_random",
                         "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    type_name, payload = payload_of(account.Deposit(amount=Decimal(1)))
    command_ids = [uuid.uuid4().hex for _ in range(workload.commands)]
    expected.update(c.encode() for c in command_ids)
    reader = threading.Thread(target=count_replies, daemon=True)
    reader.start()
    ready.wait(30)
    started = time.perf_counter()
    for i, command_id in enumerate(command_ids):
        aggregate_id = ids[i % len(ids)]
        envelope = CommandEnvelope(
            command_id=command_id, correlation_id=command_id, aggregate_id=aggregate_id,
            type=type_name, payload=payload, timestamp_ms=int(time.time() * 1000),
            reply_to=replies,
        )
        value = avro.encode(envelope)
        while True:
            try:
                producer.produce(topic, value, aggregate_id.encode())
                break
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    producer.flush(60)
    send_only_s = time.perf_counter() - started
    reader.join(TIMEOUT_S + 10)
    if not counted or counted[0][1] < workload.commands:
        seen = counted[0][1] if counted else 0
        raise RuntimeError(f"only {seen:,} of {workload.commands:,} replies came back")
    return send_only_s, counted[0][0] - started


# -- the table --------------------------------------------------------------------------

#: The aggregate command's Kafka hops, in order (docs/architecture.md): each at least one raw
#: single-record round trip (a produce + ack costs less, so the sum is an upper bound).
COMMAND_HOPS = (
    "command: client produce → worker consume",
    "events produce + ack",
    "reply: produce → client consume",
)


def rows(f: AggregateFigures, raw_e2e: str, raw_produce: str, raw_round_trips_s: Sequence[float],
         faust_per_s: float) -> list[Row]:
    """The aggregate rows of the bench table against issue 11's targets (at-least-once run).

    Args:
        f: The at-least-once run.
        raw_e2e: Raw confluent-kafka produce → consume, formatted.
        raw_produce: Raw confluent-kafka produce alone, formatted.
        raw_round_trips_s: Raw single-record round trips (seconds).
        faust_per_s: The "Faust agent doing nothing" row, records/s: the fed row's ratio is
            taken against it (issue 11: ≥ 1.0 ×).
    """
    w = f.workload
    fed_per_s = w.commands / f.fed_s
    return [
        Row(f"aggregate commands e2e, tidings client ({w.in_flight:,} in flight, "
            f"{w.accounts:,} accounts)", rate(w.commands, f.client_s), "≥ 5,000 /s", raw_e2e),
        Row("aggregate commands e2e, worker fed by a raw producer",
            rate(w.commands, f.fed_s), "≥ 10,000 /s", raw_e2e),
        Row("fed row ÷ \"Faust agent doing nothing\" row", ratio(fed_per_s, faust_per_s), "≥ 1.0 ×",
            f"{faust_per_s:,.0f} /s Faust no-op"),
        Row("client side alone: encode + produce command envelopes",
            rate(w.commands, f.send_only_s), "—", raw_produce),
        Row("aggregate command latency, idle worker, p50 / p99",
            latency(f.latencies_s), "—", latency(raw_round_trips_s)),
    ]


def exactly_once_rows(eos: AggregateFigures, alo: AggregateFigures) -> list[Row]:
    """The aggregate rows measured again exactly-once, each next to its at-least-once figure."""
    w = eos.workload
    client, client_alo = w.commands / eos.client_s, alo.workload.commands / alo.client_s
    fed, fed_alo = w.commands / eos.fed_s, alo.workload.commands / alo.fed_s
    return [
        Row("exactly-once: aggregate commands e2e, tidings client",
            f"{client:,.0f} /s ({versus(client, client_alo)})", EXACTLY_ONCE_TARGET,
            f"{client_alo:,.0f} /s at-least-once"),
        Row("exactly-once: aggregate commands e2e, worker fed by a raw producer",
            f"{fed:,.0f} /s ({versus(fed, fed_alo)})", EXACTLY_ONCE_TARGET,
            f"{fed_alo:,.0f} /s at-least-once"),
        Row("exactly-once: aggregate command latency, idle, p50 / p99",
            f"{latency(eos.latencies_s)} (p50 "
            f"{versus(p50(eos.latencies_s), p50(alo.latencies_s), higher_is_better=False)})",
            EXACTLY_ONCE_LATENCY_TARGET, f"{latency(alo.latencies_s)} at-least-once"),
    ]


def notes(f: AggregateFigures, raw_round_trips_s: Sequence[float] = ()) -> list[str]:
    """Lines under the table: CPU per phase, the worker's own metrics per phase, the hops."""
    w = f.workload
    mode = "exactly-once" if f.exactly_once else "at-least-once"
    statuses = ", ".join(f"{n:,} {s}" for s, n in sorted(f.statuses.items()))
    lines = [
        f"aggregate runs ({mode}): {w.commands:,} deposits each after opening {w.accounts:,} accounts "
        f"and {w.warm_up:,} warm-up deposits; one worker process (8 partitions); replies: {statuses}.",
        f"CPU ({mode}) through the tidings client: {f.client_cpu.describe(w.commands, f.client_s)}.",
        f"CPU ({mode}) fed by a raw producer: {f.fed_cpu.describe(w.commands, f.fed_s)}.",
    ]
    for label, phase, wall_s in (("through the client", f.client_phase, f.client_s),
                                 ("fed by a raw producer", f.fed_phase, f.fed_s),
                                 (f"idle latency ({w.pings} commands)", f.latency_phase,
                                  sum(f.latencies_s))):
        if phase.delta:
            lines.append(f"worker metrics, aggregates {mode}, {label}: "
                         + describe(phase, wall_s, kind="aggregate", exactly_once=f.exactly_once))
    if raw_round_trips_s and not f.exactly_once:
        hops = len(COMMAND_HOPS)
        raw, measured = p50(raw_round_trips_s) * 1e3, p50(f.latencies_s) * 1e3
        lines.append(
            f"aggregate latency arithmetic: {hops} Kafka hops ({'; '.join(COMMAND_HOPS)}) × raw round "
            f"trip p50 {raw:.1f} ms = {hops * raw:.1f} ms vs measured p50 {measured:.1f} ms: "
            f"{measured - hops * raw:+.1f} ms is ours.")
    return lines
