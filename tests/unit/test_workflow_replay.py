"""Replay after a crash at every step kind, and parking on a journal that no longer matches."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from uuid import UUID

import pytest

from tidings.core.workflow import (
    Attempt,
    Cancelled,
    Finished,
    Retry,
    StepStarted,
    WorkflowContext,
    WorkflowStatus,
    define_workflow,
    replay,
)
from tidings.testing.workflows import WorkflowTestRuntime


def test_a_completed_activity_is_not_called_again_after_a_crash() -> None:
    runtime = WorkflowTestRuntime()
    calls = Counter[str]()

    async def body(ctx: WorkflowContext, _: None) -> int:
        first = await ctx.activity("one", Retry.none, lambda a: calls.update(["one"]) or 1)
        await ctx.sleep(timedelta(minutes=1))
        second = await ctx.activity("two", Retry.none, lambda a: calls.update(["two"]) or 2)
        return first + second

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.run_until_idle()
    runtime.restart()
    runtime.advance(timedelta(minutes=1))
    runtime.restart()
    assert handle.outcome("i") == Finished(3)
    assert calls == {"one": 1, "two": 1}


def test_a_step_that_had_only_started_runs_again_with_the_same_idempotency_key() -> None:
    runtime = WorkflowTestRuntime()
    keys: list[tuple[str, int]] = []

    def charge(attempt: Attempt) -> str:
        keys.append((attempt.idempotency_key, attempt.number))
        if len(keys) == 1:
            runtime.crash()  # after the call, before its result is stored
        return "paid"

    async def body(ctx: WorkflowContext, _: None) -> str:
        return await ctx.activity("charge", Retry.none, charge)

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.run_until_idle()
    assert runtime.instance("w", "i") is None  # crashed: nothing live
    runtime.recover()
    runtime.run_until_idle()
    assert keys == [("w/i/1", 1), ("w/i/1", 1)]
    assert handle.outcome("i") == Finished("paid")


def test_a_sleeps_due_time_is_not_postponed_by_a_restart() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> datetime:
        await ctx.sleep(timedelta(minutes=5))
        return await ctx.now()

    handle = runtime.register(define_workflow("w", body))
    start = runtime.clock.now()
    handle.start("i", None)
    runtime.advance(timedelta(minutes=3))
    runtime.restart()
    assert runtime.next_due() == start + timedelta(minutes=5)
    runtime.advance(timedelta(minutes=2))
    assert handle.outcome("i") == Finished(start + timedelta(minutes=5))


def test_a_restart_after_the_due_time_fires_the_timer_at_once() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> str:
        await ctx.sleep(timedelta(minutes=5))
        return "woke"

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.crash()
    runtime.clock.advance(timedelta(hours=1))  # the process was down
    runtime.recover()
    runtime.run_until_idle()
    assert handle.outcome("i") == Finished("woke")


def test_a_race_replays_the_same_winner() -> None:
    runtime = WorkflowTestRuntime()
    calls = Counter[str]()

    async def body(ctx: WorkflowContext, _: None) -> tuple[str, str]:
        async def slow() -> str:
            await ctx.sleep(timedelta(minutes=1))
            return "timer"

        async def fast() -> str:
            return await ctx.activity("call", Retry.none, lambda a: calls.update(["call"]) or "activity")

        winner = await ctx.race([slow(), fast()])
        go = await ctx.wait_signal("go", type=str)
        return winner, go

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.run_until_idle()  # the activity wins; the timer is abandoned
    journal = handle.journal("i")
    runtime.restart()
    runtime.advance(timedelta(minutes=5))  # a stray timer must not change the winner
    assert handle.journal("i") == journal
    handle.signal("i", "go", "now")
    assert handle.outcome("i") == Finished(("activity", "now"))
    assert calls == {"call": 1}


def test_no_signal_is_lost_across_restarts() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> list[int]:
        await ctx.activity("busy", Retry.none, lambda a: None)
        return [await ctx.wait_signal("n", type=int) for _ in range(3)]

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    handle.signal("i", "n", 1)  # before the body waits: stored
    runtime.restart()
    handle.signal("i", "n", 2)
    runtime.run_until_idle()
    runtime.restart()
    handle.signal("i", "n", 3)
    runtime.restart()
    assert handle.outcome("i") == Finished([1, 2, 3])


def test_now_new_guid_and_random_replay_their_stored_values() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> tuple[datetime, UUID, float]:
        values = (await ctx.now(), await ctx.new_guid(), await ctx.random())
        await ctx.wait_signal("done")
        return values

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    journal = handle.journal("i")
    runtime.clock.advance(timedelta(days=1))
    runtime.restart()
    runtime.restart()
    handle.signal("i", "done")
    outcome = handle.outcome("i")
    assert isinstance(outcome, Finished)
    at, guid, number = outcome.value
    assert at == runtime.clock.now() - timedelta(days=1)
    assert guid.version == 4 and 0 <= number < 1
    assert handle.journal("i")[: len(journal)] == journal


def test_a_timed_wait_is_re_armed_with_the_time_that_remains() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> object:
        return await ctx.wait_signal_for("answer", timedelta(hours=2))

    handle = runtime.register(define_workflow("w", body))
    start = runtime.clock.now()
    handle.start("i", None)
    runtime.advance(timedelta(hours=1, minutes=30))
    runtime.restart()
    assert runtime.next_due() == start + timedelta(hours=2)
    runtime.advance(timedelta(minutes=30))
    assert handle.outcome("i") == Finished(None)


def _every_step_kind(calls: Counter[str]):  # type: ignore[no-untyped-def]
    async def body(ctx: WorkflowContext, _: None) -> list[object]:
        out: list[object] = []
        out.append(await ctx.activity("a", Retry.times(3), lambda a: calls.update(["a"]) or "A"))
        await ctx.sleep(timedelta(minutes=1))
        out.append((await ctx.now()).isoformat())
        out.append(str(await ctx.new_guid()))
        out.append(await ctx.random())
        out.append(await ctx.version("v", 2))
        out.append(
            await ctx.all(
                [ctx.activity("b", Retry.none, lambda a, n=n: calls.update([f"b{n}"]) or n) for n in range(3)]
            )
        )
        out.append(
            await ctx.race(
                [ctx.wait_signal("s", type=int), ctx.sleep(timedelta(hours=1))],
            )
        )
        out.append(await ctx.wait_signal_for("t", timedelta(minutes=1)))
        out.append(await ctx.both(ctx.now(), ctx.activity("c", Retry.none, lambda a: calls.update(["c"]) or "C")))
        return out

    return body


@pytest.mark.parametrize("crash_at", range(0, 12))
def test_a_crash_at_any_point_changes_neither_the_outcome_nor_the_side_effects(crash_at: int) -> None:
    def run(crash_at: int | None) -> tuple[object, Counter[str]]:
        runtime = WorkflowTestRuntime(seed=7)
        calls = Counter[str]()
        handle = runtime.register(define_workflow("w", _every_step_kind(calls)))
        handle.start("i", None)
        tick = 0
        sent = False
        while handle.outcome("i") is None and tick < 40:
            if tick == crash_at:
                runtime.restart()
            if not sent and handle.journal("i") and any(
                isinstance(r, StepStarted) and r.kind == "race" for r in handle.journal("i")
            ):
                handle.signal("i", "s", 5)
                sent = True
            runtime.advance(timedelta(seconds=30))
            tick += 1
        return handle.outcome("i"), calls

    clean_outcome, clean_calls = run(None)
    outcome, calls = run(crash_at)
    assert isinstance(clean_outcome, Finished)
    assert outcome == clean_outcome
    assert calls == clean_calls == {"a": 1, "b0": 1, "b1": 1, "b2": 1, "c": 1}


def test_replaying_a_whole_journal_adds_no_record_and_reissues_the_pending_steps() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> list[int]:
        return await ctx.all([ctx.activity("x", Retry.none, lambda a, n=n: n) for n in range(3)])

    definition = define_workflow("w", body)
    handle = runtime.register(definition)
    handle.start("i", None)
    instance, decision = replay(definition, "i", handle.journal("i"), runtime.clock.now_ms)
    assert decision.records == ()
    assert [effect.path for effect in decision.effects] == ["1.1.1", "1.2.1", "1.3.1"]  # type: ignore[union-attr]
    assert instance.pending_paths == ("1.1.1", "1.2.1", "1.3.1")


# ------------------------------------------------------------------------------- parking


def _shop(calls: Counter[str], *, extra_step: bool):  # type: ignore[no-untyped-def]
    async def body(ctx: WorkflowContext, _: None) -> str:
        if extra_step:
            await ctx.activity("audit", Retry.none, lambda a: calls.update(["audit"]))
        await ctx.activity("reserve", Retry.none, lambda a: calls.update(["reserve"]))
        await ctx.wait_signal("paid")
        await ctx.activity("ship", Retry.none, lambda a: calls.update(["ship"]))
        return "shipped"

    return body


def test_inserting_a_step_before_a_running_instances_position_parks_it_and_restoring_resumes() -> None:
    runtime = WorkflowTestRuntime()
    calls = Counter[str]()
    handle = runtime.register(define_workflow("shop", _shop(calls, extra_step=False)))
    handle.start("i", None)
    runtime.run_until_idle()
    runtime.deploy(define_workflow("shop", _shop(calls, extra_step=True)))
    runtime.restart()
    assert handle.status("i") is WorkflowStatus.PARKED
    assert "step 1" in (handle.parked_reason("i") or "")
    handle.signal("i", "paid")  # stored while parked, not lost
    runtime.run_until_idle()
    assert calls == {"reserve": 1}  # a parked instance runs nothing

    runtime.deploy(define_workflow("shop", _shop(calls, extra_step=False)))
    runtime.restart()
    runtime.run_until_idle()
    assert handle.outcome("i") == Finished("shipped")
    assert calls == {"reserve": 1, "ship": 1}


def test_removing_the_last_steps_parks_instances_that_had_stored_them() -> None:
    runtime = WorkflowTestRuntime()

    async def long(ctx: WorkflowContext, _: None) -> str:
        await ctx.activity("one", Retry.none, lambda a: 1)
        await ctx.wait_signal("more")
        return "long"

    async def short(ctx: WorkflowContext, _: None) -> str:
        return "short"

    handle = runtime.register(define_workflow("w", long))
    handle.start("i", None)
    runtime.run_until_idle()
    runtime.deploy(define_workflow("w", short))
    runtime.restart()
    assert handle.status("i") is WorkflowStatus.PARKED


def test_a_parked_instance_that_is_cancelled_ends_without_cleanup() -> None:
    runtime = WorkflowTestRuntime()
    calls = Counter[str]()

    async def cleanup_body(ctx: WorkflowContext, _: None) -> None:
        try:
            await ctx.wait_signal("never")
        finally:
            await ctx.activity("cleanup", Retry.none, lambda a: calls.update(["cleanup"]))

    async def other(ctx: WorkflowContext, _: None) -> None:
        await ctx.sleep(timedelta(days=1))

    handle = runtime.register(define_workflow("w", cleanup_body))
    handle.start("i", None)
    runtime.deploy(define_workflow("w", other))
    runtime.restart()
    assert handle.status("i") is WorkflowStatus.PARKED
    handle.cancel("i")
    runtime.run_until_idle()
    assert handle.outcome("i") == Cancelled()
    assert calls == {}
    runtime.restart()  # the ended journal replays to its outcome without running the body
    assert handle.outcome("i") == Cancelled()


def test_replaying_any_prefix_of_a_journal_finishes_the_same_way() -> None:
    """A crash between any two journal writes: replay continues live from where it stopped."""
    from tidings.core.workflow import Start, WorkflowInstance

    async def body(ctx: WorkflowContext, rounds: int) -> list[int]:
        seen = []
        for _ in range(rounds):
            seen.append(await ctx.version("v", 2))
            await ctx.now()
            both = await ctx.both(ctx.random(), ctx.all([ctx.new_guid(), ctx.now()]))
            seen.append(len(both[1]))
        return seen

    definition = define_workflow("prefix", body)
    live = WorkflowInstance(definition, "i")
    records = list(live.advance(Start(3), 0).records)
    assert live.outcome == Finished([2, 2, 2, 2, 2, 2])
    for cut in range(1, len(records)):
        instance, decision = replay(definition, "i", records[:cut], 5)
        assert instance.outcome == live.outcome, f"cut at {cut}"
        assert [r.seq for r in decision.records] == list(range(records[cut - 1].seq + 1, records[-1].seq + 1))
