"""A durable ``send_with_filter``: the awaited event is stored while the workflow's worker is dead."""

from __future__ import annotations

import asyncio

import pytest

from tidings import App, Finished
from tidings.codec import avro
from tidings.core.records import EventEnvelope
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic

from ..integration.send_apps import Confirm
from ..integration.test_workflow_sends import send_apps, two_workers  # noqa: F401 - fixtures
from ..workers import Workers

pytestmark = pytest.mark.chaos


def _events(bootstrap: str, topic: str, aggregate_id: str) -> list[EventEnvelope]:
    events = [avro.decode_as(record.value or b"", EventEnvelope) for record in read_topic(bootstrap, topic)]
    return [event for event in events if event.aggregate_id == aggregate_id]


def test_send_with_filter_survives_a_sigkill_and_sees_the_event_stored_while_the_worker_was_dead(
    kafka_bootstrap: str, send_apps: tuple[App, App], two_workers: tuple[Workers, Workers]  # noqa: F811
) -> None:
    app, bank = send_apps
    flows, banks = two_workers
    banks.start("bank")
    worker = flows.start("flows")
    reserve = app.workflow_handle("reserve")
    accounts = bank.aggregates[0]
    key = "reserve/r-1/1"  # the step's key: its command id and correlation id

    asyncio.run(reserve.start("r-1", "r-1"))
    # The step has sent Reserve and got Reserved back, which its filter does not take: it waits.
    assert_eventually(lambda: [e.type for e in _events(kafka_bootstrap, accounts.topics.events, "r-1")] == ["Reserved"],
                      timeout=60, message="the step's Reserve stored")
    worker.kill()

    async def confirm_while_dead() -> None:
        # A plain command under the step's correlation id; its reply goes to this client, so
        # the workflow can only learn of Confirmed from the aggregate's events topic.
        event = await bank.client().send(accounts, "r-1", Confirm(id="r-1"), correlation_id=key)
        assert type(event).__name__ == "Confirmed"

    asyncio.run(confirm_while_dead())
    assert [e.correlation_id for e in _events(kafka_bootstrap, accounts.topics.events, "r-1")] == [key, key]

    flows.start("flows-restarted", data_dir=worker.data_dir)
    outcome = asyncio.run(reserve.result("r-1", timeout=45))
    assert outcome == Finished("Confirmed r-1"), flows.log_tail()
    # The restart sent Reserve again; the aggregate answered it with its first verdict.
    assert [e.type for e in _events(kafka_bootstrap, accounts.topics.events, "r-1")] == ["Reserved", "Confirmed"]
