"""ctx.signal in the pure interpreter: the step key as signal id, answers, resends, replay."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tidings.core.workflow import (
    Cancel,
    ErrorKind,
    Faulted,
    Finished,
    Retry,
    Start,
    StepCompleted,
    StepFailed,
    StepKind,
    StepStarted,
    WorkflowContext,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
    replay,
)
from tidings.core.workflow.signal_sends import SendSignal, SignalReplied, SignalTimedOut, StopSignal
from tidings.errors import WorkflowEnded, WorkflowNotFound, WorkflowStepFailed

KEY = "notify/i/1"


async def notify(ctx: WorkflowContext, _: None) -> str:
    await ctx.signal("collector", "c-1", "item", 7)
    return "sent"


async def careful(ctx: WorkflowContext, _: None) -> str:
    try:
        await ctx.signal("collector", "c-1", "item", 7)
    except WorkflowNotFound as missing:
        return f"not found: {missing}"
    except WorkflowEnded as ended:
        return f"ended: {ended}"
    except WorkflowStepFailed as failed:
        return f"failed: {failed.error.kind.value if failed.error.kind else None}"
    return "sent"


def _started(body: Any, name: str = "notify") -> tuple[WorkflowInstance, Any]:
    instance = WorkflowInstance(define_workflow(name, body), "i")
    return instance, instance.advance(Start(None), 1_000)


def _signals(decision: Any) -> list[SendSignal]:
    return [e for e in decision.effects if isinstance(e, SendSignal)]


def test_the_step_stores_its_start_and_sends_with_the_step_key_as_signal_id() -> None:
    _, decision = _started(notify)
    (started,) = [r for r in decision.records if isinstance(r, StepStarted)]
    assert (started.kind, started.name, started.path) == (StepKind.SIGNAL_SEND, "collector", "1")
    (send,) = _signals(decision)
    assert (send.workflow, send.instance_id, send.name, send.payload) == ("collector", "c-1", "item", "7")
    assert (send.signal_id, send.attempt, send.not_before, send.deadline_at) == (KEY, 1, 1_000, 301_000)


def test_accepted_completes_the_step_with_none() -> None:
    instance, _ = _started(notify)
    decision = instance.advance(SignalReplied("1", KEY, "accepted"), 2_000)
    assert instance.outcome == Finished("sent")
    assert [r for r in decision.records if isinstance(r, StepCompleted)][0].result == "null"
    assert StopSignal("1") in decision.effects


@pytest.mark.parametrize(("answer", "told"), [
    ("not_found", "not found: no collector 'c-1' was started"),
    ("ended", "ended: collector 'c-1' has ended and takes no more signals"),
    ("rejected", "failed: not_retryable"),
])
def test_each_answer_raises_its_exception_at_the_step_and_a_replay_raises_the_same(answer: str, told: str) -> None:
    instance, first = _started(careful, "notify")
    second = instance.advance(SignalReplied("1", KEY, answer, "bad payload"), 2_000)
    assert instance.outcome == Finished(told)
    journal = list(first.records) + list(second.records)
    again, decision = replay(define_workflow("notify", careful), "i", journal[:-1], 5_000)
    assert _signals(decision) == [] and again.outcome == Finished(told)


def test_an_uncaught_not_found_faults_the_instance_naming_it() -> None:
    instance, _ = _started(notify)
    instance.advance(SignalReplied("1", KEY, "not_found"), 2_000)
    outcome = instance.outcome
    assert isinstance(outcome, Faulted) and outcome.error.type == "WorkflowNotFound"


def test_a_timeout_sends_again_with_the_same_id_and_a_late_answer_still_counts() -> None:
    instance, _ = _started(notify)
    (again,) = _signals(instance.advance(SignalTimedOut("1", 1), 31_000))
    assert (again.attempt, again.signal_id) == (2, KEY)
    assert instance.advance(SignalTimedOut("1", 1), 31_500).records == ()  # stale
    instance.advance(SignalReplied("1", KEY, "accepted"), 33_000)
    assert instance.outcome == Finished("sent")


def test_a_policy_that_runs_out_fails_outcome_unknown() -> None:
    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.signal("collector", "c-1", "item", 7, policy=Retry.times(1))
        except WorkflowStepFailed as failed:
            return f"{failed.error.kind.value}: {failed.error.message}"  # type: ignore[union-attr]
        return "sent"

    instance, _ = _started(body)
    instance.advance(SignalTimedOut("1", 1), 31_000)
    outcome = instance.outcome
    assert isinstance(outcome, Finished) and outcome.value.startswith("outcome_unknown: no answer from collector")
    assert "may have been stored" in outcome.value


def test_answers_not_for_the_step_are_refused_and_change_nothing() -> None:
    instance, _ = _started(notify)
    for wrong in (SignalReplied("1", "notify/other/1", "accepted"), SignalReplied("9", "notify/i/9", "accepted"),
                  SignalReplied("1", KEY, "maybe")):
        decision = instance.advance(wrong, 2_000)
        assert decision.rejected is not None and decision.records == ()
    assert instance.status is WorkflowStatus.RUNNING


def test_a_replay_of_a_started_step_sends_again_with_the_same_id_and_a_stored_end_sends_nothing() -> None:
    instance, first = _started(notify)
    again, decision = replay(define_workflow("notify", notify), "i", list(first.records), 9_000)
    (resend,) = _signals(decision)
    assert (resend.signal_id, resend.attempt) == (KEY, 1)
    done = again.advance(SignalReplied("1", KEY, "accepted"), 9_500)
    journal = list(first.records) + list(done.records)
    replayed, quiet = replay(define_workflow("notify", notify), "i", journal[:-1], 10_000)
    assert _signals(quiet) == [] and replayed.outcome == Finished("sent")


def test_a_payload_that_cannot_be_stored_fails_the_step_without_sending() -> None:
    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.signal("collector", "c-1", "item", object())
        except WorkflowStepFailed as failed:
            return failed.error.message
        return "sent"

    instance, decision = _started(body)
    assert _signals(decision) == []
    assert [r for r in decision.records if isinstance(r, StepFailed)]
    assert isinstance(instance.outcome, Finished) and instance.outcome.value.startswith("the signal cannot be sent")


@pytest.mark.parametrize("args", [(object(), "c-1", "item"), ("collector", "", "item"), ("collector", "c-1", ""),
                                  ("collector", 7, "item")])
def test_hostile_arguments_are_a_type_error_in_the_body(args: tuple[Any, ...]) -> None:
    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.signal(*args)
        except TypeError as exc:
            return f"type error: {exc}"
        return "sent"

    instance, decision = _started(body)
    assert _signals(decision) == [] and str(instance.outcome.value).startswith("type error")  # type: ignore[union-attr]


def test_a_target_id_too_long_fails_the_step_not_retryable() -> None:
    async def body(ctx: WorkflowContext, _: None) -> None:
        await ctx.signal("collector", "x" * 300, "item")

    instance, decision = _started(body)
    outcome = instance.outcome
    assert _signals(decision) == [] and isinstance(outcome, Faulted)
    assert outcome.error.kind is ErrorKind.NOT_RETRYABLE


def test_cancelling_stops_the_pending_signal() -> None:
    instance, _ = _started(notify)
    decision = instance.advance(Cancel(), 2_000)
    assert StopSignal("1") in decision.effects
    assert instance.status is WorkflowStatus.CANCELLED


def test_a_workflow_handle_names_its_target() -> None:
    target = define_workflow("collector", notify)

    async def body(ctx: WorkflowContext, _: None) -> None:
        await ctx.signal(target, "c-1", "item", {"a": [1]}, policy=Retry.command.replace(
            attempt_timeout=timedelta(seconds=5)))

    _, decision = _started(body)
    (send,) = _signals(decision)
    assert (send.workflow, send.payload, send.timeout_ms) == ("collector", '{"a":[1]}', 5_000)


# -- in the test runtime, as hosted: the target stores the signal once ----------------------------


def _runtime() -> Any:
    from tidings.testing.workflows import WorkflowTestRuntime

    async def collector(ctx: WorkflowContext, count: int) -> list[int]:
        return [await ctx.wait_signal("item", type=int) for _ in range(count)]

    async def parent(ctx: WorkflowContext, target: str) -> str:
        try:
            await ctx.signal("collector", target, "item", 7)
        except WorkflowNotFound:
            return "no target"
        return "sent"

    runtime = WorkflowTestRuntime()
    return runtime, runtime.register(define_workflow("collector", collector)), \
        runtime.register(define_workflow("parent", parent))


def test_the_runtime_delivers_the_signal_and_a_recovery_stores_it_once() -> None:
    runtime, collector, parent = _runtime()
    collector.start("c-1", 2)
    parent.start("p-1", "c-1")
    assert parent.outcome("p-1") == Finished("sent")
    # Forget the parent's end, as if its worker died after the signal went out: the replay
    # sends the same signal id again and the collector stores nothing new.
    key = ("parent", "p-1")
    runtime.journals[key] = [r for r in runtime.journals[key] if not isinstance(r, (StepCompleted,))][:2]
    runtime.crash()
    runtime.recover()
    assert parent.outcome("p-1") == Finished("sent")
    collector.signal("c-1", "item", 8)
    assert collector.outcome("c-1") == Finished([7, 8])


def test_the_runtime_raises_not_found_for_a_target_never_started() -> None:
    _, _, parent = _runtime()
    parent.start("p-2", "nobody")
    assert parent.outcome("p-2") == Finished("no target")
