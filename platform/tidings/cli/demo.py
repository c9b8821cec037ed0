"""``tidings demo``: the bank and shop examples end to end on a real Kafka broker, narrated.

It starts a local broker (unless ``TIDINGS_BOOTSTRAP`` is set). The bank act applies the
bank's topics, runs a worker process, sends commands, kills the worker with SIGKILL,
restarts it and shows that nothing was lost. The shop act does the same for workflows:
``enrich`` instances killed mid-sleep finish with one call of their activity each, and an
``approve`` instance takes a signal from the client. Everything it started, it stops (the
workers and the broker, by PID), also after an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..broker import LocalBroker
from ..codec import avro
from ..core.records import EventEnvelope
from ..core.workflow import Finished, StepError
from ..core.workflow.journal import JournalRecord, Started, StepKind, StepStarted, record_type_name
from ..core.workflow_records import WorkflowJournalEntry
from ..shell.client.client import Client
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.topics import TopicSpec, apply_topics
from ..shell.kinds.projection.views import ViewStore
from ..testing.processes import WorkerProcess
from ..testing.topics import read_topic
from .loading import load_app

_DESCRIPTION = """\
Run the examples end to end on a local Apache Kafka broker (or the one in
$TIDINGS_BOOTSTRAP), from the repository root, in well under a minute:

  bank (examples/bank): the Account aggregate in a worker process, commands from a
  client, a SIGKILL of the worker and its restart, the journal and the balances projection;
  then the transfer saga: a transfer that reaches its target, one to an account that does
  not exist, refunded, and a reused correlation id refused with SagaAlreadyStarted.

  shop (examples/shop): enrich workflows killed with their worker while they sleep finish
  after its restart with one call of their activity each; their journal; an approve
  workflow that takes a signal from the client, and one whose window closes.

Everything the demo starts (broker, workers), it stops, also after an error or Ctrl-C.
"""


def register(subparsers: Any) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser(
        "demo",
        help="run the bank and shop examples end to end on a real broker",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workdir", type=Path, help="where the broker and workers keep data (default: a temp dir)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tidings-demo-"))
    broker: LocalBroker | None = None
    started = _Started()
    try:
        bootstrap = os.environ.get("TIDINGS_BOOTSTRAP")
        if not bootstrap:
            say("Starting a local Apache Kafka broker (the first run downloads it)")
            broker = LocalBroker(workdir / "broker", on_progress=lambda line: print(f"   {line}"))
            bootstrap = broker.start()  # a broker that fails to start stops itself
        say(f"Kafka is at {bootstrap}")
        load_app("examples.bank.app:app")  # puts the current directory on sys.path
        run_id = uuid.uuid4().hex[:6]
        _bank_act(bootstrap, workdir, run_id, started)
        _shop_act(bootstrap, workdir, run_id, started)
        say("Done.")
        return 0
    finally:
        started.stop()
        if broker is not None:
            # A closed Client keeps its librdkafka producer until it is collected; collected
            # after the broker stopped, it would log connection failures.
            gc.collect()
            if broker.stop():
                say("Stopped the broker")


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def show(text: str) -> None:
    print(f"   {text}", flush=True)


class _Started:
    """The worker processes and clients the demo started, so it can stop them whatever happens."""

    def __init__(self) -> None:
        self.workers: list[WorkerProcess] = []
        self.clients: list[Client] = []

    def worker(self, app_spec: str, bootstrap: str, workdir: Path, name: str, **env: str) -> WorkerProcess:
        """Start a worker of ``app_spec`` with data in ``workdir/name`` and its log beside it."""
        worker = WorkerProcess(app_spec, bootstrap=bootstrap, data_dir=workdir / name,
                               log_path=workdir / f"{name}.log", env=env, cwd=Path.cwd())
        self.workers.append(worker)
        return worker.start()

    def client(self, bootstrap: str, app: Any) -> Client:
        """A new client of ``app`` (not ``app.client()``: the App would keep it after close)."""
        client = Client(bootstrap, app=app)
        self.clients.append(client)
        return client

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()

    def stop(self) -> None:
        """Close the clients and kill every worker still running (after an error or Ctrl-C)."""
        self.close_clients()
        for worker in self.workers:
            if worker.running:
                print(f"   killing worker pid {worker.pid}", flush=True)
                worker.kill()


def _applied(bootstrap: str, specs: list[TopicSpec]) -> str:
    report = apply_topics(KafkaConnection.of(bootstrap), specs, out=lambda line: None)
    return f"{len({spec.name for spec in specs})} topics ({len(report.created)} created)"


def _bank_act(bootstrap: str, workdir: Path, run_id: str, started: _Started) -> None:
    from examples.bank import account
    from examples.bank.app import accounts, app, balances

    say(f"Applied the bank's {_applied(bootstrap, app.topic_specs())}")
    worker = started.worker("examples.bank.app:app", bootstrap, workdir, "worker")
    say(f"Started a worker, pid {worker.pid} (log: {worker.log_path})")
    client = started.client(bootstrap, app)
    alice, bob = f"alice-{run_id}", f"bob-{run_id}"

    async def send(aggregate_id: str, command: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        reply = await client.send_envelope(accounts, aggregate_id, command, 60, **kwargs)
        took = (time.perf_counter() - started) * 1000
        events = ", ".join(
            f"{e.type}{'(deferred)' if e.deferred else f' v{e.version}'} {e.payload.decode()}"
            for e in reply.events
        ) or "-"
        show(f"{aggregate_id:<13} {type(command).__name__:<9} -> {reply.status}: {events}  [{took:.0f} ms]")
        return reply

    async def story() -> None:
        say("Commands to the Account aggregate (the seed's rules)")
        await send(alice, account.Deposit(amount=Decimal(5)))
        await send(alice, account.Open(owner="Alice"))
        await send(alice, account.Deposit(amount=Decimal(100)))
        await send(alice, account.Withdraw(amount=Decimal(30)))
        await send(alice, account.Withdraw(amount=Decimal(500)))
        await send(bob, account.Open(owner="Bob"))
        say("The same command id twice: the first verdict again, nothing stored")
        await send(bob, account.Deposit(amount=Decimal(7)), command_id=f"once-{run_id}")
        await send(bob, account.Deposit(amount=Decimal(7)), command_id=f"once-{run_id}")
        say("100 concurrent deposits of 1 to alice")
        started = time.perf_counter()
        replies = await asyncio.gather(
            *(client.send_envelope(accounts, alice, account.Deposit(amount=Decimal(1)), 60)
              for _ in range(100))
        )
        versions = sorted(r.version for r in replies)
        show(f"versions {versions[0]}..{versions[-1]}, no gaps: "
             f"{versions == list(range(versions[0], versions[-1] + 1))}, "
             f"{(time.perf_counter() - started) * 1000:.0f} ms")

    asyncio.run(story())
    say(f"SIGKILL the worker (pid {worker.pid}) and start a new one on the same data")
    worker.kill()
    worker.start()
    show(f"new worker pid {worker.pid}")

    async def after_restart() -> None:
        await send(alice, account.Withdraw(amount=Decimal(10_000)))
        await send(alice, account.Withdraw(amount=Decimal(70)))

    asyncio.run(after_restart())
    say(f"The journal of {alice} (topic {accounts.topics.events}, compacted)")
    for record in read_topic(bootstrap, accounts.topics.events):
        event = avro.decode_as(record.value or b"", EventEnvelope)
        if event.aggregate_id == alice and (event.version <= 3 or event.version >= 103):
            show(f"partition {record.partition} key {record.key.decode() if record.key else None}: "
                 f"{event.type} {event.payload.decode()}")
        elif event.aggregate_id == alice and event.version == 4:
            show("...")
    time.sleep(1.0)  # the projection follows the journal asynchronously
    say("The balances projection (a read model, applied once per event)")
    store = ViewStore(balances.view_path(worker.data_dir), read_only=True)
    try:
        for key in (alice, bob):
            show(f"{key:<13} {store.view.get(key)}")
    finally:
        store.close()
    _transfer_scene(bootstrap, client, send, alice, bob, run_id)
    started.close_clients()
    worker.stop()
    say("Stopped the bank worker")


def _transfer_scene(bootstrap: str, client: Client, send: Any, alice: str, bob: str, run_id: str) -> None:
    from examples.bank import account
    from examples.bank.app import accounts, transfers

    nobody = f"nobody-{run_id}"
    delivered, refunded = f"t-{run_id}-1", f"t-{run_id}-2"
    say("Transfers (examples/bank/transfer.py): TransferSent starts the transfer saga, which "
        "sends ReceiveTransfer to the target, or RefundTransfer to the source when it refuses")

    async def transfer() -> None:
        # The transfer id is the correlation id: it names the saga.
        await send(alice, account.SendTransfer(transfer_id=delivered, target=bob, amount=Decimal(25)),
                   correlation_id=delivered)
        await send(alice, account.SendTransfer(transfer_id=refunded, target=nobody, amount=Decimal(10)),
                   correlation_id=refunded)

    began = time.perf_counter()
    asyncio.run(transfer())
    journals = _wait_for(lambda: _sagas_ended(bootstrap, transfers.topics.journal, {delivered, refunded}),
                         60, "transfer sagas ended")
    show(f"both sagas ended {(time.perf_counter() - began) * 1000:.0f} ms after the first SendTransfer")
    for saga_id in (delivered, refunded):
        say(f"The saga journal of {saga_id} (topic {transfers.topics.journal}, compacted)")
        for entry in journals[saga_id]:
            state = entry.state.decode() if entry.state is not None else "-"
            sent = ", ".join(f"{c.type} to {c.aggregate_id} (command id {c.command_id})"
                             for c in entry.commands)
            show(f"seq {entry.seq} {entry.transition:<6} {'ended ' if entry.ended else ''}{state}"
                 + (f"  sends {sent}" if sent else ""))
    say("What the accounts stored for them (the source's, then the target's journal)")
    for record in read_topic(bootstrap, accounts.topics.events):
        event = avro.decode_as(record.value or b"", EventEnvelope)
        if event.correlation_id in (delivered, refunded):
            show(f"{event.aggregate_id:<13} v{event.version:<4} {event.type} {event.payload.decode()}")
    show(f"({nobody} stored nothing: it refused ReceiveTransfer with a deferred Rejected)")

    say("A second SendTransfer with the correlation id of a started saga")

    async def again() -> None:
        from ..errors import SagaAlreadyStarted

        before = await client.send_envelope(accounts, alice, account.Withdraw(amount=Decimal(10**6)), 60)
        try:
            await client.send(accounts, alice, account.SendTransfer(
                transfer_id=f"t-{run_id}-3", target=bob, amount=Decimal(5)), 60,
                correlation_id=delivered)
        except SagaAlreadyStarted as exc:
            show(f"SagaAlreadyStarted: {str(exc).removeprefix('SagaAlreadyStarted: ')}")
        after = await client.send_envelope(accounts, alice, account.Withdraw(amount=Decimal(10**6)), 60)
        show(f"alice's version before and after: {before.version} and {after.version}: nothing stored")

    asyncio.run(again())


def _sagas_ended(bootstrap: str, topic: str, saga_ids: set[str]) -> dict[str, list[Any]] | None:
    """Each saga's journal entries, in seq order, once every one of ``saga_ids`` has ended."""
    from ..core.saga_records import SagaJournalEntry

    journals: dict[str, list[Any]] = {saga_id: [] for saga_id in saga_ids}
    for stored in read_topic(bootstrap, topic):
        entry = avro.decode_as(stored.value or b"", SagaJournalEntry)
        if entry.saga_id in journals:
            journals[entry.saga_id].append(entry)
    if not all(any(e.ended for e in entries) for entries in journals.values()):
        return None
    return {saga_id: sorted(entries, key=lambda e: e.seq) for saga_id, entries in journals.items()}


#: The shop worker's approval window (seconds): short, so the demo shows a window closing.
_APPROVAL_WINDOW_S = 3


def _shop_act(bootstrap: str, workdir: Path, run_id: str, started: _Started) -> None:
    from examples.shop.app import app

    say(f"Applied the shop's {_applied(bootstrap, app.topic_specs())}")
    score_log = workdir / "score-calls.log"
    # A stable instance id (static membership): the restarted worker gets its partitions back
    # at once instead of after the dead one's session timeout, as in the bank act.
    worker = started.worker("examples.shop.app:app", bootstrap, workdir, "shop-worker",
                            SHOP_SCORE_LOG=str(score_log), SHOP_APPROVAL_WINDOW=str(_APPROVAL_WINDOW_S),
                            TIDINGS_INSTANCE_ID="shop-demo-1")
    say(f"Started a shop worker, pid {worker.pid} (log: {worker.log_path})")
    client = started.client(bootstrap, app)
    _enrich_scenes(bootstrap, client, worker, run_id, score_log)
    _approve_scene(client, run_id)
    started.close_clients()
    worker.stop()
    say("Stopped the shop worker")


def _enrich_scenes(bootstrap: str, client: Client, worker: WorkerProcess, run_id: str, score_log: Path) -> None:
    from examples.shop.app import ENRICH_NAP, enrich

    orders = {f"order-17-{run_id}": "ABC", f"order-18-{run_id}": "ABCDE", f"order-19-{run_id}": "AB"}
    say(f"Three enrich instances (examples/shop/app.py): score (an activity), "
        f"sleep {ENRICH_NAP.total_seconds():g} s, now()")

    async def start() -> None:
        for instance_id, order in orders.items():
            await client.start(enrich, instance_id, order)
            show(f"{instance_id:<15}  started with {json.dumps(order)}")

    asyncio.run(start())
    # Killed before its result is journaled, an activity runs again (at least once): wait
    # until every journal holds its timer, which comes after the score's stored result.
    journals = _wait_for(lambda: _journals_once(bootstrap, enrich.topics.journal, orders, StepKind.TIMER),
                         60, f"enrich instances asleep (worker log: {worker.log_path})")
    first = next(iter(orders))
    show(f"all three scored and asleep: each journal holds its timer, due "
         f"{(_timer_due(journals[first]) - _started_at(journals[first])) / 1000:.3f} s after its start")

    say(f"SIGKILL the shop worker (pid {worker.pid}) mid-sleep and start a new one on the same data")
    worker.kill()
    killed = time.monotonic()
    worker.start()
    show(f"new worker pid {worker.pid}, same instance id: it gets the partitions back at once")

    say("The outcomes (times after each instance's start): the sleeps kept the due times stored before the kill")

    async def outcomes() -> None:
        async def result(instance_id: str) -> tuple[str, Any]:
            return instance_id, await client.result(enrich, instance_id, 60)

        for arrived in asyncio.as_completed([result(i) for i in orders]):
            instance_id, outcome = await arrived
            origin, due = _started_at(journals[instance_id]), _timer_due(journals[instance_id])
            if isinstance(outcome, Finished):
                woke = outcome.value.at.timestamp() * 1000 - origin
                show(f"{instance_id:<15}  Finished {outcome.value.model_dump_json()}  "
                     f"due +{(due - origin) / 1000:.3f} s, now() +{woke / 1000:.3f} s")
            else:
                show(f"{instance_id:<15}  {outcome}")

    asyncio.run(outcomes())
    show(f"(the last one {time.monotonic() - killed:.1f} s after the SIGKILL)")

    say(f"The score activity ran once per instance (its calls, by idempotency key, in {score_log.name})")
    calls = Counter(line.split(" ", 1)[0] for line in score_log.read_text(encoding="utf-8").splitlines())
    for instance_id in orders:
        key = f"enrich/{instance_id}/1"
        show(f"{key:<23}  {calls[key]} call{'' if calls[key] == 1 else 's'}")

    say(f"The journal of {first} (topic {enrich.topics.journal}, compacted)")
    origin = _started_at(journals[first])
    for stored in read_topic(bootstrap, enrich.topics.journal):
        entry = avro.decode(stored.value or b"")
        if isinstance(entry, WorkflowJournalEntry) and entry.instance_id == first:
            show(f"partition {stored.partition} key {stored.key.decode() if stored.key else None}: "
                 f"{_describe(entry.record, origin)}")


def _approve_scene(client: Client, run_id: str) -> None:
    from examples.shop.app import approve

    say(f"approve: wait up to {_APPROVAL_WINDOW_S} s for the signal \"approval\" "
        "(the worker's $SHOP_APPROVAL_WINDOW)")
    yes, late = f"order-20-{run_id}", f"order-21-{run_id}"

    async def approvals() -> None:
        await client.start(approve, yes, "ABC")
        await client.start(approve, late, "XYZ")
        begun = time.perf_counter()
        await client.signal(approve, yes, "approval", True)
        value = await client.value(approve, yes, 60)
        show(f"{yes:<15}  signal approval true  -> Finished {json.dumps(value)}  "
             f"[{(time.perf_counter() - begun) * 1000:.0f} ms]")
        value = await client.value(approve, late, 60)
        show(f"{late:<15}  no signal             -> Finished {json.dumps(value)}  "
             f"[{time.perf_counter() - begun:.1f} s]")

    asyncio.run(approvals())


def _wait_for(ready: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(0.2)
    return value


def _journals_once(
    bootstrap: str, topic: str, instance_ids: Any, kind: str
) -> dict[str, list[JournalRecord]] | None:
    """Every instance's journal records, once each holds a step of ``kind``; else None."""
    journals: dict[str, list[JournalRecord]] = {i: [] for i in instance_ids}
    for stored in read_topic(bootstrap, topic):
        entry = avro.decode(stored.value or b"")
        if isinstance(entry, WorkflowJournalEntry) and entry.instance_id in journals:
            journals[entry.instance_id].append(entry.record)
    reached = all(any(isinstance(r, StepStarted) and r.kind == kind for r in records)
                  for records in journals.values())
    return journals if reached else None


def _started_at(journal: list[JournalRecord]) -> int:
    return next(r.at for r in journal if isinstance(r, Started))


def _timer_due(journal: list[JournalRecord]) -> int:
    return next(r.due for r in journal if isinstance(r, StepStarted) and r.due is not None)


def _describe(record: JournalRecord, started: int) -> str:
    """One journal record in a line: its type and fields, times after the first relative to it."""
    fields = []
    for name in record.__slots__:  # type: ignore[union-attr]
        value = getattr(record, name)
        if name == "seq" or value is None or value == "":
            continue
        if name in ("at", "due") and isinstance(record, Started):
            value = datetime.fromtimestamp(value / 1000, UTC).isoformat(timespec="milliseconds")
        elif name in ("at", "due"):
            value = f"+{(value - started) / 1000:.3f}s"
        elif isinstance(value, StepError):
            value = json.dumps(value.to_json())
        fields.append(f"{name}={value}")
    return f"{record_type_name(record)} {' '.join(fields)}"
