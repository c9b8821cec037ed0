"""The aggregate's SagaAlreadyStarted check: pure, before anything is stored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from tidings.codec.payloads import payload_of, type_registry
from tidings.core.aggregate import (
    AggregateDefinition,
    AggregateInstance,
    Decision,
    Defer,
    Persist,
    PersistAll,
    handle,
)
from tidings.core.records import CommandEnvelope, EventEnvelope
from tidings.core.saga_starts import (
    REFUSAL_PREFIX,
    SagaRefusal,
    SagaStarts,
    check_saga_starts,
    started_by,
)


class Go(BaseModel):
    how: str


class Started(BaseModel):
    n: int


class Noted(BaseModel):
    n: int


@dataclass(frozen=True)
class Starter:
    """A saga that starts on ``Started`` events (``start_on`` of a test saga)."""

    name: str
    on: type = Started

    def starts(self, event: EventEnvelope, value: Any) -> bool:
        return isinstance(value, self.on)


def envelope(value: BaseModel, *, correlation_id: str = "corr", deferred: bool = False,
             version: int = 1) -> EventEnvelope:
    type_name, payload = payload_of(value)
    return EventEnvelope(
        event_id=f"e{version}", command_id="cmd", correlation_id=correlation_id,
        aggregate_id="alice", version=version, type=type_name, payload=payload,
        timestamp_ms=1, deferred=deferred,
    )


def never(saga: str, correlation_id: str) -> bool:
    return False


# -- the pure check ------------------------------------------------------------------------


def test_an_accepted_event_starts_each_saga_that_accepts_it() -> None:
    events = [(envelope(Noted(n=0)), Noted(n=0)), (envelope(Started(n=1), version=2), Started(n=1))]
    verdict = check_saga_starts([Starter("transfer"), Starter("audit", Noted)], events, never,
                                aggregate="account")
    assert verdict == SagaStarts((("audit", "corr"), ("transfer", "corr")))


def test_no_starter_accepting_starts_nothing() -> None:
    verdict = check_saga_starts([Starter("transfer")], [(envelope(Noted(n=0)), Noted(n=0))], never,
                                aggregate="account")
    assert verdict == SagaStarts(())


def test_a_pair_started_before_is_refused() -> None:
    asked: list[tuple[str, str]] = []

    def started(saga: str, correlation_id: str) -> bool:
        asked.append((saga, correlation_id))
        return (saga, correlation_id) == ("transfer", "t-1")

    verdict = check_saga_starts(
        [Starter("transfer")], [(envelope(Started(n=1), correlation_id="t-1"), Started(n=1))],
        started, aggregate="account",
    )
    assert isinstance(verdict, SagaRefusal)
    assert verdict.reason.startswith(REFUSAL_PREFIX)
    assert "'transfer'" in verdict.reason and "'t-1'" in verdict.reason and "'alice'" in verdict.reason
    assert asked == [("transfer", "t-1")]
    # Another correlation id is another saga.
    assert check_saga_starts(
        [Starter("transfer")], [(envelope(Started(n=1), correlation_id="t-2"), Started(n=1))],
        started, aggregate="account",
    ) == SagaStarts((("transfer", "t-2"),))


def test_two_events_of_one_command_starting_one_saga_are_refused() -> None:
    events = [(envelope(Started(n=1)), Started(n=1)), (envelope(Started(n=2), version=2), Started(n=2))]
    verdict = check_saga_starts([Starter("transfer")], events, never, aggregate="account")
    assert isinstance(verdict, SagaRefusal)
    assert verdict.reason.startswith(REFUSAL_PREFIX) and "two events" in verdict.reason


def test_a_deferred_event_starts_no_saga() -> None:
    def started(saga: str, correlation_id: str) -> bool:
        raise AssertionError("a deferred event needs no lookup")

    verdict = check_saga_starts(
        [Starter("transfer")], [(envelope(Started(n=1), deferred=True), Started(n=1))], started,
        aggregate="account",
    )
    assert verdict == SagaStarts(())
    assert started_by([Starter("transfer")], envelope(Started(n=1), deferred=True), Started(n=1)) == ()


def test_started_by_names_every_accepting_saga_of_a_stored_event() -> None:
    starters = [Starter("transfer"), Starter("audit"), Starter("other", Noted)]
    assert started_by(starters, envelope(Started(n=1), correlation_id="t-9"), Started(n=1)) == (
        ("transfer", "t-9"), ("audit", "t-9"),
    )


def test_a_long_id_is_shown_cut_in_the_reason() -> None:
    long_id = "x" * 255
    verdict = check_saga_starts(
        [Starter("transfer")], [(envelope(Started(n=1), correlation_id=long_id), Started(n=1))],
        lambda saga, correlation_id: True, aggregate="account",
    )
    assert isinstance(verdict, SagaRefusal) and long_id not in verdict.reason
    assert len(verdict.reason) < 300


# -- in the aggregate core ---------------------------------------------------------------


def decide(command: Go, state: int) -> Decision:
    match command.how:
        case "start":
            return Persist(Started(n=state + 1))
        case "start-twice":
            return PersistAll([Started(n=state + 1), Started(n=state + 2)])
        case "note-and-start":
            return PersistAll([Noted(n=state + 1), Started(n=state + 2)])
        case "defer-start":
            return Defer(Started(n=state + 1))
    raise ValueError(command.how)


def fold(event: Started | Noted, state: int) -> int:
    return event.n


DEFINITION = AggregateDefinition(
    "thing", 0, decide, fold, type_registry([Go]), type_registry([Started, Noted])
)


def _command(command_id: str, how: str, correlation_id: str) -> CommandEnvelope:
    type_name, payload = payload_of(Go(how=how))
    return CommandEnvelope(
        command_id=command_id, correlation_id=correlation_id, aggregate_id="alice",
        type=type_name, payload=payload, timestamp_ms=1,
    )


def run(instance: AggregateInstance[int], command_id: str, how: str, correlation_id: str,
        started: set[tuple[str, str]]) -> Any:
    value = Go(how=how)
    command = _command(command_id, how, correlation_id)
    return handle(DEFINITION, instance, command, value, now_ms=5, encode=payload_of,
                  starters=[Starter("transfer")],
                  started=lambda saga, corr: (saga, corr) in started)


def test_the_core_reports_the_pairs_a_stored_command_starts() -> None:
    handled = run(AggregateInstance.new("alice", 0), "c1", "note-and-start", "t-1", set())
    assert handled.reply.status == "accepted" and len(handled.stored) == 2
    assert handled.sagas == (("transfer", "t-1"),)


def test_the_core_refuses_a_reused_correlation_id_and_stores_nothing() -> None:
    started: set[tuple[str, str]] = set()
    first = run(AggregateInstance.new("alice", 0), "c1", "start", "t-1", started)
    started.update(first.sagas)
    refused = run(first.instance, "c2", "start", "t-1", started)
    assert refused.stored == () and refused.sagas == ()
    assert refused.reply.status == "rejected"
    assert refused.reply.reason.startswith(REFUSAL_PREFIX)
    # Nothing changed but the remembered verdict: same version and state.
    assert (refused.instance.version, refused.instance.state) == (1, 1)
    # The repeat of the refused command gets its first verdict back (a duplicate): the
    # shell remembers the verdict like any other.
    again = handle(DEFINITION, refused.instance, _command("c2", "start", "t-1"), Go(how="start"), now_ms=6,
                   encode=payload_of, starters=[Starter("transfer")], started=lambda saga, corr: False,
                   seen={"c1", "c2"}.__contains__)
    assert again.duplicate and again.stored == ()


def test_the_core_refuses_a_command_whose_two_events_start_one_saga() -> None:
    refused = run(AggregateInstance.new("alice", 0), "c1", "start-twice", "t-1", set())
    assert refused.stored == () and refused.reply.status == "rejected"
    assert refused.reply.reason.startswith(REFUSAL_PREFIX)
    assert refused.instance.version == 0


def test_a_deferred_start_needs_no_check_and_starts_nothing() -> None:
    handled = run(AggregateInstance.new("alice", 0), "c1", "defer-start", "t-1", {("transfer", "t-1")})
    assert handled.reply.status == "accepted" and handled.sagas == ()


def test_a_starter_raising_propagates_to_the_caller() -> None:
    class Broken:
        name = "broken"

        def starts(self, event: EventEnvelope, value: Any) -> bool:
            raise RuntimeError("boom")

    value = Go(how="start")
    type_name, payload = payload_of(value)
    command = CommandEnvelope(command_id="c", correlation_id="c", aggregate_id="a",
                              type=type_name, payload=payload, timestamp_ms=1)
    # The agent turns this into HandlerFailed (a dead letter), as it does for decide raising.
    with pytest.raises(RuntimeError, match="boom"):
        handle(DEFINITION, AggregateInstance.new("a", 0), command, value, now_ms=1,
               encode=payload_of, starters=[Broken()])


# -- where the aggregate gets its starters ------------------------------------------------


def test_sagas_of_lists_the_declared_sagas_subscribed_to_the_aggregate_then_registered_ones() -> None:
    from examples.bank import account
    from tidings import App

    app = App("bank-starters")
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)
    app.aggregate("ledger", 0, decide, fold, command=Go, event=Started | Noted)
    seen: list[Any] = []

    def start_on(event: Any) -> bool:
        seen.append(event)
        return isinstance(event.value, account.TransferSent)

    app.saga("transfer", subscribe=[accounts], start_on=start_on, initial=0,
             handle=lambda event, state: None, on_enter=lambda state, recovering: (None, []))
    app.register_saga_starter("account", Starter("audit", account.Opened))
    assert [s.name for s in app.sagas_of("account")] == ["transfer", "audit"]
    assert app.sagas_of("ledger") == []
    (transfer, _) = app.sagas_of("account")
    sent = account.TransferSent(transfer_id="t", target="bob", amount=1)
    assert transfer.starts(envelope(sent, correlation_id="t-1"), sent)
    assert not transfer.starts(envelope(Noted(n=1)), account.Opened(owner="x"))
    # start_on sees the event as the saga runtime will: a SagaEvent of that aggregate.
    assert (seen[0].aggregate, seen[0].correlation_id, seen[0].value) == ("account", "t-1", sent)
