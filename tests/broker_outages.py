"""What the tests that stop a broker under a working worker share: their own broker, callers
that keep sending ``Add`` commands through one ``Client``, and the check that every command
sent was answered and stored exactly once (tests/chaos/test_broker_restarts.py,
tests/chaos/test_kafka_outage.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest

from tidings.broker import LocalBroker
from tidings.codec import avro
from tidings.core.records import EventEnvelope
from tidings.errors import BrokerError, ReplyTimeout
from tidings.shell.client.client import Client
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.apps import Add


def own_broker_fixture(name: str) -> object:
    """A module-scoped fixture: a broker of the module's own, which its tests may stop and
    start (the shared one must not be), stopped by the PID it recorded at the end."""

    @pytest.fixture(scope="module")
    def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
        broker = LocalBroker(tmp_path_factory.mktemp(name), heap="512m")
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()

    return own_broker


async def caller(
    client: Client, number: int, tallies: Sequence[str], stop: asyncio.Event,
    answered: dict[str, int], sent: dict[str, int], *, retry_s: float, pause_s: float = 0.0,
) -> None:
    """Send ``Add`` commands until ``stop``, as a real caller does: on a timeout or a broker
    error, again with the same command id; record what was sent and what was answered."""
    n = 0
    while not stop.is_set():
        n += 1
        command_id = f"add-{number}-{n}"
        tally = tallies[(number * 31 + n) % len(tallies)]
        sent[command_id] = n % 7 + 1
        while True:
            try:
                reply = await client.send_envelope("tally", tally, Add(amount=n % 7 + 1), 5,
                                                   command_id=command_id)
                break
            except (ReplyTimeout, BrokerError):
                await asyncio.sleep(retry_s)
        assert reply.status == "accepted", reply
        answered[command_id] = len(reply.events)
        if pause_s:
            await asyncio.sleep(pause_s)


def assert_every_command_stored_once(
    bootstrap: str, events_topic: str, sent: dict[str, int], answered: dict[str, int]
) -> None:
    """Every command sent was answered, and its event is in ``events_topic`` exactly once."""

    def stored_once() -> bool:
        stored = Counter(avro.decode_as(r.value or b"", EventEnvelope).command_id
                         for r in read_topic(bootstrap, events_topic))
        assert set(answered) == set(sent), "a command was sent but never answered"
        twice = [c for c, n in stored.items() if n > 1]
        missing = [c for c in sent if stored[c] != 1]
        assert twice == [] and missing == [], (f"{len(twice)} stored twice, e.g. {twice[:3]}; "
                                               f"{len(missing)} not stored, e.g. {missing[:3]}")
        return True

    assert_eventually(stored_once, timeout=30, interval=1.0)
