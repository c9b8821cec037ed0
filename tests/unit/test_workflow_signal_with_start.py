"""Signal-with-start: the inbox rules, the interpreter (the signal is stored before the body
runs, and replay reads it back the same way), the in-memory runtime and the inbox limits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from tidings.codec import avro
from tidings.core.limits import MAX_PAYLOAD_BYTES, check_inbox
from tidings.core.workflow import (
    Finished,
    Signal,
    SignalReceived,
    Start,
    Started,
    StepCompleted,
    StepStarted,
    TimerFired,
    WorkflowContext,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
    replay,
)
from tidings.core.workflow.inbox_rules import (
    SIGNALLED,
    STARTED,
    Feed,
    Refuse,
    Reply,
    StoredEnd,
    answer_fed,
    decide_request,
)
from tidings.core.workflow_records import WorkflowInbox
from tidings.errors import LimitError, SchemaError, WorkflowEnded
from tidings.testing.workflows import WorkflowTestRuntime


@dataclass(frozen=True)
class Request:
    kind: str = "signal_with_start"
    payload: bytes | None = b"1"
    signal: str | None = "n"
    wait: bool = False
    signal_id: str | None = "s-1"
    input: bytes | None = b'"x"'


async def _collect(ctx: WorkflowContext, want: int) -> list[int]:
    return [await ctx.wait_signal("n", type=int) for _ in range(want)]


async def _at_once(ctx: WorkflowContext, _: None) -> str:
    return "done"  # never looks at a signal: it ends as it starts


async def _later(ctx: WorkflowContext, _: None) -> int:
    await ctx.sleep(timedelta(minutes=1))  # the signal waits, stored, until the body asks
    return await ctx.wait_signal("n", type=int)


COLLECT = define_workflow("collect", _collect)
AT_ONCE = define_workflow("at_once", _at_once)
LATER = define_workflow("later", _later)


def started(want: int = 2) -> WorkflowInstance:
    instance = WorkflowInstance(COLLECT, "i")
    instance.advance(Start(want), 0)
    return instance


# -- the rules ---------------------------------------------------------------------------


def test_never_started_feeds_a_start_carrying_the_signal() -> None:
    verdict = decide_request(Request(input=b"2"), None)
    assert verdict == Feed(Start(2, signal=Signal("n", 1, "s-1")))


def test_running_feeds_the_signal_and_ended_answers_ended_storing_nothing() -> None:
    instance = started()
    assert decide_request(Request(), instance) == Feed(Signal("n", 1, "s-1"))
    ended = decide_request(Request(), StoredEnd("FINISHED", "finished", "[]"))
    assert isinstance(ended, Reply) and ended.reply.answer == "ended" and ended.reply.outcome == "finished"


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (Request(signal=None), "needs the signal's name"),
        (Request(signal=""), "needs the signal's name"),
        (Request(payload=b"{nope"), "payload is not JSON"),
        (Request(input=b"{nope"), "input is not JSON"),
        (Request(input=b"[" * 5000 + b"]" * 5000), "input is not JSON"),
        (Request(input=b"\xff"), "input is not JSON"),
    ],
)
def test_an_unusable_signal_with_start_is_refused(request_: Request, reason: str) -> None:
    verdict = decide_request(request_, None)
    assert isinstance(verdict, Refuse) and reason in verdict.reason


def test_the_answer_says_started_or_signalled() -> None:
    instance = WorkflowInstance(COLLECT, "i")
    message = Start(2, signal=Signal("n", 1, "s-1"))
    decision = instance.advance(message, 0)
    assert answer_fed(Request(), instance, decision.rejected, message) == Reply(STARTED)
    signal = Signal("n", 2, "s-2")
    decision = instance.advance(signal, 1)
    assert answer_fed(Request(), instance, decision.rejected, signal) == Reply(SIGNALLED)
    refused = answer_fed(Request(), instance, "the input cannot be stored", message)
    assert isinstance(refused, Refuse) and "signal-with-start" in refused.reason


# -- the interpreter -------------------------------------------------------------------


def test_the_signal_is_journaled_after_started_before_the_body_runs() -> None:
    instance = WorkflowInstance(COLLECT, "i")
    decision = instance.advance(Start(1, signal=Signal("n", 7, "s-1")), 5)
    kinds = [type(r) for r in decision.records]
    assert kinds[:3] == [Started, SignalReceived, StepStarted]
    assert decision.records[1] == SignalReceived(decision.records[0].seq + 1, "n", "7", 5, "s-1")
    assert instance.outcome == Finished([7])  # the body's first wait took the stored signal


def test_a_body_that_ends_at_once_still_has_the_signal_journaled() -> None:
    instance = WorkflowInstance(AT_ONCE, "i")
    decision = instance.advance(Start(None, signal=Signal("n", 7, "s-1")), 5)
    assert [type(r) for r in decision.records][:2] == [Started, SignalReceived]
    assert instance.outcome == Finished("done")


def test_replay_of_a_signal_with_start_journal_gives_the_same_run() -> None:
    instance = WorkflowInstance(COLLECT, "i")
    journal = list(instance.advance(Start(2, signal=Signal("n", 1, "a")), 0).records)
    again, decision = replay(COLLECT, "i", journal, 1)
    assert decision.records == () and again.status is WorkflowStatus.RUNNING
    assert again.advance(Signal("n", 1, "a"), 2).records == ()  # its id is stored: a repeat stores nothing
    done = again.advance(Signal("n", 2, "b"), 3)
    assert again.outcome == Finished([1, 2])
    assert [type(r) for r in done.records][:2] == [SignalReceived, StepCompleted]


def test_replay_of_a_body_that_reads_the_signal_later_matches_its_journal() -> None:
    instance = WorkflowInstance(LATER, "i")
    journal = list(instance.advance(Start(None, signal=Signal("n", 4, None)), 0).records)
    again, decision = replay(LATER, "i", journal, 1)
    assert decision.records == () and again.status is WorkflowStatus.RUNNING
    (timer,) = again.pending_paths
    again.advance(TimerFired(timer), 60_001)
    assert again.outcome == Finished(4)


def test_an_unstorable_signal_payload_stores_no_start_either() -> None:
    instance = WorkflowInstance(COLLECT, "i")
    decision = instance.advance(Start(1, signal=Signal("n", object())), 0)
    assert decision.rejected is not None and "payload" in decision.rejected
    assert decision.records == () and instance.status is None


# -- the in-memory runtime, as the hosted worker answers -------------------------------------


def test_the_runtime_starts_then_signals_and_refuses_an_ended_instance() -> None:
    handle = WorkflowTestRuntime().register(COLLECT)
    answer, _ = handle.signal_with_start("i", 2, "n", 1, signal_id="a")
    assert answer == "started"
    assert handle.signal_with_start("i", 99, "n", 1, signal_id="a")[0] == "signalled"  # a repeat: nothing stored
    assert handle.signal_with_start("i", 99, "n", 2, signal_id="b")[0] == "signalled"
    assert handle.value("i") == [1, 2]
    with pytest.raises(WorkflowEnded):
        handle.signal_with_start("i", 2, "n", 3, signal_id="c")


def test_the_runtime_refuses_an_input_of_the_wrong_type() -> None:
    async def typed(ctx: WorkflowContext, n: int) -> int:
        return n

    handle = WorkflowTestRuntime().register(define_workflow("typed", typed))
    with pytest.raises(SchemaError):
        handle.signal_with_start("i", "not a number", "n", 1)


# -- the record and its limits ---------------------------------------------------------


def test_the_inbox_limits_hold_for_the_input_and_the_signal_name() -> None:
    ok = WorkflowInbox("r", "o", "signal_with_start", 0, payload=b"1", signal="n", input=b"2")
    assert check_inbox(ok) is ok
    assert avro.decode_as(avro.encode(ok), WorkflowInbox) == ok
    with pytest.raises(LimitError, match="the input is"):
        check_inbox(WorkflowInbox("r", "o", "signal_with_start", 0, signal="n", input=b"1" * (MAX_PAYLOAD_BYTES + 1)))
    with pytest.raises(LimitError, match="needs the signal's name"):
        check_inbox(WorkflowInbox("r", "o", "signal_with_start", 0, input=b"1"))
