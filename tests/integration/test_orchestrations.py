"""Hosted orchestrations on the real broker: routed, journaled, acted on once, finished once."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter


from tidings import App
from tidings.codec import avro
from tidings.core.orchestration_records import OrchestrationEvent
from tidings.core.records import DeadLetter
from tidings.testing.topics import read_topic
from tests.integration.orchestration_apps import Happen
from tests.orchestration_workers import (  # noqa: F401 - fixtures
    Executor,
    OrchestrationWorkers,
    orchestration_app,
    orchestration_workers,
)
from tests.kafka_clients import kafka

ORDERS = [f"o-{n}" for n in range(6)]


async def drive(executor: Executor, orders: list[str], *, timeout: float = 120.0) -> None:
    """Execute actions until every order has an outcome."""
    deadline = time.monotonic() + timeout
    while True:
        await executor.run_once()
        finished = {o.instance for o in await asyncio.to_thread(executor.outcomes)}
        if finished >= set(orders):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no outcome for {sorted(set(orders) - finished)}")
        await asyncio.sleep(0.3)


def assert_acted_once(executor: Executor, orders: list[str]) -> None:
    keys = Counter((w.instance, w.position) for w in executor.seen)
    assert [key for key, n in keys.items() if n > 1] == [], "an action record was repeated"
    for order in orders:
        types = Counter(a.type for w in executor.seen if w.instance == order for a in w.actions)
        assert types == {"Charge": 1, "Pack": 1, "Label": 1, "Ship": 1}, (order, types)
    outcomes = Counter(o.instance for o in executor.outcomes())
    assert outcomes == {order: 1 for order in orders}


def test_orchestrations_act_once_per_position_and_write_each_outcome_once(
    kafka_bootstrap: str, orchestration_app: App, orchestration_workers: OrchestrationWorkers
) -> None:
    orchestration_workers.start()
    client = orchestration_app.client(kafka_bootstrap)
    executor = Executor(orchestration_app, kafka_bootstrap)

    async def scenario() -> None:
        await asyncio.gather(*(
            client.send("ledger", f"order-{o}", Happen(order=o, step="placed")) for o in ORDERS
        ))
        # Events for an instance from yet another ledger instance: they change nothing.
        await asyncio.gather(*(
            client.send("ledger", f"noise-{o}", Happen(order=o, step="noise")) for o in ORDERS
        ))
        await drive(executor, ORDERS)

    asyncio.run(scenario())
    assert_acted_once(executor, ORDERS)
    for outcome in executor.outcomes():
        assert outcome.type == "Shipped"
        assert json.loads(outcome.payload or b"") == {"order": outcome.instance}

    journal = read_topic(kafka_bootstrap, f"{orchestration_app.name}.orchestration.fulfil.journal")
    sequences: dict[str, list[int]] = {}
    for record in journal:
        entry = avro.decode_as(record.value, OrchestrationEvent)
        assert record.key == f"{entry.instance}/{entry.sequence}".encode()
        sequences.setdefault(entry.instance, []).append(entry.sequence)
    # placed, noise, paid, packed, labelled, shipped: six events, journaled once each.
    assert sequences == {order: [1, 2, 3, 4, 5, 6] for order in ORDERS}


def test_bad_events_are_dead_lettered_and_the_orchestration_goes_on(
    kafka_bootstrap: str, orchestration_app: App, orchestration_workers: OrchestrationWorkers
) -> None:
    orchestration_workers.start()
    client = orchestration_app.client(kafka_bootstrap)
    executor = Executor(orchestration_app, kafka_bootstrap)
    producer = kafka(kafka_bootstrap).producer()
    producer.produce(f"{orchestration_app.name}.aggregate.ledger.events", b"not avro", b"junk")
    producer.flush(10)
    order = "o-bad"

    async def scenario() -> None:
        await client.send("ledger", f"order-{order}", Happen(order=order, step="placed"))
        await client.send("ledger", "x-1", Happen(order=order, step="explode"))  # key_of raises
        await client.send("ledger", "x-2", Happen(order=order, step="boom"))  # instance raises
        await drive(executor, [order])

    asyncio.run(scenario())
    assert_acted_once(executor, [order])
    letters = [
        avro.decode_as(r.value, DeadLetter)
        for r in read_topic(kafka_bootstrap, f"{orchestration_app.name}.deadletter")
    ]
    assert sorted(letter.error_type for letter in letters) == [
        "DecodeError", "KeyOfFailed", "OrchestrationFailed"
    ]
