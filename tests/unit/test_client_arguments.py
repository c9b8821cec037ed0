"""Invalid client arguments raise precise exceptions before anything reaches Kafka."""

from __future__ import annotations

import asyncio

import pytest

from examples.bank.account import Deposit
from tests.integration.apps import Add, build
from tidings import App, DefinitionError


@pytest.fixture
def client():  # noqa: ANN201
    # Nothing listens on port 9: a call that tried Kafka would hang, not raise at once.
    client = build("args").client("127.0.0.1:9")
    yield client
    client._producer.flush(0)


def test_an_empty_aggregate_id_is_refused(client) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="aggregate_id"):
        asyncio.run(client.send("tally", "", Add(amount=1)))


def test_a_command_of_another_aggregate_is_refused(client) -> None:  # noqa: ANN001
    with pytest.raises(TypeError, match="Deposit is not a command of aggregate 'tally'"):
        asyncio.run(client.send("tally", "t-1", Deposit(amount=1)))


def test_an_unknown_aggregate_is_refused_with_the_known_ones(client) -> None:  # noqa: ANN001
    with pytest.raises(LookupError, match="known: account, tally"):
        asyncio.run(client.send("nope", "t-1", Add(amount=1)))


def test_an_invalid_app_lists_every_problem() -> None:
    with pytest.raises(DefinitionError) as caught:
        App("bad name", partitions=0, command_timeout=0)
    assert len(caught.value.reasons) == 3


def test_an_aggregate_declared_twice_or_with_bad_types_lists_every_problem() -> None:
    app = build("twice")
    with pytest.raises(DefinitionError) as caught:
        app.aggregate("tally", 0, lambda c, s: None, lambda e, s: s, command=42, event=Add)
    reasons = "\n".join(caught.value.reasons)
    assert "already declared" in reasons and "command=" in reasons
