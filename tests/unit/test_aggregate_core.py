"""The pure aggregate core: decisions, versions, de-duplication, conflicts, restore."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from examples.bank import account
from examples.bank.account import Deposit, Open, Withdraw
from tidings.codec.payloads import load_payload, payload_of, type_registry
from tidings.core.aggregate import (
    DEFAULT_COMMAND_RETENTION,
    AggregateDefinition,
    AggregateInstance,
    Ignore,
    PersistAll,
    handle,
    reply_for_stored,
    restore,
)
from tidings.core.records import CommandEnvelope
from tidings.errors import DefinitionError

EVENTS = type_registry(
    [account.Opened, account.Deposited, account.Withdrawn, account.TransferSent,
     account.TransferReceived, account.TransferRefunded, account.Rejected]
)
COMMANDS = type_registry([Open, Deposit, Withdraw])
BANK = AggregateDefinition("account", account.initial, account.decide, account.fold, COMMANDS, EVENTS)


def envelope(command_id: str, value: object, expected_version: int | None = None) -> CommandEnvelope:
    type_name, payload = payload_of(value)
    return CommandEnvelope(
        command_id=command_id, correlation_id="corr", aggregate_id="alice", type=type_name,
        payload=payload, timestamp_ms=1, expected_version=expected_version,
    )


def run(instance: AggregateInstance, command_id: str, value: object, **kwargs: object):
    return handle(BANK, instance, envelope(command_id, value, **kwargs), value, now_ms=5, encode=payload_of)


def opened() -> AggregateInstance:
    return run(AggregateInstance.new("alice", account.initial), "c0", Open(owner="Alice")).instance


def test_persist_stores_the_next_version_and_folds_it() -> None:
    handled = run(opened(), "c1", Deposit(amount=Decimal(10)))
    assert [e.version for e in handled.stored] == [2]
    assert handled.instance.version == 2
    assert handled.instance.state.balance == Decimal(10)
    assert handled.reply.status == "accepted" and handled.reply.version == 2


def test_defer_folds_live_only_and_keeps_the_version() -> None:
    instance = opened()
    handled = run(instance, "c1", Withdraw(amount=Decimal(5)))
    assert handled.stored == ()
    assert handled.instance.version == 1
    assert handled.reply.events[0].deferred is True
    assert handled.reply.events[0].type == "Rejected"


def test_defer_fold_is_live_not_persisted() -> None:
    counter = AggregateDefinition(
        "counter", 0,
        lambda command, state: __import__("tidings").Defer(1) if command["defer"] else __import__("tidings").Persist(1),
        lambda event, state: state + event,
        {"json": dict}, {"json": dict},
    )
    instance = AggregateInstance.new("x", 0)
    deferred = handle(counter, instance, envelope("a", {"defer": True}), {"defer": True}, now_ms=1, encode=payload_of)
    assert (deferred.instance.live, deferred.instance.state, deferred.instance.version) == (1, 0, 0)
    stored = handle(counter, deferred.instance, envelope("b", {"defer": False}), {"defer": False}, now_ms=1, encode=payload_of)
    # The live state keeps the deferred fold; the persisted state holds stored events only.
    assert (stored.instance.live, stored.instance.state, stored.instance.version) == (2, 1, 1)


def test_persist_all_stores_one_batch_at_sequential_versions() -> None:
    definition = AggregateDefinition(
        "multi", 0, lambda c, s: PersistAll([1, 2, 3]), lambda e, s: s + e, {"json": dict}, {"json": dict}
    )
    handled = handle(definition, AggregateInstance.new("m", 0), envelope("a", {}), {}, now_ms=1, encode=payload_of)
    assert [e.version for e in handled.stored] == [1, 2, 3]
    assert len({e.event_id for e in handled.stored}) == 3
    assert handled.instance.state == 6
    assert handled.reply.version == 3


def test_ignore_changes_nothing() -> None:
    definition = AggregateDefinition(
        "noop", 0, lambda c, s: Ignore(), lambda e, s: s, {"json": dict}, {"json": dict}
    )
    handled = handle(definition, AggregateInstance.new("m", 0), envelope("a", {}), {}, now_ms=1, encode=payload_of)
    assert handled.stored == () and handled.reply.status == "ignored" and handled.instance.version == 0


def test_repeated_command_id_does_not_call_decide_again() -> None:
    calls = []

    def decide(command: object, state: int):
        calls.append(command)
        return __import__("tidings").Persist(1)

    definition = AggregateDefinition("count", 0, decide, lambda e, s: s + e, {"json": dict}, {"json": dict})
    verdicts: set[str] = set()
    first = handle(definition, AggregateInstance.new("m", 0), envelope("same", {}), {}, now_ms=1,
                   encode=payload_of, seen=verdicts.__contains__)
    assert not first.duplicate and first.reply is not None
    verdicts.add(first.reply.command_id)
    again = handle(definition, first.instance, envelope("same", {}), {}, now_ms=2, encode=payload_of,
                   seen=verdicts.__contains__)
    assert again.duplicate and again.stored == () and again.instance is first.instance
    assert again.reply is None
    assert len(calls) == 1


def test_a_command_id_is_a_duplicate_whatever_came_in_between() -> None:
    # No count window: the core asks the shell's store of first verdicts, nothing else.
    verdicts: set[str] = set()
    instance = opened()
    for n in range(1_000):
        handled = handle(BANK, instance, envelope(f"d{n}", Deposit(amount=Decimal(1))),
                         Deposit(amount=Decimal(1)), now_ms=5, encode=payload_of, seen=verdicts.__contains__)
        verdicts.add(f"d{n}")
        instance = handled.instance
    again = handle(BANK, instance, envelope("d0", Deposit(amount=Decimal(1))), Deposit(amount=Decimal(1)),
                   now_ms=6, encode=payload_of, seen=verdicts.__contains__)
    assert again.duplicate and again.stored == ()
    assert instance.version == 1_001


def test_the_default_command_retention_is_days() -> None:
    assert BANK.command_retention == DEFAULT_COMMAND_RETENTION
    assert DEFAULT_COMMAND_RETENTION.days >= 7
    assert BANK.command_retention_ms == 7 * 24 * 3600 * 1000


def test_expected_version_mismatch_is_a_conflict_and_stores_nothing() -> None:
    handled = run(opened(), "c1", Deposit(amount=Decimal(1)), expected_version=7)
    assert handled.reply.status == "conflict"
    assert (handled.reply.version, handled.reply.expected_version) == (1, 7)
    assert handled.stored == ()


def test_restore_folds_the_journal_and_skips_versions_out_of_order() -> None:
    live = opened()
    journal = []
    for n in range(3):
        handled = run(live, f"d{n}", Deposit(amount=Decimal(n + 1)))
        live = handled.instance
        journal.extend(handled.stored)
    first = run(AggregateInstance.new("alice", account.initial), "c0", Open(owner="Alice")).stored
    rebuilt = AggregateInstance.new("alice", account.initial)
    for event in [*first, *journal, journal[0]]:  # a duplicate at the end is skipped
        value = load_payload(event.type, event.payload, EVENTS)
        rebuilt = restore(BANK, rebuilt, event, value) or rebuilt
    assert rebuilt.version == live.version == 4
    assert rebuilt.state == live.state
    assert reply_for_stored([journal[1]]).command_id == "d1"


def test_a_definition_lists_every_problem() -> None:
    with pytest.raises(DefinitionError) as caught:
        AggregateDefinition("bad name", 0, None, None, {}, {},  # type: ignore[arg-type]
                            command_retention=timedelta(0))
    assert len(caught.value.reasons) == 6
    assert "command_retention must be a positive timedelta" in caught.value.reasons[-1]
