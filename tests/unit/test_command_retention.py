"""First verdicts are kept by time: the store's layout and expiry, and the definitions that
could resend after an aggregate forgot a command id (refused when declared)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from examples.bank import account
from examples.bank.account import Deposit
from tidings import App, Expect, Retry, Send
from tidings.core.aggregate import AggregateInstance
from tidings.core.workflow.retry import Backoff, RetryPolicy
from tidings.core.workflow.sends import SendRequest
from tidings.errors import DefinitionError
from tidings.shell.kinds.aggregate.store import AggregateStore


def bank(retention: timedelta | None = None, **app_options: object):  # noqa: ANN201
    app = App("bank", **app_options)  # type: ignore[arg-type]
    extra = {} if retention is None else {"command_retention": retention}
    return app.aggregate("account", account.initial, account.decide, account.fold,
                         command=account.AccountCommand, event=account.AccountEvent, **extra)


# -- declaring -------------------------------------------------------------------------------


def test_the_retention_defaults_to_seven_days_and_sets_the_verdicts_topic() -> None:
    accounts = bank()
    assert accounts.definition.command_retention == timedelta(days=7)
    specs = {spec.name: spec for spec in accounts.topic_specs()}
    verdicts = specs["bank.aggregate.account.verdicts"]
    assert verdicts.config["retention.ms"] == str(7 * 24 * 3600 * 1000)
    assert verdicts.config["cleanup.policy"] == "delete"
    assert verdicts.partitions == specs["bank.aggregate.account.commands"].partitions
    longer = bank(timedelta(days=30)).topic_specs()
    assert {s.name: s for s in longer}["bank.aggregate.account.verdicts"].config["retention.ms"] == str(
        30 * 24 * 3600 * 1000)


@pytest.mark.parametrize("retention", [timedelta(minutes=1), timedelta(0), timedelta(seconds=-5)])
def test_a_retention_shorter_than_the_platforms_own_resends_is_refused(retention: timedelta) -> None:
    with pytest.raises(DefinitionError) as caught:
        bank(retention)
    assert any("command_retention" in reason for reason in caught.value.reasons)


def test_the_retention_must_outlast_the_command_timeout() -> None:
    bank(timedelta(minutes=10), command_timeout=300)  # 5 minutes: Retry.command's deadline too
    with pytest.raises(DefinitionError, match="command_timeout"):
        bank(timedelta(minutes=10), command_timeout=3600)


@pytest.mark.parametrize("retention", ["7 days", 7, 3.5])
def test_a_retention_that_is_not_a_timedelta_is_refused(retention: object) -> None:
    with pytest.raises(DefinitionError, match="command_retention must be a positive timedelta"):
        bank(retention)  # type: ignore[arg-type]


def test_a_saga_expectation_longer_than_the_retention_is_refused() -> None:
    accounts = bank(timedelta(days=2))
    Send(accounts, "alice", Deposit(amount=Decimal(1)), expect=Expect(within=timedelta(days=2)))
    with pytest.raises(DefinitionError, match="command_retention=2 days"):
        Send(accounts, "alice", Deposit(amount=Decimal(1)),
             expect=Expect(within=timedelta(days=3), resend_every=timedelta(hours=1)))


def test_a_workflow_send_policy_that_outlasts_the_retention_is_refused() -> None:
    accounts = bank(timedelta(days=1))
    command = Deposit(amount=Decimal(1))
    for fine in (Retry.command, Retry.times(3), Retry.forever(timedelta(hours=23)), Retry.none):
        SendRequest(accounts, "alice", command, fine, None, None)
    for resends_too_long in (RetryPolicy(attempts=None), Retry.forever(timedelta(days=2)),
                             Retry.times(10_000)):
        with pytest.raises(DefinitionError, match="command_retention=1 day"):
            SendRequest(accounts, "alice", command, resends_too_long, None, None)


def test_a_policys_horizon() -> None:
    thirty = timedelta(seconds=30)
    assert Retry.command.horizon(thirty) == timedelta(minutes=5)
    assert RetryPolicy(attempts=None).horizon(thirty) is None
    # 3 attempts of 30 s each, 1 s and 2 s of backoff between them.
    assert Retry.times(3).horizon(thirty) == timedelta(seconds=93)
    assert Retry.times(3).replace(attempt_timeout=timedelta(seconds=5)).horizon(thirty) == timedelta(seconds=18)
    # Long runs of attempts: every wait after the 64th is the backoff's maximum.
    flat = RetryPolicy(attempts=1_000, backoff=Backoff(timedelta(seconds=1), 1.0, timedelta(seconds=1)))
    assert flat.horizon(timedelta(0)) == timedelta(seconds=999)


# -- the store -------------------------------------------------------------------------------


def open_store(path: Path) -> AggregateStore[account.AccountState]:
    return AggregateStore(path, account.AccountState, definition_name="account")


def test_verdicts_are_found_however_many_came_since_and_expire_by_age(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        store.write((), {("alice", f"c{n}"): (b"reply-%d" % n, 1_000 + n) for n in range(5_000)}, {})
        assert store.reply("alice", "c0") == b"reply-0" and store.reply("alice", "c4999") == b"reply-4999"
        assert store.verdict_count() == 5_000
        # Everything decided before 3,000 ms goes, oldest first, in bounded passes.
        assert store.expire(3_000, limit=1_500) == 1_500
        assert store.expire(3_000, limit=1_500) == 500
        assert store.expire(3_000) == 0
        assert store.reply("alice", "c1999") is None and store.reply("alice", "c2000") == b"reply-2000"
        assert store.verdict_count() == 3_000
    finally:
        store.close()


def test_ids_holding_separators_never_meet(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        store.write((), {("a/b", "c"): (b"one", 1), ("a\x00", "b"): (b"two", 1)}, {})
        assert store.reply("a", "b/c") is None and store.reply("a", "\x00b") is None
        assert store.reply("a/b", "c") == b"one" and store.reply("a\x00", "b") == b"two"
    finally:
        store.close()


def test_instances_and_both_offsets_survive_a_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    state = account.AccountState(owner="Alice", balance=Decimal(3))
    store.write([AggregateInstance("alice", 4, state, state)], {("alice", "c"): (b"r", 5)}, {2: 17},
                verdict_offsets={2: 9})
    store.close()
    store = open_store(tmp_path / "s")
    try:
        loaded = store.load("alice")
        assert loaded is not None and (loaded.version, loaded.state) == (4, state)
        assert (store.offset(2), store.verdicts_offset(2), store.verdicts_offset(1)) == (17, 9, None)
        assert store.reply("alice", "c") == b"r"
    finally:
        store.close()
