"""all / all_at_most / race / both: deterministic interleaving and timing-free step paths."""

from __future__ import annotations

from datetime import timedelta

from tidings.core.workflow import (
    Attempt,
    CancelActivity,
    ErrorKind,
    Finished,
    Retry,
    RunActivity,
    StepStarted,
    WorkflowContext,
    define_workflow,
    subroutine,
)
from tidings.errors import WorkflowStepFailed
from tidings.testing.workflows import WorkflowTestRuntime


def _paths(records: list[object]) -> list[str]:
    return [r.path for r in records if isinstance(r, StepStarted)]


def test_branch_steps_are_numbered_under_their_parallel_step() -> None:
    runtime = WorkflowTestRuntime()

    async def branch(ctx: WorkflowContext, n: int) -> int:
        await ctx.now()
        inner = await ctx.all([ctx.random(), ctx.random()])
        return n + len(inner)

    async def body(ctx: WorkflowContext, _: None) -> list[int]:
        await ctx.now()
        return await ctx.all([branch(ctx, 1), branch(ctx, 2)])

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    assert handle.outcome("i") == Finished([3, 4])
    assert sorted(_paths(handle.journal("i"))) == sorted(
        ["1", "2", "2.1.1", "2.1.2", "2.1.2.1.1", "2.1.2.2.1", "2.2.1", "2.2.2", "2.2.2.1.1", "2.2.2.2.1"]
    )


def test_paths_do_not_depend_on_the_order_in_which_results_arrive() -> None:
    def run(order: list[str]) -> list[str]:
        runtime = WorkflowTestRuntime()

        async def branch(ctx: WorkflowContext, name: str) -> str:
            await ctx.wait_signal(name)
            await ctx.now()
            return name

        async def body(ctx: WorkflowContext, _: None) -> list[str]:
            return await ctx.all([branch(ctx, "a"), branch(ctx, "b")])

        handle = runtime.register(define_workflow("w", body))
        handle.start("i", None)
        for name in order:
            handle.signal("i", name)
        assert handle.outcome("i") == Finished(["a", "b"])
        return sorted(_paths(handle.journal("i")))

    assert run(["a", "b"]) == run(["b", "a"])


def test_a_failing_branch_abandons_the_others_and_its_failure_is_raised() -> None:
    runtime = WorkflowTestRuntime()

    def boom(attempt: Attempt) -> None:
        raise ConnectionError("down")

    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.all([ctx.activity("slow", Retry.none, lambda a: "slow"), ctx.activity("boom", Retry.none, boom)])
        except WorkflowStepFailed as failed:
            return failed.error.kind.value
        return "all done"

    handle = runtime.register(define_workflow("w", body))
    decision = handle.start("i", None)
    assert [e.path for e in decision.effects if isinstance(e, RunActivity)] == ["1.1.1", "1.2.1"]
    runtime.run_until_idle()  # "slow" runs first and succeeds; "boom" fails: nothing abandoned yet
    assert handle.outcome("i") == Finished(ErrorKind.ATTEMPTS_EXHAUSTED.value)


def test_abandoned_branches_have_their_activities_cancelled() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> str:
        return await ctx.race([ctx.wait_signal("first", type=str), ctx.activity("long", Retry.none, lambda a: "long")])

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    decision = handle.signal("i", "first", "signal")
    assert CancelActivity("1.2.1") in decision.effects
    runtime.run_until_idle()
    assert handle.outcome("i") == Finished("signal")


def test_all_at_most_runs_at_most_limit_branches_at_once_and_keeps_item_order() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> list[int]:
        return await ctx.all_at_most(2, [1, 2, 3, 4, 5], lambda n: ctx.activity("sq", Retry.none, lambda a: n * n))

    handle = runtime.register(define_workflow("w", body))
    decision = handle.start("i", None)
    assert len([e for e in decision.effects if isinstance(e, RunActivity)]) == 2
    runtime.run_until_idle()
    assert handle.outcome("i") == Finished([1, 4, 9, 16, 25])


def test_both_takes_three_steps_and_subroutine_branches() -> None:
    runtime = WorkflowTestRuntime()

    @subroutine
    async def later(ctx: WorkflowContext, text: str) -> str:
        await ctx.sleep(timedelta(seconds=1))
        return text

    async def body(ctx: WorkflowContext, _: None) -> tuple[int, str, str]:
        return await ctx.both(ctx.activity("n", Retry.none, lambda a: 1), later(ctx, "x"), later(ctx, "y"))

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.advance(timedelta(seconds=1))
    assert handle.outcome("i") == Finished((1, "x", "y"))


def test_the_journal_of_a_parallel_body_is_the_same_on_every_run() -> None:
    def run() -> list[object]:
        runtime = WorkflowTestRuntime(seed=3)

        async def body(ctx: WorkflowContext, _: None) -> list[int]:
            return await ctx.all([ctx.activity(f"a{n}", Retry.times(2), lambda a, n=n: n) for n in range(5)])

        handle = runtime.register(define_workflow("w", body))
        handle.start("i", None)
        runtime.run_until_idle()
        return handle.journal("i")

    assert run() == run()
