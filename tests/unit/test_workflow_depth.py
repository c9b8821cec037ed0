"""Loops and recursion of any depth, without growing the Python stack. (Replay time and
memory per idle instance are measured in bench/workflows.py, never asserted here.)"""

from __future__ import annotations

import sys
from datetime import timedelta

from tidings.core.workflow import (
    ActivityResult,
    Finished,
    JournalRecord,
    Retry,
    Start,
    WorkflowContext,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
    replay,
    subroutine,
)

DEPTH = 10_000


def _journal(definition: WorkflowDefinition, steps: int) -> tuple[list[JournalRecord], WorkflowInstance]:
    """Run a definition whose every step is one activity, feeding results directly."""
    instance = WorkflowInstance(definition, "i")
    records = list(instance.advance(Start(steps), 0).records)
    now = 0
    while instance.status is WorkflowStatus.RUNNING:
        now += 1
        (path,) = instance.pending_paths
        records += instance.advance(ActivityResult(path, 1, 1), now).records
    return records, instance


async def loop_body(ctx: WorkflowContext, steps: int) -> int:
    total = 0
    for _ in range(steps):
        total += await ctx.activity("add", Retry.none, lambda a: 1, type=int)
    return total


@subroutine
async def count_down(ctx: WorkflowContext, n: int) -> int:
    if n == 0:
        return 0
    await ctx.activity("step", Retry.none, lambda a: n, type=int)
    below = await count_down(ctx, n - 1)
    return below + 1  # work after the call returns: not a tail call


async def recursive_body(ctx: WorkflowContext, depth: int) -> int:
    return await count_down(ctx, depth)


def test_a_10000_step_loop_runs_and_replays() -> None:
    definition = define_workflow("loop", loop_body)
    records, instance = _journal(definition, DEPTH)
    assert instance.outcome == Finished(DEPTH)
    replayed, decision = replay(definition, "i", records[:-1], 10**9)
    assert replayed.outcome == Finished(DEPTH)
    assert decision.records[0].outcome == "finished"  # type: ignore[union-attr]


def test_a_10000_deep_recursion_runs_and_replays_without_growing_the_python_stack() -> None:
    assert DEPTH > sys.getrecursionlimit()
    definition = define_workflow("deep", recursive_body)
    records, instance = _journal(definition, DEPTH)
    assert instance.outcome == Finished(DEPTH)
    replayed, _ = replay(definition, "i", records[:-1], 10**9)
    assert replayed.outcome == Finished(DEPTH)
    # Replay half-way leaves the instance waiting 5,000 frames deep.
    half, decision = replay(definition, "i", records[: DEPTH], 10**9)
    assert half.status is WorkflowStatus.RUNNING and len(decision.effects) == 1


def test_a_recursive_subroutine_can_sleep_between_rounds() -> None:
    from tidings.testing.workflows import WorkflowTestRuntime

    @subroutine
    async def poll(ctx: WorkflowContext, rounds: int) -> int:
        if rounds == 0:
            return 0
        await ctx.sleep(timedelta(seconds=1))
        return 1 + await poll(ctx, rounds - 1)

    async def body(ctx: WorkflowContext, rounds: int) -> int:
        return await poll(ctx, rounds)

    runtime = WorkflowTestRuntime()
    handle = runtime.register(define_workflow("poll", body))
    handle.start("i", 2_000)
    runtime.advance(timedelta(seconds=1_000))
    runtime.restart()
    runtime.advance(timedelta(seconds=1_000))
    assert handle.outcome("i") == Finished(2_000)
