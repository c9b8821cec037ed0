"""Cancellation: a CANCELLED failure for every pending step, cleanup, and the outcome."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from tidings.core.workflow import (
    Attempt,
    CancelRequested,
    Cancelled,
    ErrorKind,
    Faulted,
    Finished,
    Retry,
    StepFailed,
    WorkflowContext,
    define_workflow,
)
from tidings.errors import WorkflowStepFailed
from tidings.testing.workflows import WorkflowTestRuntime


def test_a_body_that_catches_cancellation_and_returns_ends_finished() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.wait_signal("never")
        except WorkflowStepFailed as failed:
            return f"stopped: {failed.error.kind.value}"
        return "signalled"

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.cancel("i")
    assert handle.outcome("i") == Finished("stopped: cancelled")


def test_a_body_that_lets_cancellation_pass_ends_cancelled() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> None:
        await ctx.sleep(timedelta(days=1))

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.cancel("i")
    assert handle.outcome("i") == Cancelled()


def test_cancel_stores_the_request_and_a_cancelled_failure_for_every_pending_step() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> None:
        await ctx.all([ctx.sleep(timedelta(hours=1)), ctx.wait_signal("s"), ctx.activity("a", Retry.none, lambda a: 1)])

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    decision = handle.cancel("i")
    assert isinstance(decision.records[0], CancelRequested)
    failed = [(r.path, r.error.kind) for r in decision.records if isinstance(r, StepFailed)]
    assert failed == [("1.1.1", ErrorKind.CANCELLED), ("1.2.1", ErrorKind.CANCELLED), ("1.3.1", ErrorKind.CANCELLED)]
    assert handle.outcome("i") == Cancelled()


def test_cancel_cancels_a_running_activity() -> None:
    runtime = WorkflowTestRuntime()
    tokens: list[Attempt] = []

    def slow(attempt: Attempt) -> str:
        tokens.append(attempt)
        handle.cancel("i")  # the cancel arrives while the call runs
        return "done"

    async def body(ctx: WorkflowContext, _: None) -> str:
        return await ctx.activity("slow", Retry.none, slow)

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.run_until_idle()
    assert tokens[0].cancellation.cancelled
    assert handle.outcome("i") == Cancelled()  # the late result is ignored


def test_a_second_cancel_while_cleanup_runs_changes_nothing() -> None:
    runtime = WorkflowTestRuntime()
    calls = Counter[str]()

    async def body(ctx: WorkflowContext, _: None) -> None:
        try:
            await ctx.wait_signal("never")
        except WorkflowStepFailed:
            await ctx.activity("cleanup", Retry.none, lambda a: calls.update(["cleanup"]))
            raise

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.cancel("i")
    second = handle.cancel("i")
    assert second.records == () and second.effects == ()
    runtime.run_until_idle()
    assert calls == {"cleanup": 1}
    assert handle.outcome("i") == Cancelled()


def test_a_cancelled_booking_replays_to_the_same_outcome_without_running_cleanup_again() -> None:
    runtime = WorkflowTestRuntime()
    calls = Counter[str]()

    async def body(ctx: WorkflowContext, _: None) -> None:
        try:
            await ctx.activity("charge", Retry.forever(timedelta(hours=1)), lambda a: calls.update(["charge"]))
        except WorkflowStepFailed as failed:
            if failed.error.kind is ErrorKind.CANCELLED:
                await ctx.activity("refund", Retry.none, lambda a: calls.update(["refund"]))
            raise

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.cancel("i")
    runtime.restart()  # the refund had only started: it runs after recovery
    runtime.run_until_idle()
    runtime.restart()
    assert handle.outcome("i") == Cancelled()
    assert calls == {"refund": 1}


def test_a_body_that_raises_its_own_exception_ends_faulted_and_faulted_is_final() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> None:
        await ctx.now()
        raise KeyError("missing")

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    outcome = handle.outcome("i")
    assert isinstance(outcome, Faulted) and outcome.error.kind is None and outcome.error.type == "KeyError"
    assert handle.cancel("i").rejected == "the instance has ended"
    runtime.restart()
    assert handle.outcome("i") == outcome
