"""The send step in the pure interpreter: replies, resends, OUTCOME_UNKNOWN, replay, filters."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel

from tidings.core.workflow import (
    Cancel,
    ErrorKind,
    Faulted,
    Finished,
    Retry,
    Start,
    StepCompleted,
    StepKind,
    StepStarted,
    WorkflowContext,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
    replay,
)
from tidings.core.workflow.sends import (
    CommandReplied,
    EventsSeen,
    SendCommand,
    SendTimedOut,
    SentEvent,
    StopSend,
)
from tidings.errors import WorkflowStepFailed


class Withdraw(BaseModel):
    amount: int


class Withdrawn(BaseModel):
    amount: int


class Deposited(BaseModel):
    amount: int  # the same shape as Withdrawn: only the stored type name tells them apart


class Reserved(BaseModel):
    id: str


class Confirmed(BaseModel):
    id: str


ACCOUNTS = SimpleNamespace(name="account", definition=SimpleNamespace(
    event_types={"Withdrawn": Withdrawn, "Deposited": Deposited, "Reserved": Reserved, "Confirmed": Confirmed}))
KEY = "pay/i/1"


async def pay(ctx: WorkflowContext, _: None) -> str:
    reply = await ctx.send(ACCOUNTS, "alice", Withdraw(amount=30))
    return f"{type(reply).__name__} {reply.amount}"


def _is_confirmed(event: Any) -> bool:
    return isinstance(event, Confirmed)


async def reserve(ctx: WorkflowContext, _: None) -> str:
    patient = Retry.command.replace(attempt_timeout=timedelta(minutes=5))
    event = await ctx.send_with_filter(patient, _is_confirmed, ACCOUNTS, "r-1", Withdraw(amount=1))
    return f"{type(event).__name__} {event.id}"


def _sends(decision: Any) -> list[SendCommand]:
    return [e for e in decision.effects if isinstance(e, SendCommand)]


def _started(body: Any, name: str = "pay") -> tuple[WorkflowInstance, Any]:
    instance = WorkflowInstance(define_workflow(name, body), "i")
    return instance, instance.advance(Start(None), 1_000)


def test_a_send_stores_its_start_and_sends_with_the_step_key_as_command_and_correlation_id() -> None:
    instance, decision = _started(pay)
    (started,) = [r for r in decision.records if isinstance(r, StepStarted)]
    assert (started.kind, started.name, started.path) == (StepKind.SEND, "account", "1")
    (send,) = _sends(decision)
    assert (send.command_id, send.aggregate_id, send.attempt, send.not_before) == (KEY, "alice", 1, 1_000)
    assert send.command == Withdraw(amount=30) and send.aggregate is ACCOUNTS
    assert send.timeout_ms is None  # the shell applies App(command_timeout)
    assert send.deadline_at == 1_000 + 300_000  # Retry.command: five minutes
    assert send.watch_from is None  # only a filter step watches the events topic


def test_the_reply_answers_the_step_with_its_last_event_read_as_the_stored_type() -> None:
    instance, _ = _started(pay)
    events = (SentEvent("Deposited", Deposited(amount=1), KEY), SentEvent("Withdrawn", Withdrawn(amount=30), KEY))
    decision = instance.advance(CommandReplied("1", KEY, "accepted", events), 2_000)
    assert instance.outcome == Finished("Withdrawn 30")
    (completed,) = [r for r in decision.records if isinstance(r, StepCompleted)]
    assert '"type":"Withdrawn"' in completed.result
    assert StopSend("1") in decision.effects


def test_a_late_reply_to_an_earlier_send_still_answers_the_step() -> None:
    instance, _ = _started(pay)
    decision = instance.advance(SendTimedOut("1", 1), 31_000)
    (resend,) = _sends(decision)
    assert (resend.attempt, resend.command_id) == (2, KEY)
    assert resend.not_before == 32_000  # backoff: one second after the first timeout
    # The reply to attempt 1 arrives while attempt 2 waits: the same command id answers.
    instance.advance(CommandReplied("1", KEY, "accepted", (SentEvent("Withdrawn", Withdrawn(amount=30), KEY),)), 33_000)
    assert instance.outcome == Finished("Withdrawn 30")


def test_a_stale_timeout_changes_nothing() -> None:
    instance, _ = _started(pay)
    instance.advance(SendTimedOut("1", 1), 31_000)
    decision = instance.advance(SendTimedOut("1", 1), 31_500)
    assert decision.records == () and _sends(decision) == []


def test_a_policy_that_runs_out_fails_the_step_outcome_unknown() -> None:
    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.send_with(Retry.times(2), ACCOUNTS, "alice", Withdraw(amount=30))
        except WorkflowStepFailed as failed:
            return failed.error.kind.value  # type: ignore[union-attr]
        return "replied"

    instance, _ = _started(body)
    assert _sends(instance.advance(SendTimedOut("1", 1), 31_000))[0].attempt == 2
    decision = instance.advance(SendTimedOut("1", 2), 63_000)
    assert instance.outcome == Finished(ErrorKind.OUTCOME_UNKNOWN.value)
    assert StopSend("1") in decision.effects
    # A reply after the step failed answers nothing.
    late = instance.advance(CommandReplied("1", KEY, "accepted", (SentEvent("Withdrawn", Withdrawn(amount=1), KEY),)), 64_000)
    assert late.records == ()


def test_the_deadline_of_retry_command_ends_the_step_outcome_unknown() -> None:
    instance, _ = _started(pay)
    now, attempt = 1_000, 1
    while instance.status is WorkflowStatus.RUNNING:
        now += 31_000
        decision = instance.advance(SendTimedOut("1", attempt), now)
        attempt += 1
        assert now < 1_000 + 400_000
    outcome = instance.outcome
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.OUTCOME_UNKNOWN
    assert "may have been applied" in outcome.error.message and KEY in outcome.error.message
    assert decision.status is WorkflowStatus.FAULTED


def test_a_rejected_or_ignored_or_conflicting_command_fails_the_step_not_retryable_with_the_reason() -> None:
    for status in ("rejected", "ignored", "conflict"):
        instance, _ = _started(pay)
        instance.advance(CommandReplied("1", KEY, status, reason="account closed"), 2_000)
        outcome = instance.outcome
        assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.NOT_RETRYABLE, status
        assert "account closed" in outcome.error.message and status in outcome.error.message


def test_saga_already_started_keeps_its_text() -> None:
    instance, _ = _started(pay)
    reason = "SagaAlreadyStarted: transfer t-1 was started by account/alice"
    instance.advance(CommandReplied("1", KEY, "rejected", reason=reason), 2_000)
    outcome = instance.outcome
    assert isinstance(outcome, Faulted)
    assert outcome.error.message == reason and outcome.error.type == "SagaAlreadyStarted"


def test_send_takes_only_the_reply_to_its_own_command() -> None:
    instance, _ = _started(pay)
    other = CommandReplied("1", "saga-command-7", "accepted", (SentEvent("Withdrawn", Withdrawn(amount=9), "x"),))
    assert instance.advance(other, 2_000).rejected is not None
    # Events another command stored under the step's correlation id are not send's either.
    seen = instance.advance(EventsSeen("1", (SentEvent("Withdrawn", Withdrawn(amount=9), "x"),)), 2_100)
    assert seen.records == () and instance.status is WorkflowStatus.RUNNING


def test_a_reply_for_no_pending_step_is_refused() -> None:
    instance, _ = _started(pay)
    assert instance.advance(CommandReplied("7", "pay/i/7", "accepted"), 2_000).rejected is not None


def test_replay_gives_a_journaled_result_without_sending() -> None:
    instance, first = _started(pay)
    second = instance.advance(CommandReplied("1", KEY, "accepted", (SentEvent("Withdrawn", Withdrawn(amount=30), KEY),)), 2_000)
    journal = list(first.records) + list(second.records)
    # The journal holds the ended instance; drop the end to replay the body through the step.
    again, decision = replay(define_workflow("pay", pay), "i", journal[:-1], 5_000)
    assert _sends(decision) == []
    assert again.outcome == Finished("Withdrawn 30")  # read back as Withdrawn, not Deposited


def test_replay_of_a_step_with_only_its_start_sends_again_even_past_the_deadline() -> None:
    _, first = _started(pay)
    instance, decision = replay(define_workflow("pay", pay), "i", first.records, 1_000 + 600_000)
    (send,) = _sends(decision)
    assert (send.attempt, send.command_id, send.deadline_at) == (1, KEY, None)  # runs to its end
    # That attempt failing ends the step: the deadline passed.
    instance.advance(SendTimedOut("1", 1), 1_000 + 640_000)
    outcome = instance.outcome
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.OUTCOME_UNKNOWN


def test_a_filter_takes_the_first_event_it_accepts_from_the_reply_or_the_events_topic() -> None:
    instance, decision = _started(reserve, "reserve")
    (send,) = _sends(decision)
    key = "reserve/i/1"
    assert send.watch_from == 1_000 and send.timeout_ms == 300_000
    # The reply's event is not accepted: the step keeps waiting.
    instance.advance(CommandReplied("1", key, "accepted", (SentEvent("Reserved", Reserved(id="r-1"), key),)), 2_000)
    assert instance.status is WorkflowStatus.RUNNING
    # A saga's command stored Confirmed under the step's correlation id.
    found = (SentEvent("Reserved", Reserved(id="r-1"), "saga/1"), SentEvent("Confirmed", Confirmed(id="r-1"), "saga/2"),
             SentEvent("Confirmed", Confirmed(id="second"), "saga/3"))
    decision = instance.advance(EventsSeen("1", found), 3_000)
    assert instance.outcome == Finished("Confirmed r-1")
    assert StopSend("1") in decision.effects


def test_a_filter_that_raises_fails_the_step_not_retryable() -> None:
    def broken(event: Any) -> bool:
        raise KeyError("no such field")

    async def body(ctx: WorkflowContext, _: None) -> str:
        return str(await ctx.send_with_filter(Retry.command, broken, ACCOUNTS, "r-1", Withdraw(amount=1)))

    instance, _ = _started(body, "reserve")
    instance.advance(EventsSeen("1", (SentEvent("Reserved", Reserved(id="r-1"), "c"),)), 2_000)
    outcome = instance.outcome
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.NOT_RETRYABLE
    assert "the filter raised" in outcome.error.message


def test_a_filter_step_and_a_send_step_store_the_same_kind_so_one_replaces_the_other() -> None:
    instance, first = _started(pay, "w")
    # A running instance of the old code (send) replays under the new code (send_with_filter).
    instance, decision = replay(define_workflow("w", reserve), "i", first.records, 2_000)
    assert instance.status is WorkflowStatus.RUNNING
    (send,) = _sends(decision)
    assert send.watch_from == 1_000  # watches from the stored start of the step


def test_cancelling_a_pending_send_stops_it() -> None:
    instance, _ = _started(pay)
    decision = instance.advance(Cancel(), 2_000)
    assert StopSend("1") in decision.effects
    assert instance.status is WorkflowStatus.CANCELLED


def test_type_reads_the_event_as_the_declared_type() -> None:
    class Amount(BaseModel):
        amount: int

    async def body(ctx: WorkflowContext, _: None) -> str:
        reply = await ctx.send(ACCOUNTS, "alice", Withdraw(amount=30), type=Amount)
        return type(reply).__name__

    instance, _ = _started(body)
    instance.advance(CommandReplied("1", KEY, "accepted", (SentEvent("Withdrawn", Withdrawn(amount=30), KEY),)), 2_000)
    assert instance.outcome == Finished("Amount")


def test_an_instance_id_too_long_for_a_command_id_fails_the_step_at_once() -> None:
    instance = WorkflowInstance(define_workflow("pay", pay), "x" * 255)
    decision = instance.advance(Start(None), 1_000)
    assert _sends(decision) == []
    outcome = instance.outcome
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.NOT_RETRYABLE
