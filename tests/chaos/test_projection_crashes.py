"""Projections apply every stored event exactly once, across SIGKILL and restart."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from decimal import Decimal

from examples.bank.account import Deposit, Open
from tidings import App
from tidings.codec import avro
from tidings.core.records import DeadLetter, EventEnvelope
from tidings.shell.kinds.projection.views import ViewStore
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.workers import Workers, test_app, workers  # noqa: F401 - fixtures

ACCOUNTS = [f"p-{n:02d}" for n in range(20)]


def view_entries(path) -> dict[str, dict]:  # noqa: ANN001
    store = ViewStore(path, read_only=True)
    try:
        return dict(store.view.items())
    finally:
        store.close()


def test_a_projection_killed_mid_stream_applies_nothing_twice_and_misses_nothing(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    worker = workers.start()
    client = test_app.client(kafka_bootstrap)
    (balances,) = test_app.projections
    view_path = balances.view_path(worker.data_dir)

    async def scenario() -> None:
        await asyncio.gather(*(client.send("account", a, Open(owner=a)) for a in ACCOUNTS))
        for round_ in range(3):
            await asyncio.gather(*(
                client.send("account", ACCOUNTS[n % 20], Deposit(amount=Decimal(n % 7 + 1)))
                for n in range(round_ * 300, (round_ + 1) * 300)
            ))
            if round_ == 1:
                await asyncio.to_thread(worker.kill)
                workers.start("w1-restarted", data_dir=worker.data_dir)
        # A deposit of 13 makes the handler raise: dead-lettered, the rest goes on.
        await client.send("account", ACCOUNTS[0], Deposit(amount=Decimal(13)))
        await client.send("account", ACCOUNTS[0], Deposit(amount=Decimal(1)))

    asyncio.run(scenario())
    journal: dict[str, list[EventEnvelope]] = defaultdict(list)
    for record in read_topic(kafka_bootstrap, f"{test_app.name}.aggregate.account.events"):
        event = avro.decode_as(record.value, EventEnvelope)
        journal[event.aggregate_id].append(event)

    def caught_up() -> dict[str, dict]:
        entries = view_entries(view_path)
        # Not there yet is "not yet" too: the restarted worker's projection may still be
        # joining its group when the last command is answered.
        assert entries.get(ACCOUNTS[0], {}).get("version") == len(journal[ACCOUNTS[0]]), sorted(entries)
        return entries

    entries = assert_eventually(caught_up, timeout=60, interval=0.5)
    for aggregate_id, events in journal.items():
        entry = entries[aggregate_id]
        skipped = 1 if aggregate_id == ACCOUNTS[0] else 0  # the unlucky 13
        assert entry["applied"] == len(events) - skipped, (aggregate_id, entry)
        assert entry["version"] == len(events)
        deposits = sum(
            Decimal(json.loads(e.payload)["amount"]) for e in events if e.type == "Deposited"
        )
        assert Decimal(entry["balance"]) == deposits - 13 * skipped
        assert "gaps" not in entry or entry["gaps"] == [[events[-3].version, events[-1].version]]

    letters = [avro.decode_as(r.value, DeadLetter) for r in read_topic(kafka_bootstrap, f"{test_app.name}.deadletter")]
    assert [letter.error_type for letter in letters] == ["HandlerFailed"]
    assert "13 is unlucky" in letters[0].reason
