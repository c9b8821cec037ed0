"""``ctx.version``: markers per position and change id, 1 for instances that had passed."""

from __future__ import annotations

from tidings.core.workflow import (
    Faulted,
    Finished,
    StepStarted,
    VersionMarker,
    WorkflowContext,
    WorkflowDefinition,
    define_workflow,
)
from tidings.testing.workflows import WorkflowTestRuntime


def _loop(rounds: int, *, versioned: bool, change_id: str = "double", latest: int = 2) -> WorkflowDefinition:
    async def body(ctx: WorkflowContext, _: None) -> list[int]:
        seen = []
        for _ in range(rounds):
            if versioned:
                seen.append(await ctx.version(change_id, latest))
            await ctx.wait_signal("tick")
        return seen

    return define_workflow("loop", body)


def test_a_new_instance_stores_latest_and_gets_it() -> None:
    runtime = WorkflowTestRuntime()
    handle = runtime.register(_loop(1, versioned=True))
    handle.start("i", None)
    markers = [r for r in handle.journal("i") if isinstance(r, VersionMarker)]
    assert [(m.position, m.change_id, m.version) for m in markers] == [("1", "double", 2)]
    handle.signal("i", "tick")
    assert handle.outcome("i") == Finished([2])


def test_version_takes_no_step_position() -> None:
    runtime = WorkflowTestRuntime()
    handle = runtime.register(_loop(2, versioned=True))
    handle.start("i", None)
    handle.signal("i", "tick")
    paths = [r.path for r in handle.journal("i") if isinstance(r, StepStarted)]
    assert paths == ["1", "2"]


def test_in_a_loop_a_part_way_instance_gets_1_for_rounds_done_and_latest_for_the_rest() -> None:
    runtime = WorkflowTestRuntime()
    handle = runtime.register(_loop(4, versioned=False))
    handle.start("i", None)
    handle.signal("i", "tick")
    handle.signal("i", "tick")  # waiting in round 3: steps 1-3 are stored
    runtime.deploy(_loop(4, versioned=True))
    runtime.restart()
    handle.signal("i", "tick")
    handle.signal("i", "tick")
    assert handle.outcome("i") == Finished([1, 1, 1, 2])
    runtime.restart()  # the stored marker and the "had passed" rule give the same again
    assert handle.outcome("i") == Finished([1, 1, 1, 2])


def test_a_later_change_keeps_the_name_and_an_instance_that_stored_2_keeps_2() -> None:
    runtime = WorkflowTestRuntime()
    handle = runtime.register(_loop(2, versioned=True, latest=2))
    handle.start("i", None)
    runtime.deploy(_loop(2, versioned=True, latest=3))
    runtime.restart()
    handle.signal("i", "tick")
    handle.signal("i", "tick")
    assert handle.outcome("i") == Finished([2, 3])


def test_after_a_rename_an_instance_that_stored_a_number_gets_1() -> None:
    runtime = WorkflowTestRuntime()
    handle = runtime.register(_loop(2, versioned=True, change_id="old-name"))
    handle.start("i", None)
    runtime.deploy(_loop(2, versioned=True, change_id="new-name"))
    runtime.restart()
    handle.signal("i", "tick")
    handle.signal("i", "tick")
    assert handle.outcome("i") == Finished([1, 2])


def test_as_the_last_step_version_gives_latest_to_every_running_instance() -> None:
    runtime = WorkflowTestRuntime()

    def definition(versioned: bool) -> WorkflowDefinition:
        async def body(ctx: WorkflowContext, _: None) -> int:
            await ctx.wait_signal("go")
            return await ctx.version("tail", 2) if versioned else 0

        return define_workflow("tail", body)

    handle = runtime.register(definition(False))
    handle.start("i", None)
    runtime.deploy(definition(True))
    runtime.restart()
    handle.signal("i", "go")
    assert handle.outcome("i") == Finished(2)


def test_different_names_may_share_a_position_but_one_name_twice_is_an_error() -> None:
    runtime = WorkflowTestRuntime()

    async def shared(ctx: WorkflowContext, _: None) -> tuple[int, int]:
        return await ctx.version("a", 2), await ctx.version("b", 3)

    async def twice(ctx: WorkflowContext, _: None) -> tuple[int, int]:
        return await ctx.version("a", 2), await ctx.version("a", 2)

    ok = runtime.register(define_workflow("shared", shared))
    ok.start("i", None)
    assert ok.outcome("i") == Finished((2, 3))
    bad = runtime.register(define_workflow("twice", twice))
    bad.start("i", None)
    outcome = bad.outcome("i")
    assert isinstance(outcome, Faulted) and outcome.error.type == "DefinitionError"
    assert "used twice at position 1" in outcome.error.message
