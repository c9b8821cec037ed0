"""The workflow inbox rules (``core/workflow/inbox_rules.py``): the table of cases, pure."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.workflow import (
    Cancel,
    JournalRecord,
    Signal,
    Start,
    StepError,
    WorkflowContext,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
)
from tidings.core.workflow.inbox_rules import (
    ACCEPTED,
    NOT_FOUND,
    AwaitEnd,
    Feed,
    InboxReply,
    Known,
    Refuse,
    Reply,
    StoredEnd,
    answer_fed,
    answer_status,
    decide_request,
)


@dataclass(frozen=True)
class Request:
    kind: str
    payload: bytes | None = None
    signal: str | None = None
    wait: bool = False
    signal_id: str | None = None


async def approve(ctx: WorkflowContext, mode: str) -> int:
    if mode == "fault":
        raise ValueError("boom")
    return await ctx.wait_signal("go", type=int)


async def stamped(ctx: WorkflowContext, mode: str) -> int:
    await ctx.now()  # a step `approve` does not take: its journal parks `approve` on replay
    return await ctx.wait_signal("go", type=int)


DEFINITION = define_workflow("approve", approve)


def started(mode: str = "wait") -> WorkflowInstance:
    instance = WorkflowInstance(DEFINITION, "i")
    assert instance.advance(Start(mode), 1_000).rejected is None
    return instance


def finished() -> WorkflowInstance:
    instance = started()
    instance.advance(Signal("go", 5), 2_000)
    assert instance.status is WorkflowStatus.FINISHED
    return instance


def cancelled() -> WorkflowInstance:
    instance = started()
    instance.advance(Cancel(), 2_000)
    assert instance.status is WorkflowStatus.CANCELLED
    return instance


def faulted() -> WorkflowInstance:
    instance = started("fault")
    assert instance.status is WorkflowStatus.FAULTED
    return instance


def parked() -> WorkflowInstance:
    other = WorkflowInstance(define_workflow("approve", stamped), "i")
    records: list[JournalRecord] = list(other.advance(Start("wait"), 1_000).records)
    instance, _ = WorkflowInstance.replay(DEFINITION, "i", records, 2_000)
    assert instance.status is WorkflowStatus.PARKED
    return instance


def stored(instance: WorkflowInstance) -> StoredEnd:
    """What the hosted agent knows of an ended instance once it has left memory."""
    status = answer_status(instance)
    assert status.status is not None
    return StoredEnd(status.status, status.outcome, status.result, status.error, status.reason)


FINISHED = InboxReply("status", "FINISHED", "finished", "5")
RUNNING = InboxReply("status", "RUNNING")


@pytest.mark.parametrize(
    ("request_", "known", "verdict"),
    [
        # start: once per id; a second start stores nothing, whatever its input
        (Request("start", b'"wait"'), None, Feed(Start("wait"))),
        (Request("start"), None, Feed(Start(None))),
        (Request("start", b'"other"'), started(), Reply(ACCEPTED)),
        (Request("start", b"{not json"), started(), Reply(ACCEPTED)),
        (Request("start", b'"wait"'), finished(), Reply(ACCEPTED)),
        (Request("start", b'"wait"'), stored(finished()), Reply(ACCEPTED)),
        (Request("start", b'"wait"'), WorkflowInstance(DEFINITION, "i"), Feed(Start("wait"))),
        # signal
        (Request("signal", b"5", "go"), None, Reply(NOT_FOUND)),
        (Request("signal", b"{not json", "go"), None, Reply(NOT_FOUND)),
        (Request("signal", b"5", "go"), WorkflowInstance(DEFINITION, "i"), Reply(NOT_FOUND)),
        (Request("signal", b"5", "go"), started(), Feed(Signal("go", 5))),
        (Request("signal", None, "go"), started(), Feed(Signal("go", None))),
        (Request("signal", b"5", "go"), parked(), Feed(Signal("go", 5))),
        (Request("signal", b"5", "go"), finished(), Reply(InboxReply("ended", "FINISHED", "finished", "5"))),
        (Request("signal", b"5", "go"), stored(finished()), Reply(InboxReply("ended", "FINISHED", "finished", "5"))),
        (Request("signal", b"{not json", "go"), finished(), Reply(InboxReply("ended", "FINISHED", "finished", "5"))),
        (Request("signal", b"5", "go"), cancelled(), Reply(InboxReply("ended", "CANCELLED", "cancelled"))),
        # cancel
        (Request("cancel"), None, Reply(NOT_FOUND)),
        (Request("cancel"), started(), Feed(Cancel())),
        (Request("cancel"), parked(), Feed(Cancel())),
        (Request("cancel"), finished(), Feed(Cancel())),  # the core refuses it: nothing is stored
        (Request("cancel"), stored(finished()), Reply(ACCEPTED)),
        # query, and query that waits for the end
        (Request("query"), None, Reply(NOT_FOUND)),
        (Request("query", wait=True), None, Reply(NOT_FOUND)),
        (Request("query"), started(), Reply(RUNNING)),
        (Request("query", wait=True), started(), AwaitEnd()),
        (Request("query"), parked(), Reply(InboxReply("status", "PARKED"))),
        (Request("query", wait=True), parked(), AwaitEnd()),
        (Request("query"), finished(), Reply(FINISHED)),
        (Request("query", wait=True), finished(), Reply(FINISHED)),
        (Request("query", wait=True), stored(finished()), Reply(FINISHED)),
        (Request("query"), cancelled(), Reply(InboxReply("status", "CANCELLED", "cancelled"))),
        (
            Request("query"),
            faulted(),
            Reply(InboxReply("status", "FAULTED", "faulted", error=StepError(None, "ValueError: boom", "ValueError"))),
        ),
    ],
)
def test_each_request_gets_the_verdict_of_the_table(request_: Request, known: Known, verdict: object) -> None:
    assert decide_request(request_, known) == verdict


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (Request("start", b"{not json"), "the payload is not JSON: Expecting property name"),
        (Request("start", b"\xff\xfe\x00"), "the payload is not JSON: "),
        (Request("start", b"[" * 100_000), "the payload is not JSON"),
        (Request("signal", b"oops", "go"), "the payload is not JSON: Expecting value"),
        (Request("signal", b"5"), "a signal request needs the signal's name"),
        (Request("signal", b"5", ""), "a signal request needs the signal's name"),
        (Request("launch"), "unknown request kind 'launch'"),
    ],
)
def test_an_unusable_request_is_refused_with_its_reason(request_: Request, reason: str) -> None:
    known = None if request_.kind == "start" else started()
    verdict = decide_request(request_, known)
    assert isinstance(verdict, Refuse) and verdict.reason.startswith(reason)
    assert verdict.reply == InboxReply("rejected", reason=verdict.reason)


def test_a_fed_message_is_accepted_unless_the_instance_refused_it() -> None:
    instance = started()
    assert answer_fed(Request("start", b"1"), instance, None) == Reply(ACCEPTED)
    assert answer_fed(Request("signal", b"5", "go"), instance, None) == Reply(ACCEPTED)
    assert answer_fed(Request("start", b"1"), instance, "the input cannot be stored") == Refuse(
        "the workflow refused the input: the input cannot be stored"
    )
    assert answer_fed(Request("signal", b"5", "go"), instance, "cannot be stored") == Refuse(
        "the workflow refused the signal: cannot be stored"
    )
    ended = finished()
    assert answer_fed(Request("signal", b"5", "go"), ended, "the instance has ended") == Reply(
        InboxReply("ended", "FINISHED", "finished", "5")
    )
    assert answer_fed(Request("cancel"), ended, "the instance has ended") == Reply(ACCEPTED)


def test_a_watched_start_is_answered_only_when_it_stores_nothing() -> None:
    """``execute``'s start (``wait``): the outcome answers a start that started the instance."""
    watched = Request("start", b"1", wait=True)
    assert answer_fed(watched, started(), None) is None
    assert decide_request(watched, started()) == Reply(ACCEPTED)  # it existed: ask about it
    assert decide_request(watched, finished()) == Reply(ACCEPTED)
    assert answer_fed(watched, started(), "the input cannot be stored") == Refuse(
        "the workflow refused the input: the input cannot be stored"
    )


def test_a_start_whose_input_does_not_read_as_the_input_type_is_refused_after_feeding() -> None:
    typed = define_workflow("typed", approve, input_type=int)
    verdict = decide_request(Request("start", b'"many"'), None)
    assert verdict == Feed(Start("many"))
    instance = WorkflowInstance(typed, "i")
    decision = instance.advance(Start("many"), 0)
    answer = answer_fed(Request("start", b'"many"'), instance, decision.rejected)
    assert isinstance(answer, Refuse) and answer.reason.startswith("the workflow refused the input: ")
    assert decision.records == ()


def answered(request: Request, known: Known) -> InboxReply | None:
    """Play a host: feed what the verdict says to feed; None for a query left waiting."""
    verdict = decide_request(request, known)
    if isinstance(verdict, Feed):
        assert isinstance(known, WorkflowInstance)
        decision = known.advance(verdict.message, 9_000)
        assert decision.records == ()  # an ended instance stores nothing more
        verdict = answer_fed(request, known, decision.rejected)
    if isinstance(verdict, AwaitEnd):
        return None
    return verdict.reply


@given(
    kind=st.sampled_from(["start", "signal", "cancel", "query", "other"]),
    payload=st.none() | st.binary(max_size=20) | st.sampled_from([b"5", b'"x"', b"null", b"[1,2]"]),
    signal=st.none() | st.sampled_from(["", "go", "other"]),
    wait=st.booleans(),
    ending=st.sampled_from([finished, cancelled, faulted]),
)
def test_an_ended_instance_answers_alike_live_and_from_its_stored_end(
    kind: str, payload: bytes | None, signal: str | None, wait: bool, ending: object
) -> None:
    request = Request(kind, payload, signal, wait)
    live = ending()  # type: ignore[operator]
    assert answered(request, live) == answered(request, stored(live)) is not None
