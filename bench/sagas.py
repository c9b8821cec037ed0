"""Saga transfers through one worker (SPEC §10: ≥ 500 transfers/s per worker).

Part of ``python -m bench`` (skip with ``--no-sagas``); also runs alone::

    .venv/bin/python -m bench.sagas [--quick]

which uses ``TIDINGS_BOOTSTRAP`` when set, else starts a local broker.

One worker subprocess runs ``bench.saga_apps:app`` (the bank's account aggregate and its
transfer saga, 8 partitions). This process opens K accounts, then sends N
``SendTransfer`` commands between them through the tidings client, a bounded number
awaiting a reply at once, while a bare consumer reads the saga's journal topic. A
transfer is done when its saga's journal holds its end: the source stored
``TransferSent`` (which started the saga), the saga journaled its state, sent
``ReceiveTransfer``, the target stored ``TransferReceived``, the saga journaled
``Credited`` and its end. The figure is N over the time from the first send to the last
saga end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from confluent_kafka import TopicPartition

from examples.bank.account import Deposit, Open, SendTransfer
from tidings.shell.runtime.connection import KafkaConnection
from tidings.codec import avro
from tidings.core.saga_records import SagaJournalEntry
from tidings.shell.client.client import Client
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from . import saga_apps
from .aggregates import Cpu, CpuMeter
from .report import Row, alone, print_report, rate

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Workload:
    """How many transfers, over how many accounts, how many awaiting a reply at once."""

    accounts: int
    transfers: int
    in_flight: int
    warm_up: int = 50


DEFAULT = Workload(accounts=500, transfers=10_000, in_flight=500)
QUICK = Workload(accounts=200, transfers=3_000, in_flight=500)


@dataclass(frozen=True, slots=True)
class SagaFigures:
    """What one run measured (seconds)."""

    workload: Workload
    transfers_s: float
    sent_s: float
    first_end_s: float
    cpu: Cpu


class _Ends:
    """Counts saga ends in the saga journal topic, in a thread, from its beginning."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = KafkaConnection.of(bootstrap).consumer(**{
            "group.id": f"bench-ends-{uuid.uuid4().hex}", "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        partitions = self._consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self._ended: dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="bench-saga-ends", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, 0.05):
                if message.error() or message.value() is None:
                    continue
                entry = avro.decode_as(message.value(), SagaJournalEntry)
                if entry.ended:
                    with self._lock:
                        self._ended.setdefault(entry.saga_id, time.perf_counter())

    def wait(self, saga_ids: set[str], timeout: float) -> dict[str, float]:
        """Return when each of ``saga_ids`` ended (perf_counter), once all have."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if saga_ids <= self._ended.keys():
                    return {saga_id: self._ended[saga_id] for saga_id in saga_ids}
                missing = len(saga_ids - self._ended.keys())
            if time.monotonic() > deadline:
                raise TimeoutError(f"{missing} of {len(saga_ids)} sagas did not end in {timeout:g} s")
            time.sleep(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def run(
    bootstrap: str,
    workload: Workload,
    *,
    workdir: Path,
    stack: ExitStack,
    progress: Callable[[str], None],
    profile: Path | None = None,
    tracing: bool = False,
) -> SagaFigures:
    """Start a worker, open accounts, time N transfers from first send to last saga end.

    With ``profile``, the worker runs under cProfile and writes its stats there on exit.
    With ``tracing``, the worker traces (``BENCH_TRACING``, see ``bench.saga_apps``).
    """
    app_id = f"benchsaga{uuid.uuid4().hex[:10]}"
    app = saga_apps.build(app_id)
    apply_topics(KafkaConnection.of(bootstrap), app.topic_specs(), out=lambda _: None)
    name = "saga-worker-traced" if tracing else "saga-worker"
    worker = WorkerProcess("bench.saga_apps:app", bootstrap=bootstrap, data_dir=workdir / name,
                           log_path=workdir / f"{name}.log",
                           env={"BENCH_SAGA_APP_ID": app_id,
                                **({"BENCH_PROFILE": str(profile)} if profile else {}),
                                **({"BENCH_TRACING": "1"} if tracing else {})},
                           cwd=ROOT)
    stack.callback(worker.stop)
    progress(f"sagas: starting worker for app {app_id} (log: {worker.log_path})")
    worker.start()
    client = Client(bootstrap, app=app)
    stack.callback(client.close)
    ends = _Ends(bootstrap, f"{app_id}.saga.transfer.journal")
    stack.callback(ends.close)
    try:
        figures = asyncio.run(_drive(client, ends, workload, progress, CpuMeter(worker.pid or 0)))
    except BaseException:
        progress(f"the saga worker's log ends with:\n{worker.log_tail(30)}")
        raise
    finally:
        progress(f"sagas: stopping worker (pid {worker.pid})")
        worker.stop()
    return figures


async def _drive(client: Client, ends: _Ends, w: Workload, progress: Callable[[str], None],
                 meter: CpuMeter) -> SagaFigures:
    run_id = uuid.uuid4().hex[:6]
    accounts = [f"acc-{run_id}-{n}" for n in range(w.accounts)]
    gate = asyncio.Semaphore(w.in_flight)

    async def send(aggregate_id: str, command: object, correlation_id: str | None = None) -> None:
        async with gate:
            reply = await client.send_envelope("account", aggregate_id, command, TIMEOUT_S,
                                               correlation_id=correlation_id)
        if reply.status != "accepted" or any(e.deferred for e in reply.events):
            raise RuntimeError(f"{aggregate_id}: {reply}")

    progress(f"sagas: opening and funding {w.accounts:,} accounts")
    await asyncio.gather(*(send(a, Open(owner=a)) for a in accounts))
    await asyncio.gather(*(send(a, Deposit(amount=Decimal(10**9))) for a in accounts))

    def transfers(prefix: str, count: int) -> list[tuple[str, SendTransfer]]:
        # Source n sends to the account after it: every account sends and receives.
        return [(accounts[n % w.accounts],
                 SendTransfer(transfer_id=f"{prefix}-{n}", target=accounts[(n + 1) % w.accounts],
                              amount=Decimal(1)))
                for n in range(count)]

    progress(f"sagas: warming up with {w.warm_up} transfers")
    warm = transfers(f"warm-{run_id}", w.warm_up)
    await asyncio.gather(*(send(s, t, t.transfer_id) for s, t in warm))
    ends.wait({t.transfer_id for _, t in warm}, TIMEOUT_S)

    progress(f"sagas: {w.transfers:,} transfers, {w.in_flight} awaiting a reply at once")
    batch = transfers(f"t-{run_id}", w.transfers)
    cpu_before = meter.read()
    began = time.perf_counter()
    await asyncio.gather(*(send(s, t, t.transfer_id) for s, t in batch))
    sent_s = time.perf_counter() - began
    ended = await asyncio.to_thread(ends.wait, {t.transfer_id for _, t in batch}, TIMEOUT_S)
    last = max(ended.values()) - began
    cpu = meter.since(cpu_before)
    progress(f"sagas: all {w.transfers:,} ended {last:.2f} s after the first send "
             f"(every SendTransfer answered after {sent_s:.2f} s)")
    return SagaFigures(workload=w, transfers_s=last, sent_s=sent_s,
                       first_end_s=min(ended.values()) - began, cpu=cpu)


def tracing_rows(traced: SagaFigures, plain: SagaFigures) -> list[Row]:
    """The same transfers with the worker tracing, next to the run without (issue 19)."""
    w = traced.workload
    cost = plain.transfers_s and traced.transfers_s / plain.transfers_s - 1
    return [
        Row(f"saga transfers/s with traces on ({w.transfers:,} transfers; OpenTelemetry SDK, batched, "
            f"spans dropped; {cost:+.0%} time vs off)",
            rate(w.transfers, traced.transfers_s), "—", rate(plain.workload.transfers, plain.transfers_s)),
    ]


def tracing_notes(traced: SagaFigures) -> list[str]:
    """Lines printed under the table about the traced saga run."""
    w = traced.workload
    return [
        "traced saga run: the same workload on a fresh app whose worker sets the OpenTelemetry SDK "
        "(BatchSpanProcessor, an exporter that drops the spans: no collector's network in the figure); "
        "per transfer 2 decide spans, 2 saga transition spans and the spans of batches of more than one "
        "record; the client "
        "does not trace, so each command's decide starts a trace.",
        f"CPU of the traced saga run: {traced.cpu.describe(w.transfers, traced.transfers_s).replace('command', 'transfer')}.",
    ]


def rows(f: SagaFigures, raw_e2e: str = "—") -> list[Row]:
    """The saga row of the bench table, against its SPEC §10 target."""
    w = f.workload
    return [
        Row(f"saga transfers/s, transfer started → saga ended ({w.transfers:,} transfers, "
            f"{w.in_flight} in flight, {w.accounts} accounts)",
            rate(w.transfers, f.transfers_s), "≥ 500 /s", raw_e2e),
    ]


def notes(f: SagaFigures) -> list[str]:
    """Lines printed under the table about the saga run."""
    w = f.workload
    return [
        f"saga run: one worker process (8 partitions) runs the account aggregate and the "
        f"transfer saga; {w.transfers:,} SendTransfer commands were all answered after "
        f"{f.sent_s:.2f} s, the first saga ended after {f.first_end_s:.2f} s, the last after "
        f"{f.transfers_s:.2f} s. Each transfer is 2 commands, 2 stored events and 3 saga "
        f"journal records.",
        f"CPU of the saga run: {f.cpu.describe(w.transfers, f.transfers_s).replace('command', 'transfer')}.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sagas", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="cProfile the worker (with --tracing, the traced one); write its stats to FILE "
                        "and print the top")
    parser.add_argument("--tracing", action="store_true",
                        help="then run the same transfers again with the worker tracing (OpenTelemetry)")
    args = parser.parse_args(argv)
    workload = QUICK if args.quick else DEFAULT
    traced = None
    with alone("tidings-bench-saga-") as (bootstrap, workdir, stack, progress):
        # With --tracing, --profile profiles the traced run's worker (where tracing's cost is).
        figures = run(bootstrap, workload, workdir=workdir, stack=stack, progress=progress,
                      profile=None if args.tracing else args.profile)
        if args.tracing:
            traced = run(bootstrap, workload, workdir=workdir, stack=stack, progress=progress, tracing=True,
                         profile=args.profile)
    table = rows(figures) + ([] if traced is None else tracing_rows(traced, figures))
    print_report(table, notes(figures) + ([] if traced is None else tracing_notes(traced)), args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
