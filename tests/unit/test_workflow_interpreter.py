"""The interpreter's contract: foreign awaits rejected, never raising, JSON records, definitions."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from tidings.core.workflow import (
    ActivityResult,
    Decision,
    Faulted,
    Finished,
    Retry,
    Signal,
    Start,
    TimerFired,
    WorkflowContext,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
    record_from_json,
    record_to_json,
    replay,
)
from tidings.errors import DefinitionError
from tidings.testing.workflows import WorkflowTestRuntime

GOLDEN = Path(__file__).parents[1] / "golden" / "workflow_enrich.journal.json"


def test_awaiting_asyncio_sleep_in_a_body_faults_the_instance_with_a_clear_error() -> None:
    async def body(ctx: WorkflowContext, _: None) -> None:
        await asyncio.sleep(1)

    instance = WorkflowInstance(define_workflow("w", body), "i")
    instance.advance(Start(None), 0)
    outcome = instance.outcome
    assert isinstance(outcome, Faulted) and outcome.error.type == "ForeignAwaitError"
    assert "not a ctx step" in outcome.error.message


def test_awaiting_a_future_inside_a_running_event_loop_is_rejected_too() -> None:
    async def body(ctx: WorkflowContext, _: None) -> None:
        await asyncio.sleep(60)

    async def host() -> WorkflowInstance:
        instance = WorkflowInstance(define_workflow("w", body), "i")
        instance.advance(Start(None), 0)
        return instance

    outcome = asyncio.run(host()).outcome
    assert isinstance(outcome, Faulted) and outcome.error.type == "ForeignAwaitError"


def test_a_plain_async_helper_may_be_awaited_directly_at_small_depth() -> None:
    async def helper(ctx: WorkflowContext) -> int:
        return int((await ctx.random()) >= 0)

    async def body(ctx: WorkflowContext, _: None) -> int:
        return await helper(ctx) + await helper(ctx)

    instance = WorkflowInstance(define_workflow("w", body), "i")
    instance.advance(Start(None), 0)
    assert instance.outcome == Finished(2)


def test_inputs_for_unknown_or_finished_steps_are_ignored() -> None:
    async def body(ctx: WorkflowContext, _: None) -> str:
        await ctx.sleep(timedelta(seconds=1))
        return "done"

    instance = WorkflowInstance(define_workflow("w", body), "i")
    instance.advance(Start(None), 0)
    for message in (ActivityResult("9", 1, 1), TimerFired("7"), ActivityResult("1", 1, "x")):
        assert instance.advance(message, 10) == Decision((), (), WorkflowStatus.RUNNING)
    instance.advance(TimerFired("1"), 1_000)
    assert instance.outcome == Finished("done")
    assert instance.advance(TimerFired("1"), 2_000).records == ()


def test_a_second_start_changes_nothing_and_a_signal_before_start_is_refused() -> None:
    async def body(ctx: WorkflowContext, n: int) -> int:
        return n + int(await ctx.wait_signal("go", type=int))

    instance = WorkflowInstance(define_workflow("w", body), "i")
    assert instance.advance(Signal("go", 1), 0).rejected == "the instance has not been started"
    first = instance.advance(Start(1), 0)
    assert len(first.records) == 2
    assert instance.advance(Start(99), 0).records == ()
    instance.advance(Signal("go", 2), 0)
    assert instance.outcome == Finished(3)


def test_an_input_that_cannot_be_read_as_the_declared_type_is_refused() -> None:
    async def body(ctx: WorkflowContext, n: int) -> int:
        return n

    instance = WorkflowInstance(define_workflow("w", body), "i")
    decision = instance.advance(Start("not a number"), 0)
    assert decision.records == () and decision.rejected is not None and instance.status is None


def test_definitions_are_validated_listing_every_problem() -> None:
    def not_async(ctx: WorkflowContext, _: None) -> None: ...

    with pytest.raises(DefinitionError) as raised:
        define_workflow("bad name/", not_async)  # type: ignore[arg-type]
    assert len(raised.value.reasons) == 2


def _enrich_definition():  # type: ignore[no-untyped-def]
    async def enrich(ctx: WorkflowContext, order: str) -> tuple[int, str]:
        points = await ctx.activity("score", Retry.times(3), lambda a: 42, type=int)
        await ctx.sleep(timedelta(minutes=5))
        both = await ctx.both(ctx.now(), ctx.wait_signal("note", type=str))
        guid = await ctx.new_guid()
        return points, f"{both[0].isoformat()} {both[1]} {guid}"

    return define_workflow("enrich", enrich)


def _enrich_journal() -> list[object]:
    runtime = WorkflowTestRuntime(seed=1)
    handle = runtime.register(_enrich_definition())
    handle.start("order-17", "ABC")
    runtime.run_until_idle()
    handle.signal("order-17", "note", "hello")
    runtime.advance(timedelta(minutes=5))
    return handle.journal("order-17")


def test_journal_records_round_trip_through_json() -> None:
    journal = _enrich_journal()
    text = json.dumps([record_to_json(r) for r in journal])  # type: ignore[arg-type]
    assert [record_from_json(d) for d in json.loads(text)] == journal


def test_a_stored_golden_journal_replays_to_its_stored_outcome() -> None:
    # The file was written once from _enrich_journal() and must never change: it is what
    # instances stored by older code look like. Replaying it whole gives its outcome;
    # replaying all but the end runs the body's tail live and ends the same way.
    records = [record_from_json(d) for d in json.loads(GOLDEN.read_text())]
    whole, _ = replay(_enrich_definition(), "order-17", records, 10**13)
    instance, decision = replay(_enrich_definition(), "order-17", records[:-1], 10**13)
    assert [type(r).__name__ for r in decision.records] == ["Ended"]
    assert decision.records[0].result == records[-1].result  # type: ignore[union-attr]
    assert instance.outcome == whole.outcome
    assert isinstance(instance.outcome, Finished) and instance.outcome.value[0] == 42
    assert "hello" in instance.outcome.value[1]


def test_async_activities_run_concurrently_as_tasks() -> None:
    async def fetch(attempt: object) -> int:
        await asyncio.sleep(0)  # a real await: the task yields to the others
        return 1

    async def body(ctx: WorkflowContext, _: None) -> list[int]:
        return await ctx.all([ctx.activity("fetch", Retry.none, fetch) for _ in range(20)])

    async def scenario() -> object:
        runtime = WorkflowTestRuntime()
        handle = runtime.register(define_workflow("w", body))
        handle.start("i", None)
        await runtime.run_until_idle_async()
        return handle.outcome("i")

    assert asyncio.run(scenario()) == Finished([1] * 20)


def test_the_public_exports_of_the_workflow_core_are_pinned() -> None:
    import tidings.core.workflow as core
    import tidings.testing.workflows as testing

    assert core.__all__ == sorted(core.__all__)
    assert {name for name in core.__all__ if not hasattr(core, name)} == set()
    assert {"WorkflowInstance", "replay", "Decision", "WorkflowContext", "subroutine", "Retry", "RetryPolicy"} <= set(
        core.__all__
    )
    assert {"FakeClock", "WorkflowTestRuntime", "WorkflowHandle", "AttemptTimedOut"} <= set(vars(testing))


def test_a_value_too_large_for_one_journal_record_fails_its_step_and_the_body_not_the_worker() -> None:
    # Journaled as it is, the broker would refuse the record at every attempt: a crash loop.
    from tidings.core.workflow import ErrorKind, RunActivity
    from tidings.errors import WorkflowStepFailed
    from tidings.core.limits import MAX_VALUE_BYTES

    huge = "x" * MAX_VALUE_BYTES

    async def body(ctx: WorkflowContext, big_result: bool) -> str:
        try:
            await ctx.activity("fetch", Retry.times(3), lambda attempt: huge)
        except WorkflowStepFailed as failed:
            assert failed.error.kind is ErrorKind.NOT_RETRYABLE and "larger than" in failed.error.message
            return huge if big_result else "the step failed"
        return "the step succeeded"

    for big_result in (False, True):
        instance = WorkflowInstance(define_workflow("w", body), "i")
        decision = instance.advance(Start(big_result), 0)
        (run,) = [e for e in decision.effects if isinstance(e, RunActivity)]
        instance.advance(ActivityResult(run.path, run.attempt, huge), 1)
        outcome = instance.outcome
        if big_result:
            assert isinstance(outcome, Faulted) and "larger than" in outcome.error.message
        else:
            assert isinstance(outcome, Finished) and outcome.value == "the step failed"
