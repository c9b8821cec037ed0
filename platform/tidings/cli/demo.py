"""``tidings demo``: the bank example end to end on a real Kafka broker, narrated.

It starts a local broker (unless ``TIDINGS_BOOTSTRAP`` is set), applies the bank's topics,
runs a worker process, sends commands, kills the worker with SIGKILL, restarts it and
shows that nothing was lost, then stops everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..broker import LocalBroker
from ..codec import avro
from ..core.records import EventEnvelope
from ..shell.topics import apply_topics
from ..shell.views import ViewStore
from ..testing.processes import WorkerProcess
from ..testing.topics import read_topic
from .loading import load_app

_DESCRIPTION = """\
Run the bank example (examples/bank) end to end: a local Apache Kafka broker (or the one
in $TIDINGS_BOOTSTRAP), the Account aggregate in a worker process, commands from a client,
a SIGKILL of the worker and its restart, the journal and the balances projection.
Everything the demo starts, it stops. Run it from the repository root.
"""


def register(subparsers: Any) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser(
        "demo",
        help="run the bank example end to end on a real broker",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workdir", type=Path, help="where the broker and worker keep data (default: a temp dir)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tidings-demo-"))
    broker: LocalBroker | None = None
    bootstrap = os.environ.get("TIDINGS_BOOTSTRAP")
    if not bootstrap:
        say("Starting a local Apache Kafka broker (the first run downloads it)")
        broker = LocalBroker(workdir / "broker", on_progress=lambda line: print(f"   {line}"))
        bootstrap = broker.start()
    say(f"Kafka is at {bootstrap}")
    try:
        return _demo(bootstrap, workdir)
    finally:
        if broker is not None:
            broker.stop()
            say("Stopped the broker")


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def show(text: str) -> None:
    print(f"   {text}", flush=True)


def _demo(bootstrap: str, workdir: Path) -> int:
    load_app("examples.bank.app:app")  # puts the current directory on sys.path
    from examples.bank import account
    from examples.bank.app import accounts, app, balances

    report = apply_topics(bootstrap, app.topic_specs(), out=lambda line: None)
    say(f"Applied {len(app.topic_specs())} topics ({len(report.created)} created)")
    worker = WorkerProcess(
        "examples.bank.app:app",
        bootstrap=bootstrap,
        data_dir=workdir / "worker",
        log_path=workdir / "worker.log",
        cwd=Path.cwd(),
    )
    worker.start()
    say(f"Started a worker, pid {worker.pid} (log: {worker.log_path})")
    client = app.client(bootstrap)
    run_id = uuid.uuid4().hex[:6]
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
    client.close()
    worker.stop()
    say("Stopped the worker. Done.")
    return 0
