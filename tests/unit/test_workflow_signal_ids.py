"""Signal ids: an instance stores a named signal once, live and after a replay."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tidings.codec import avro
from tidings.codec.workflow import inbox_from_json
from tidings.core.limits import check_inbox
from tidings.core.workflow import (
    Finished,
    Signal,
    SignalReceived,
    Start,
    TimerFired,
    WorkflowContext,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
    replay,
)
from tidings.core.workflow.inbox_rules import Feed, Reply, decide_request
from tidings.core.workflow_records import WorkflowInbox, WorkflowJournalEntry
from tidings.errors import LimitError
from tidings.testing.workflows import WorkflowTestRuntime


async def _two_waits(ctx: WorkflowContext, _: None) -> list[int]:
    # The sleep keeps the waits from taking signals on arrival, so every stored and every
    # dropped signal shows in the result.
    await ctx.sleep(timedelta(minutes=1))
    return [await ctx.wait_signal("n", type=int) for _ in range(2)]


TWO_WAITS = define_workflow("w", _two_waits)


def _started() -> tuple[WorkflowInstance, list[object]]:
    instance = WorkflowInstance(TWO_WAITS, "i")
    journal: list[object] = list(instance.advance(Start(None), 0).records)
    return instance, journal


def test_a_second_signal_with_the_same_id_stores_nothing_and_is_not_refused() -> None:
    instance, journal = _started()
    first = instance.advance(Signal("n", 1, "p/e-1/n#0"), 1)
    again = instance.advance(Signal("n", 99, "p/e-1/n#0"), 2)
    assert [type(r) for r in first.records] == [SignalReceived]
    assert first.records[0] == SignalReceived(first.records[0].seq, "n", "1", 1, "p/e-1/n#0")
    assert again.records == () and again.rejected is None and again.status is WorkflowStatus.RUNNING
    assert instance.next_seq == first.records[0].seq + 1


def test_signals_with_other_ids_or_no_id_are_each_stored() -> None:
    instance, _ = _started()
    stored = [
        instance.advance(message, 1).records
        for message in (Signal("n", 1, "a"), Signal("n", 2, "b"), Signal("n", 3), Signal("n", 4))
    ]
    assert all(len(records) == 1 for records in stored)
    assert [r[0].signal_id for r in stored] == ["a", "b", None, None]


def test_replay_keeps_the_rule_for_ids_in_the_journal() -> None:
    instance, journal = _started()
    journal += instance.advance(Signal("n", 1, "x"), 1).records
    again, decision = replay(TWO_WAITS, "i", journal, 2)
    assert decision.records == ()
    assert again.advance(Signal("n", 1, "x"), 3).records == ()
    # A new id is still stored, and the two stored signals finish the body.
    journal += again.advance(Signal("n", 2, "y"), 4).records
    timer = next(p for p in again.pending_paths)
    done = again.advance(TimerFired(timer), 60_001)
    assert again.outcome == Finished([1, 2])
    assert not any(isinstance(r, SignalReceived) for r in done.records)


def test_a_replay_of_a_journal_without_ids_keeps_no_set() -> None:
    instance, journal = _started()
    journal += instance.advance(Signal("n", 1), 1).records
    again, _ = replay(TWO_WAITS, "i", journal, 2)
    assert again._signal_ids is None  # an idle instance stays small
    assert len(again.advance(Signal("n", 1), 3).records) == 1


def test_a_repeat_to_a_parked_instance_stores_nothing_either() -> None:
    async def changed(ctx: WorkflowContext, _: None) -> int:
        return await ctx.wait_signal("other", type=int)  # no longer sleeps first: parks

    instance, journal = _started()
    journal += instance.advance(Signal("n", 1, "x"), 1).records
    parked, _ = replay(define_workflow("w", changed), "i", journal, 2)
    assert parked.status is WorkflowStatus.PARKED
    assert parked.advance(Signal("n", 1, "x"), 3).records == ()
    assert len(parked.advance(Signal("n", 1, "z"), 4).records) == 1


def test_an_ended_instance_refuses_a_repeat_like_any_signal() -> None:
    async def one(ctx: WorkflowContext, _: None) -> int:
        return await ctx.wait_signal("n", type=int)

    instance = WorkflowInstance(define_workflow("w", one), "i")
    instance.advance(Start(None), 0)
    instance.advance(Signal("n", 5, "x"), 1)
    assert instance.outcome == Finished(5)
    decision = instance.advance(Signal("n", 5, "x"), 2)
    assert decision.records == () and decision.rejected == "the instance has ended"


def test_the_inbox_rules_feed_the_requests_signal_id() -> None:
    instance, _ = _started()
    request = WorkflowInbox("r", "i", "signal", 0, payload=b"1", signal="n", signal_id="p/e/n#0")
    verdict = decide_request(request, instance)
    assert isinstance(verdict, Feed) and verdict.message == Signal("n", 1, "p/e/n#0")
    assert isinstance(decide_request(request, None), Reply)  # never started: not_found


def test_a_json_inbox_envelope_may_name_the_signal_id() -> None:
    inbox = inbox_from_json(b'{"kind": "signal", "instance_id": "i", "signal": "n", "signal_id": "s-1"}')
    assert inbox.signal_id == "s-1"
    assert inbox_from_json(b'{"kind": "signal", "instance_id": "i", "signal": "n"}').signal_id is None


def test_the_signal_id_round_trips_through_avro_v2() -> None:
    inbox = WorkflowInbox("r", "i", "signal", 0, payload=b"1", signal="n", signal_id="p/e/n#0")
    entry = WorkflowJournalEntry("i", SignalReceived(3, "n", "1", 7, "p/e/n#0"))
    assert avro.decode_as(avro.encode(inbox), WorkflowInbox) == inbox
    assert avro.decode_as(avro.encode(entry), WorkflowJournalEntry) == entry


def test_a_signal_id_is_an_id_with_its_limits() -> None:
    with pytest.raises(LimitError, match="signal_id"):
        check_inbox(WorkflowInbox("r", "i", "signal", 0, signal="n", signal_id="x" * 256))
    with pytest.raises(LimitError, match="signal_id"):
        check_inbox(WorkflowInbox("r", "i", "signal", 0, signal="n", signal_id=""))


def test_the_in_memory_runtime_takes_a_signal_id_and_keeps_the_rule_across_a_restart() -> None:
    runtime = WorkflowTestRuntime()
    handle = runtime.register(TWO_WAITS)
    handle.start("i", None)
    assert len(handle.signal("i", "n", 1, signal_id="s-1").records) == 1
    runtime.restart()
    assert handle.signal("i", "n", 1, signal_id="s-1").records == ()
    handle.signal("i", "n", 2, signal_id="s-2")
    runtime.advance(timedelta(minutes=1))
    assert handle.outcome("i") == Finished([1, 2])
    assert [r.signal_id for r in handle.journal("i") if isinstance(r, SignalReceived)] == ["s-1", "s-2"]
