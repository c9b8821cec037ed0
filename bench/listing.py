"""``tidings list`` over 10,000 instances (issue 19: under 2 s): the workflow and saga rows.

Part of ``python -m bench`` (skip with ``--no-listing``); also runs alone::

    .venv/bin/python -m bench.listing [--instances N]

No worker runs: the bench writes what a worker would have written, with the worker's
encoders, keys and partitions. The workflow's status topic gets a ``RUNNING`` record for
every instance and then, for four in five, the record of how it ended (``FINISHED``,
``FAULTED`` or ``CANCELLED``), each with the instance's ``started_at`` (workflowstatus.v2),
as an uncompacted topic holds them (compaction only makes
the read shorter). The saga's journal gets three records per saga (start, handle, stop;
one saga in five stops at the second). The orchestration's journal gets three events per
instance and, for four in five, an outcome record. Measured: what ``tidings list`` does after it has
loaded the app and reached Kafka (read the topic whole, keep each instance's latest,
filter, count, sort, format the table of every row), best of three; and, once, the whole
``tidings list ... --count`` command as a user runs it (a new Python process: imports,
the app, the broker check), next to ``tidings --help`` measured the same way, which is
what any command costs before it does anything.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tidings import App
from tidings.inspection.indexes import KINDS, saga_rows, workflow_rows
from tidings.inspection.kind_indexes import orchestration_rows
from tidings.inspection.listing import Filters, counts_line, select, table
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.orchestration_records import OrchestrationEvent, OrchestrationOutcome
from tidings.core.records import EventEnvelope
from tidings.core.saga_records import SagaJournalEntry
from tidings.core.workflow_records import WorkflowStatusRecord
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.topics import apply_topics

from .report import Progress, Row, alone, print_report

#: Partitions of the bench app's topics.
PARTITIONS = 8
DEFAULT_INSTANCES = 10_000
ROOT = Path(__file__).resolve().parent.parent
#: Where ``python -m tidings.cli.main`` finds the bench app (``BENCH_LIST_APP`` names it).
APP_SPEC = "bench.listing:app"


def build(name: str) -> App:
    """The bench's app: one workflow (its body never runs), the bank's transfer saga and an
    orchestration over the accounts (never run either)."""
    from examples.bank import account, transfer
    from tidings.coordination import event, orchestrate, orchestration

    @orchestration
    def settle(key: str):  # type: ignore[no-untyped-def]  # noqa: ANN202 - a coordination
        yield orchestrate(event(lambda value: True))
        return None

    app = App(name, partitions=PARTITIONS)

    @app.workflow("orders")
    async def orders(ctx: object, _: None) -> None:
        return None

    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)
    transfer.declare(app, accounts)
    app.orchestration("settle", [accounts], lambda source: None, settle)
    return app


app = build(os.environ["BENCH_LIST_APP"]) if "BENCH_LIST_APP" in os.environ else None


@dataclass(frozen=True, slots=True)
class ListingFigures:
    instances: int
    status_records: int
    workflow_s: float
    saga_records: int
    saga_s: float
    orchestration_records: int
    orchestration_s: float
    command_s: float
    help_s: float
    shown: str


def _fill(connection: KafkaConnection, bench_app: App, instances: int) -> tuple[int, int, int]:
    """Write the status records, saga and orchestration journals a worker would have; return how many of each."""
    producer = connection.producer(**{"linger.ms": 5, "acks": "all"})
    workflow = bench_app.workflow_handle("orders")
    (saga,) = bench_app.sagas
    now = int(time.time() * 1000) - instances
    ends = ("FINISHED", "FINISHED", "FAULTED", "CANCELLED")
    (settle,) = bench_app.declared("orchestration")
    statuses = journals = orchestrated = 0
    for n in range(instances):
        instance_id = f"order-{n:06d}"
        partition = partition_for(instance_id, PARTITIONS)
        records = [WorkflowStatusRecord(instance_id, "orders", "RUNNING", now + n, started_at=now + n)]
        if n % 5:
            records.append(WorkflowStatusRecord(instance_id, "orders", ends[n % 4], now + n + 500,
                                                started_at=now + n))
        for record in records:
            producer.produce(workflow.topics.status, avro.encode(record), instance_id.encode(), partition=partition)
            statuses += 1
        transitions = ("start", "handle") if n % 5 == 0 else ("start", "handle", "stop")
        for seq, transition in enumerate(transitions, 1):
            entry = SagaJournalEntry("transfer", instance_id, seq, now + n + seq, transition,
                                     b'{"phase": "x", "amount": 30}', ended=transition == "stop")
            producer.produce(saga.topics.journal, avro.encode(entry), f"{instance_id}/{seq}".encode(),
                             partition=partition)
            journals += 1
        for seq in (1, 2, 3):
            envelope = EventEnvelope(f"e-{n}-{seq}", f"c-{n}-{seq}", instance_id, f"acct-{n}", seq, "Deposited",
                                     b'{"amount": 30}', now + n + seq)
            routed = OrchestrationEvent("settle", instance_id, seq, "bench.accounts", 0, n * 3 + seq, "account",
                                        envelope)
            producer.produce(settle.topics.journal, avro.encode(routed), f"{instance_id}/{seq}".encode(),
                             partition=partition)
            orchestrated += 1
        if n % 5:
            producer.produce(settle.topics.outcomes, avro.encode(OrchestrationOutcome(
                "settle", instance_id, 3, now + n + 4)), instance_id.encode(), partition=partition)
            orchestrated += 1
        if n % 2000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("the bench's records were not all acknowledged within 60 s")
    return statuses, journals, orchestrated


def _best_of_three(list_once: object) -> tuple[float, str]:
    best, line = float("inf"), ""
    for _ in range(3):
        started = time.perf_counter()
        rows, _ = list_once()  # type: ignore[operator]
        selection = select(rows, Filters())
        lines = table(selection.shown)
        line = counts_line(selection, KINDS["workflow"].statuses or (), "instance")
        best = min(best, time.perf_counter() - started)
        assert len(lines) == len(rows) + 1
    return best, line


def _command_seconds(bootstrap: str, name: str, *args: str) -> float:
    env = {**os.environ, "TIDINGS_BOOTSTRAP": bootstrap, "BENCH_LIST_APP": name,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"tidings {' '.join(args)} failed: {done.stderr.strip()}")
    return seconds


def run(bootstrap: str, instances: int, *, progress: Progress) -> ListingFigures:
    name = f"benchlist{os.getpid()}x{int(time.time())}"
    bench_app = build(name)
    connection = KafkaConnection.of(bootstrap)
    apply_topics(connection, bench_app.topic_specs(), out=lambda line: None)
    progress(f"listing: writing {instances:,} instances' status records and saga journals")
    statuses, journals, orchestrated = _fill(connection, bench_app, instances)
    progress("listing: tidings list workflow, best of three")
    workflow_s, shown = _best_of_three(lambda: workflow_rows(bench_app, connection, ["orders"]))
    progress("listing: tidings list saga, best of three")
    saga_s, _ = _best_of_three(lambda: saga_rows(bench_app, connection, ["transfer"]))
    progress("listing: tidings list orchestration, best of three")
    orchestration_s, _ = _best_of_three(lambda: orchestration_rows(bench_app, connection, ["settle"]))
    progress("listing: the whole command, once")
    command_s = _command_seconds(bootstrap, name, "list", APP_SPEC, "workflow", "--count")
    help_s = _command_seconds(bootstrap, name, "--help")
    return ListingFigures(instances, statuses, workflow_s, journals, saga_s, orchestrated, orchestration_s,
                          command_s, help_s, shown)


def rows(f: ListingFigures) -> list[Row]:
    return [
        Row(f"tidings list workflow, {f.instances:,} instances ({f.status_records:,} status records)",
            f"{f.workflow_s:.2f} s", "< 2 s"),
        Row(f"tidings list saga, {f.instances:,} sagas ({f.saga_records:,} journal records)",
            f"{f.saga_s:.2f} s", "< 2 s"),
        Row(f"tidings list orchestration, {f.instances:,} instances ({f.orchestration_records:,} journal and "
            "outcome records)", f"{f.orchestration_s:.2f} s", "< 2 s"),
        Row("tidings list workflow --count, the whole command (new process)",
            f"{f.command_s:.2f} s", "—", f"tidings --help {f.help_s:.2f} s"),
    ]


def notes(f: ListingFigures) -> list[str]:
    return [f"listing: one workflow, one saga and one orchestration, {PARTITIONS} partitions, no worker; the list rows "
            f"read, index, filter, count, sort and format every row (best of three): {f.shown}. "
            f"Load average after: {os.getloadavg()[0]:.2f}."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.listing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=DEFAULT_INSTANCES, help="instances to list")
    args = parser.parse_args(argv)
    with alone("tidings-bench-listing-") as (bootstrap, _, _, progress):
        figures = run(bootstrap, args.instances, progress=progress)
    print_report(rows(figures), notes(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
