"""``WorkflowTestRuntime`` answers and raises as the hosted handle does (the inbox rules)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tidings.core.workflow import (
    Cancelled,
    Faulted,
    Finished,
    Signal,
    Started,
    WorkflowContext,
    WorkflowStatus,
    define_workflow,
)
from tidings.core.workflow.inbox_rules import InboxReply
from tidings.errors import (
    ReplyTimeout,
    SchemaError,
    WorkflowCancelled,
    WorkflowEnded,
    WorkflowFaulted,
    WorkflowNotFound,
)
from tidings.testing.workflows import WorkflowHandle, WorkflowTestRuntime


async def approve(ctx: WorkflowContext, mode: str) -> int:
    if mode == "fault":
        raise ValueError("boom")
    if mode == "nap":
        await ctx.sleep(timedelta(minutes=5))
        return 0
    return await ctx.wait_signal("go", type=int)


def registered() -> tuple[WorkflowTestRuntime, WorkflowHandle]:
    runtime = WorkflowTestRuntime()
    return runtime, runtime.register(define_workflow("approve", approve, input_type=str))


def test_a_second_start_is_accepted_and_stores_nothing_even_after_the_end() -> None:
    _, handle = registered()
    handle.start("i", "wait")
    journal = handle.journal("i")
    second = handle.start("i", "fault")
    assert (second.records, second.effects) == ((), ())
    assert handle.journal("i") == journal and handle.status("i") is WorkflowStatus.RUNNING
    handle.signal("i", "go", 3)
    ended = handle.journal("i")
    assert handle.start("i", "wait").records == ()
    assert handle.journal("i") == ended and handle.value("i") == 3


def test_requests_to_an_unknown_id_raise_workflow_not_found_and_status_is_none() -> None:
    _, handle = registered()
    with pytest.raises(WorkflowNotFound, match="no approve instance 'nobody' was started"):
        handle.signal("nobody", "go", 1)
    with pytest.raises(WorkflowNotFound):
        handle.cancel("nobody")
    with pytest.raises(WorkflowNotFound):
        handle.result("nobody")
    with pytest.raises(WorkflowNotFound):
        handle.value("nobody", timedelta(hours=1))
    assert handle.status("nobody") is None
    assert handle.ask("nobody", "query", wait=True).reply == InboxReply("not_found")
    assert handle.journal("nobody") == []


def test_a_signal_to_an_ended_instance_raises_workflow_ended_and_a_cancel_changes_nothing() -> None:
    _, handle = registered()
    handle.start("i", "wait")
    handle.cancel("i")
    ended = handle.journal("i")
    with pytest.raises(WorkflowEnded, match="has ended and takes no signal 'go'"):
        handle.signal("i", "go", 1)
    assert handle.cancel("i").records == ()  # accepted, as the hosted handle: no exception
    assert handle.journal("i") == ended
    assert handle.ask("i", "signal", payload=b"1", signal="go").reply == InboxReply("ended", "CANCELLED", "cancelled")


def test_a_payload_that_cannot_be_stored_raises_schema_error_before_anything_is_sent() -> None:
    _, handle = registered()
    with pytest.raises(SchemaError, match="the input cannot be stored"):
        handle.start("i", 17)  # not a str
    assert handle.status("i") is None
    handle.start("i", "wait")
    with pytest.raises(SchemaError, match="the payload of signal 'go' cannot be stored"):
        handle.signal("i", "go", object())
    assert handle.status("i") is WorkflowStatus.RUNNING


def test_a_refused_start_leaves_nothing_behind_and_a_later_start_works() -> None:
    _, handle = registered()
    refused = handle.ask("i", "start", payload=b"17")
    assert refused.reply is not None and refused.reply.answer == "rejected"
    assert (refused.reply.reason or "").startswith("the workflow refused the input: the input cannot be stored")
    assert handle.journal("i") == [] and handle.status("i") is None
    bad = handle.ask("i", "start", payload=b"{oops")
    assert bad.reply is not None and (bad.reply.reason or "").startswith("the payload is not JSON")
    assert handle.ask("i", "start", payload=b'"wait"').reply == InboxReply("accepted")
    assert isinstance(handle.journal("i")[0], Started)


def test_payloads_reach_the_body_as_the_hosted_worker_reads_them_json() -> None:
    runtime, handle = registered()
    handle.start("i", "wait")
    decision = handle.signal("i", "go", 7)
    assert decision.status is WorkflowStatus.FINISHED
    assert handle.ask("i", "query").reply == InboxReply("status", "FINISHED", "finished", "7")
    runtime.restart()
    assert handle.result("i") == Finished(7)


def test_a_waiting_query_is_answered_when_the_instance_ends() -> None:
    _, handle = registered()
    handle.start("i", "wait")
    pending = handle.ask("i", "query", wait=True)
    assert not pending.answered
    handle.signal("i", "go", 4)
    assert pending.reply == InboxReply("status", "FINISHED", "finished", "4")


def test_result_waits_on_the_fake_clock_until_the_end_and_no_longer() -> None:
    runtime, handle = registered()
    start = runtime.clock.now_ms
    handle.start("i", "nap")
    assert handle.result("i", timedelta(hours=1)) == Finished(0)
    assert runtime.clock.now_ms - start == 5 * 60_000  # it returned when the sleep ended

    handle.start("j", "nap")
    with pytest.raises(ReplyTimeout) as raised:
        handle.result("j", timedelta(minutes=2))
    assert isinstance(raised.value, TimeoutError)
    assert runtime.clock.now_ms - start == 7 * 60_000
    assert handle.value("j", timedelta(minutes=3)) == 0


def test_value_raises_workflow_faulted_and_workflow_cancelled() -> None:
    _, handle = registered()
    handle.start("f", "fault")
    outcome = handle.result("f")
    assert isinstance(outcome, Faulted) and outcome.error.type == "ValueError"
    with pytest.raises(WorkflowFaulted, match="boom"):
        handle.value("f")
    handle.start("c", "wait")
    handle.cancel("c")
    assert handle.result("c") == Cancelled()
    with pytest.raises(WorkflowCancelled):
        handle.value("c")


def test_a_request_between_crash_and_recover_replays_the_instance_as_the_agent_does() -> None:
    runtime, handle = registered()
    handle.start("i", "wait")
    runtime.crash()
    assert runtime.instance("approve", "i") is None
    handle.start("i", "wait")  # replayed, so known: a second start, not a second Started record
    assert [type(r) for r in handle.journal("i")].count(Started) == 1
    handle.signal("i", "go", 9)
    assert handle.outcome("i") == Finished(9)


def test_deliver_takes_inbox_messages_through_the_same_rules() -> None:
    runtime, handle = registered()
    with pytest.raises(WorkflowNotFound):
        runtime.deliver("approve", "i", Signal("go", 1))
    handle.start("i", "wait")
    runtime.deliver("approve", "i", Signal("go", 1))
    with pytest.raises(WorkflowEnded):
        runtime.deliver("approve", "i", Signal("go", 2))
    assert handle.outcome("i") == Finished(1)
