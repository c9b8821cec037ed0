"""Signals: stored on arrival, consumed oldest first per name, never lost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from tidings.core.workflow import ErrorKind, Finished, StepCompleted, WorkflowContext, define_workflow
from tidings.errors import WorkflowEnded, WorkflowStepFailed
from tidings.testing.workflows import WorkflowTestRuntime


class Approval(BaseModel):
    by: str
    ok: bool


def test_signals_with_one_name_are_consumed_oldest_first() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> list[str]:
        await ctx.sleep(timedelta(minutes=1))
        return [await ctx.wait_signal("n", type=str) for _ in range(3)]

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    for payload in ["first", "second", "third"]:
        handle.signal("i", "n", payload)
    runtime.advance(timedelta(minutes=1))
    assert handle.outcome("i") == Finished(["first", "second", "third"])


def test_signals_with_other_names_wait_for_their_own_step() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> tuple[int, int]:
        b = await ctx.wait_signal("b", type=int)
        a = await ctx.wait_signal("a", type=int)
        return a, b

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.signal("i", "a", 1)
    handle.signal("i", "b", 2)
    assert handle.outcome("i") == Finished((1, 2))


def test_a_payload_is_read_as_the_waits_type() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> str:
        approval = await ctx.wait_signal("approval", type=Approval)
        return f"{approval.by}:{approval.ok}"

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.signal("i", "approval", Approval(by="ada", ok=True))
    assert handle.outcome("i") == Finished("ada:True")


def test_an_unreadable_payload_fails_the_wait_with_bad_payload_and_is_consumed() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> list[object]:
        seen: list[object] = []
        for _ in range(2):
            try:
                seen.append(await ctx.wait_signal("n", type=int))
            except WorkflowStepFailed as failed:
                seen.append(failed.error.kind)
        return seen

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.signal("i", "n", "not a number")
    handle.signal("i", "n", 7)
    outcome = handle.outcome("i")
    assert outcome == Finished([ErrorKind.BAD_PAYLOAD.value, 7])
    runtime.restart()
    assert handle.outcome("i") == outcome


def test_a_signal_arriving_after_a_timed_wait_gave_none_stays_for_the_next_wait() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> tuple[object, object]:
        first = await ctx.wait_signal_for("answer", timedelta(minutes=1), type=str)
        await ctx.sleep(timedelta(minutes=10))
        second = await ctx.wait_signal("answer", type=str)
        return first, second

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.advance(timedelta(minutes=2))
    handle.signal("i", "answer", "late")
    runtime.restart()
    runtime.advance(timedelta(minutes=10))
    assert handle.outcome("i") == Finished((None, "late"))


def test_a_timed_wait_that_gets_its_signal_cancels_its_timer() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> object:
        return await ctx.wait_signal_for("answer", timedelta(minutes=1), type=int)

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    decision = handle.signal("i", "answer", 3)
    assert [type(effect).__name__ for effect in decision.effects] == ["CancelTimer", "PublishOutcome"]
    assert handle.outcome("i") == Finished(3)


def test_the_journal_names_the_signal_each_wait_consumed() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> int:
        return await ctx.wait_signal("n", type=int)

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.signal("i", "n", 1)
    received, completed = handle.journal("i")[2:4]
    assert isinstance(completed, StepCompleted) and completed.signal == received.seq


def test_signalling_an_ended_instance_raises_workflow_ended() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> int:
        return 1

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    with pytest.raises(WorkflowEnded):
        handle.signal("i", "n", 1)


def test_parallel_waits_on_one_name_are_served_in_the_order_they_started() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> list[int]:
        return await ctx.all([ctx.wait_signal("n", type=int) for _ in range(3)])

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    for n in (10, 20, 30):
        handle.signal("i", "n", n)
    assert handle.outcome("i") == Finished([10, 20, 30])
