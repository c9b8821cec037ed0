"""Workflows send commands to an aggregate hosted by another worker process (real broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App, ErrorKind, Faulted, Finished
from tidings.shell.runtime.topics import apply_topics

from ..conftest import _delete_topics
from ..workers import Workers
from .send_apps import Withdraw, build
from tests.kafka_clients import kafka

pytestmark = pytest.mark.integration


@pytest.fixture
def send_apps(kafka_bootstrap: str, app_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[App, App]]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app, bank = build(app_id)
    for each in (app, bank):
        apply_topics(kafka(kafka_bootstrap), each.topic_specs(), out=lambda line: None)
    yield app, bank
    for handle in app.workflows:
        handle.close()
    for client in list(bank._clients.values()):
        client.close()
    _delete_topics(kafka_bootstrap, f"{bank.name}.")


@pytest.fixture
def two_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[tuple[Workers, Workers]]:
    """Worker processes of the workflow App and of the bank App (separate groups)."""
    flows = Workers(kafka_bootstrap, app_id, tmp_path / "flows", app_spec="tests.integration.send_apps:app")
    banks = Workers(kafka_bootstrap, app_id, tmp_path / "bank", app_spec="tests.integration.send_apps:bank")
    yield flows, banks
    flows.kill_all()
    banks.kill_all()


def test_a_workflow_sends_to_an_aggregate_another_worker_owns_and_gets_the_reply(
    send_apps: tuple[App, App], two_workers: tuple[Workers, Workers]
) -> None:
    app, bank = send_apps
    flows, banks = two_workers
    banks.start("bank")
    flows.start("flows")
    pay = app.workflow_handle("pay")

    async def scenario() -> None:
        await pay.start("p-1", "alice")
        await pay.start("p-2", "alice")
        await pay.start("p-3", "alice")
        outcomes = [await pay.result(f"p-{n}", timeout=60) for n in (1, 2, 3)]
        assert outcomes == [Finished("took 30")] * 3, flows.log_tail() + banks.log_tail()
        # The fourth withdrawal finds 10 left: the account ignores it, the step fails NOT_RETRYABLE.
        await pay.start("p-4", "alice")
        refused = await pay.result("p-4", timeout=60)
        assert isinstance(refused, Faulted) and refused.error.kind is ErrorKind.NOT_RETRYABLE, refused
        assert "ignored" in refused.error.message

    asyncio.run(scenario())
    accounts = bank.aggregates[0]

    async def balance_left() -> None:
        # Three withdrawals of 30 were stored, once each: a fourth of 10 is taken, not 30.
        client = bank.client()
        assert await client.send(accounts, "alice", Withdraw(amount=10)) is not None
        assert await client.send(accounts, "alice", Withdraw(amount=1)) is None

    asyncio.run(balance_left())
