"""Continue-as-new in the pure core and the in-memory runtime: runs, carried signals, drops."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from tidings import Retry, WorkflowContext
from tidings.core.workflow import (
    ActivityResult,
    ErrorKind,
    Faulted,
    Finished,
    Signal,
    SignalReceived,
    Start,
    Started,
    StepCompleted,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
)
from tidings.core.workflow.continuing import current_run
from tidings.core.workflow.effects import DropRun
from tidings.core.workflow.journal import ContinuedAsNew, UpdateReceived
from tidings.testing import WorkflowTestRuntime


@dataclass(frozen=True)
class Tally:
    total: int
    rounds: int


async def counter(ctx: WorkflowContext, state: Tally) -> int:
    """Adds one 'add' signal per round; every 3 rounds it continues as new with its tally."""
    for _ in range(3):
        if state.rounds >= 10:
            return state.total
        amount = await ctx.wait_signal("add", int)
        doubled = await ctx.activity("double", Retry.times(2), lambda _attempt, a=amount: a * 2)
        state = Tally(state.total + doubled, state.rounds + 1)
    await ctx.continue_as_new(state)
    raise AssertionError("continue_as_new returned")  # pragma: no cover


def counter_definition() -> Any:
    return define_workflow("counter", counter)


def runtime() -> tuple[WorkflowTestRuntime, Any]:
    rt = WorkflowTestRuntime()
    return rt, rt.register(counter_definition())


def test_a_run_continues_as_new_with_an_empty_journal_and_its_new_input() -> None:
    rt, handle = runtime()
    handle.start("c-1", Tally(0, 0))
    for n in range(1, 4):
        handle.signal("c-1", "add", n)
        rt.run_until_idle()
    journal = handle.journal("c-1")
    started = journal[0]
    assert isinstance(started, Started) and started.run == 2
    assert started.input == '{"total":12,"rounds":3}'
    # Seqs go on counting: the new start comes right after the old run's ContinuedAsNew.
    assert started.seq > 1 and all(r.seq >= started.seq for r in journal)
    assert [type(r).__name__ for r in journal] == ["Started", "StepStarted"]  # run 2 waits for a signal
    assert rt.dropped[("counter", "c-1")] == started.seq - 1
    assert rt.instance("counter", "c-1").run == 2  # type: ignore[union-attr]
    assert handle.status("c-1") is WorkflowStatus.RUNNING


def test_the_result_is_the_last_runs_and_earlier_runs_write_no_outcome() -> None:
    rt, handle = runtime()
    handle.start("c-1", Tally(0, 0))
    for n in range(10):
        assert handle.outcome("c-1") is None
        handle.signal("c-1", "add", 1)
        rt.run_until_idle()
    assert handle.value("c-1") == 20
    assert rt.instance("counter", "c-1").run == 4  # type: ignore[union-attr]
    started = handle.journal("c-1")[0]
    assert isinstance(started, Started) and started.run == 4


def test_pending_signals_are_carried_once_in_order() -> None:
    rt, handle = runtime()
    handle.start("c-1", Tally(0, 0))
    # Five signals before anything runs: three for run 1, two carried into run 2.
    for n in range(1, 6):
        handle.signal("c-1", "add", n, signal_id=f"s-{n}")
    rt.run_until_idle()
    journal = handle.journal("c-1")
    carried = [r for r in journal if isinstance(r, SignalReceived)]
    assert [(r.payload, r.signal_id) for r in carried] == [("4", "s-4"), ("5", "s-5")]
    # A repeat of a carried signal stores nothing; of one the old run took, it is new to this run.
    handle.signal("c-1", "add", 4, signal_id="s-4")
    assert sum(isinstance(r, SignalReceived) for r in handle.journal("c-1")) == 2
    rt.run_until_idle()
    state = rt.instance("counter", "c-1")
    assert state is not None and state.run == 2
    handle.signal("c-1", "add", 6)
    rt.run_until_idle()
    # Run 2 took 4, 5 and 6: 12 from run 1, + 30.
    started = handle.journal("c-1")[0]
    assert isinstance(started, Started) and started.run == 3
    assert started.input == '{"total":42,"rounds":6}'


def test_a_restart_replays_only_the_current_run() -> None:
    rt, handle = runtime()
    handle.start("c-1", Tally(0, 0))
    for n in range(7):
        handle.signal("c-1", "add", 1)
        rt.run_until_idle()
    before = handle.journal("c-1")
    rt.restart()
    assert handle.journal("c-1") == before
    for n in range(3):
        handle.signal("c-1", "add", 1)
        rt.run_until_idle()
    assert handle.value("c-1") == 20


def test_a_crash_before_the_tombstones_replays_the_new_run_and_drops_the_old_again() -> None:
    definition = counter_definition()
    instance = WorkflowInstance(definition, "c-1")
    journal = list(instance.advance(Start(Tally(0, 0)), 0).records)
    for n in range(3):
        journal += instance.advance(Signal("add", 1), 1).records
        decision = instance.advance(ActivityResult(instance.pending_paths[0], 1, value=2), 2)
        journal += decision.records
    drops = [e for e in decision.effects if isinstance(e, DropRun)]
    assert len(drops) == 1 and drops[0].first == 1
    assert isinstance(journal[drops[0].last - 1], ContinuedAsNew)
    # The shell stored every record but died before the tombstones: the old run is still there.
    replayed, again = WorkflowInstance.replay(definition, "c-1", journal, 5)
    assert replayed.status is WorkflowStatus.RUNNING and replayed.run == 2
    assert again.records == ()  # nothing journaled twice
    assert [e for e in again.effects if isinstance(e, DropRun)] == drops
    kept, drop = current_run(journal)
    assert drop == drops[0] and isinstance(kept[0], Started) and all(r.seq > drop.last for r in kept)


def test_a_crash_after_continued_but_before_the_start_was_stored_starts_the_run_once() -> None:
    definition = counter_definition()
    instance = WorkflowInstance(definition, "c-1")
    journal = list(instance.advance(Start(Tally(0, 0)), 0).records)
    for n in range(3):
        journal += instance.advance(Signal("add", 1), 1).records
        decision = instance.advance(ActivityResult(instance.pending_paths[0], 1, value=2), 2)
        journal += decision.records
    cut = next(i for i, r in enumerate(journal) if isinstance(r, ContinuedAsNew)) + 1
    replayed, decision = WorkflowInstance.replay(definition, "c-1", journal[:cut], 5)
    assert replayed.status is WorkflowStatus.RUNNING and replayed.run == 2
    # The start is journaled live, as it was the first time (the same seq, input and run).
    assert decision.records[0] == replace(journal[cut], at=5)  # type: ignore[type-var]
    assert [type(r).__name__ for r in decision.records] == ["Started", "StepStarted"]


def test_an_input_that_does_not_fit_the_type_faults_with_a_clear_error() -> None:
    async def bad(ctx: WorkflowContext, n: int) -> int:
        await ctx.continue_as_new("not a number")
        return n

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("bad", bad))
    handle.start("b-1", 1)
    outcome = handle.result("b-1")
    assert isinstance(outcome, Faulted)
    assert outcome.error.kind is ErrorKind.NOT_RETRYABLE
    assert "continue_as_new: the new input does not fit the workflow's input type" in outcome.error.message
    assert not any(isinstance(r, ContinuedAsNew) for r in handle.journal("b-1"))


def test_except_exception_does_not_swallow_the_continue() -> None:
    async def stubborn(ctx: WorkflowContext, n: int) -> int:
        try:
            if n < 3:
                await ctx.continue_as_new(n + 1)
        except Exception:  # noqa: BLE001 - the point of the test
            return -1
        return n

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("stubborn", stubborn))
    handle.start("s-1", 0)
    assert handle.value("s-1") == 3
    assert rt.instance("stubborn", "s-1").run == 4  # type: ignore[union-attr]


def test_pending_updates_are_carried_to_the_next_run() -> None:
    async def looper(ctx: WorkflowContext, n: int) -> int:
        call = await ctx.wait_update("bump")
        await call.reply(n)
        if n < 2:
            await ctx.continue_as_new(n + 1)
        return n

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("looper", looper, updates={"bump": int}))
    handle.start("l-1", 0)
    first = handle.ask("l-1", "update", payload=b"1", update="bump", update_id="u-1", wait_for="completed")
    second = handle.ask("l-1", "update", payload=b"1", update="bump", update_id="u-2", wait_for="completed")
    third = handle.ask("l-1", "update", payload=b"1", update="bump", update_id="u-3", wait_for="completed")
    rt.run_until_idle()
    assert [p.reply.result for p in (first, second, third)] == ["0", "1", "2"]  # type: ignore[union-attr]
    assert handle.value("l-1") == 2


def test_forged_starts_cannot_skip_runs() -> None:
    definition = counter_definition()
    instance = WorkflowInstance(definition, "c-1")
    journal = list(instance.advance(Start(Tally(0, 0)), 0).records)
    journal += instance.advance(Signal("add", 1), 1).records
    # A Started appended by someone who may write the journal, claiming run 9 with a new input.
    forged = Started(journal[-1].seq + 1, '{"total":1000,"rounds":9}', 2, run=9)
    kept, drop = current_run([*journal, forged])
    assert drop is None and len(kept) == len(journal) + 1
    replayed, decision = WorkflowInstance.replay(definition, "c-1", [*journal, forged], 3)
    assert replayed.status is WorkflowStatus.PARKED
    assert not any(isinstance(e, DropRun) for e in decision.effects)
    # A forged ContinuedAsNew before it that names another input or run begins no run either.
    for bad in (ContinuedAsNew(forged.seq - 1, 2, '{"total":1,"rounds":1}', 9),
                ContinuedAsNew(forged.seq - 1, 2, forged.input, 3)):
        assert current_run([*journal[:-1], bad, forged])[1] is None
    # A forged inbox start to a running instance is a repeat: no new run.
    assert instance.advance(Start(Tally(5, 5)), 4).records == ()
    assert instance.run == 1


def test_a_new_run_cut_short_by_a_crash_is_completed_by_the_replay_with_every_signal() -> None:
    # The continue's batch (ContinuedAsNew, Started, the carried signals) was written in part.
    definition = counter_definition()
    instance = WorkflowInstance(definition, "c-1")
    journal = list(instance.advance(Start(Tally(0, 0)), 0).records)
    for n in range(1, 7):
        journal += instance.advance(Signal("add", n, id=f"s-{n}"), 1).records
    for _ in range(3):
        decision = instance.advance(ActivityResult(instance.pending_paths[0], 1, value=2), 2)
        journal += decision.records
    continued = next(r for r in journal if isinstance(r, ContinuedAsNew))
    assert continued.carried == 3  # signals 4, 5 and 6
    cut = journal.index(continued) + 3  # ContinuedAsNew, Started and one carried signal stored
    kept, drop = current_run(journal[:cut])
    assert drop is None and kept == journal[:cut]  # no complete run yet: the old one is replayed
    replayed, again = WorkflowInstance.replay(definition, "c-1", journal[:cut], 5)
    assert replayed.status is WorkflowStatus.RUNNING and replayed.run == 2
    rest = [r for r in again.records if isinstance(r, SignalReceived)]
    assert [(r.payload, r.signal_id) for r in rest] == [("5", "s-5"), ("6", "s-6")]
    assert rest[0].seq == journal[cut - 1].seq + 1
    drops = [e for e in again.effects if isinstance(e, DropRun)]
    assert drops == [DropRun(1, continued.seq)]
    # The journal now holds a complete new run: the next replay starts there.
    whole = [*journal[:cut], *again.records]
    kept, drop = current_run(whole)
    assert drop == drops[0] and kept[0] == journal[cut - 2]


def test_a_run_number_that_does_not_follow_the_one_it_ends_begins_no_run() -> None:
    journal = [Started(1, '{"total":0,"rounds":0}', 0), ContinuedAsNew(2, 1, '{"total":1,"rounds":1}', 5),
               Started(3, '{"total":1,"rounds":1}', 1, run=5)]
    assert current_run(journal) == (journal, None)
    # And one that claims more carried records than follow it is no complete run.
    short = [Started(1, '{"total":0,"rounds":0}', 0), ContinuedAsNew(2, 1, '{"total":1,"rounds":1}', 2, 2),
             Started(3, '{"total":1,"rounds":1}', 1, run=2), SignalReceived(4, "add", "1", 1)]
    assert current_run(short) == (short, None)


def test_a_cancel_requested_in_a_run_wins_over_its_continue() -> None:
    async def stubborn(ctx: WorkflowContext, n: int) -> int:
        try:
            await ctx.sleep(timedelta(days=1))
        except Exception:  # noqa: BLE001 - the cancel fails the sleep; the body tries to go on
            pass
        await ctx.continue_as_new(n + 1)
        return n

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("stubborn-cancel", stubborn))
    handle.start("s-1", 0)
    handle.cancel("s-1")
    assert handle.status("s-1") is WorkflowStatus.CANCELLED
    assert not any(isinstance(r, ContinuedAsNew) for r in handle.journal("s-1"))


def test_the_replay_checker_checks_a_continued_run() -> None:
    from tidings.core.workflow.replay_check import check_journals

    rt, handle = runtime()
    handle.start("c-1", Tally(0, 0))
    for _ in range(4):
        handle.signal("c-1", "add", 1)
        rt.run_until_idle()
    journal = handle.journal("c-1")
    assert isinstance(journal[0], Started) and journal[0].run == 2 and journal[0].seq > 1
    report = check_journals(counter_definition(), [("c-1", journal)], 0)
    assert report.checked == 1 and report.findings == () and report.errors == ()


def test_an_update_taken_and_not_answered_before_the_continue_is_answered_ended() -> None:
    async def forgetful(ctx: WorkflowContext, n: int) -> int:
        if n == 0:
            await ctx.wait_update("bump")  # taken, never answered
            await ctx.continue_as_new(1)
        call = await ctx.wait_update("bump")
        await call.reply(n)
        return n

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("forgetful", forgetful, updates={"bump": int}))
    handle.start("f-1", 0)
    taken = handle.ask("f-1", "update", payload=b"1", update="bump", update_id="u-1", wait_for="completed")
    rt.run_until_idle()
    assert taken.reply is not None and taken.reply.answer == "ended"
    assert handle.update("f-1", "bump", 2) == 1  # the next run takes the next update
