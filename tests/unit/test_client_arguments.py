"""Invalid client arguments raise precise exceptions before anything reaches Kafka."""

from __future__ import annotations

import asyncio

import pytest

from pydantic import BaseModel

from examples.bank.account import Deposit
from tests.integration.apps import Add, build
from tidings import App, DefinitionError, LimitError, Persist, SchemaError, WorkflowContext
from tidings.core.limits import MAX_PAYLOAD_BYTES
from tidings.shell.kinds.workflow.handle import workflow_named


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


# -- limits (tidings.core.limits): refused before producing, as LimitError ----------------------


class Note(BaseModel):
    text: str


def noting(command: Note, state: int) -> Persist[Note]:
    return Persist(command)


@pytest.fixture
def limits_app() -> App:
    app = App("limits", partitions=1)
    app.aggregate("notes", 0, noting, lambda event, state: state + 1, command=Note, event=Note)

    @app.workflow("echo")
    async def echo(ctx: WorkflowContext, text: str) -> str:
        return text

    return app


@pytest.mark.parametrize(
    ("aggregate_id", "options", "message"),
    [
        ("s-\ud800", {}, "aggregate_id 's-\\\\ud800' is not valid UTF-8"),
        ("a" * 300_000, {}, "aggregate_id 'a+'... is 300000 bytes"),
        ("n-1", {"command_id": "c" * 300_000}, "command_id 'c+'... is 300000 bytes"),
        ("n-1", {"command_id": "s-\ud800"}, "command_id .* is not valid UTF-8"),
        ("n-1", {"correlation_id": "x" * 256}, "correlation_id .* is 256 bytes"),
    ],
)
def test_an_id_over_a_limit_is_refused_before_producing(
    limits_app: App, aggregate_id: str, options: dict[str, str], message: str
) -> None:
    client = limits_app.client("127.0.0.1:9")
    try:
        with pytest.raises(LimitError, match=message) as caught:
            asyncio.run(client.send("notes", aggregate_id, Note(text="hi"), **options))
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, SchemaError)
    finally:
        client._producer.flush(0)


def test_a_command_payload_over_the_limit_is_refused_before_producing(limits_app: App) -> None:
    client = limits_app.client("127.0.0.1:9")
    try:
        with pytest.raises(LimitError, match=f"payload is .* bytes; the limit is {MAX_PAYLOAD_BYTES}"):
            asyncio.run(client.send("notes", "n-1", Note(text="x" * MAX_PAYLOAD_BYTES)))
    finally:
        client._producer.flush(0)


def test_workflow_ids_signal_names_and_payloads_over_a_limit_are_refused_before_producing(limits_app: App) -> None:
    # Every check runs before the handle makes its Kafka client for the address.
    echo = workflow_named(limits_app, "echo")
    with pytest.raises(LimitError, match="instance_id must not be empty"):
        asyncio.run(echo.start("", "hi", bootstrap="127.0.0.1:9"))
    with pytest.raises(LimitError, match="instance_id .* is not valid UTF-8"):
        asyncio.run(echo.start("s-\ud800", "hi", bootstrap="127.0.0.1:9"))
    with pytest.raises(LimitError, match="instance_id .* is 300000 bytes"):
        asyncio.run(echo.status("i" * 300_000, bootstrap="127.0.0.1:9"))
    with pytest.raises(LimitError, match=f"the input is .* bytes; the limit is {MAX_PAYLOAD_BYTES}"):
        asyncio.run(echo.start("e-1", "x" * MAX_PAYLOAD_BYTES, bootstrap="127.0.0.1:9"))
    with pytest.raises(LimitError, match="signal name must not be empty"):
        asyncio.run(echo.signal("e-1", "", bootstrap="127.0.0.1:9"))
    with pytest.raises(LimitError, match="signal name .* is 256 bytes"):
        asyncio.run(echo.signal("e-1", "s" * 256, bootstrap="127.0.0.1:9"))
    with pytest.raises(LimitError, match="the payload of signal 'go' is .* bytes"):
        asyncio.run(echo.signal("e-1", "go", "x" * MAX_PAYLOAD_BYTES, bootstrap="127.0.0.1:9"))
    assert echo._clients == {}
