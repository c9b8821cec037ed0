"""Child workflows in the pure interpreter: start, acknowledgement, await, outcomes, replay, cancellation.

A tiny router stands in for the shell: it hands each ``StartChild`` to the child instance
as a ``Start`` naming the parent, the child's ``AckParent``/``TellParent`` back to the
parent as ``ChildStarted``/``ChildEnded``, and counts ``CancelChild``.
"""

from __future__ import annotations

from dataclasses import replace
import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from tidings.core.workflow import (
    Cancel,
    Cancelled,
    ErrorKind,
    Faulted,
    Finished,
    Signal,
    Start,
    Started,
    StepCompleted,
    StepFailed,
    StepStarted,
    TimerFired,
    WorkflowContext,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
)
from tidings.core.workflow.child_records import (
    AckParent,
    CancelChild,
    ChildEnded,
    ChildHandle,
    ChildOutcome,
    ChildStarted,
    ParentRef,
    StartChild,
    TellParent,
)
from tidings.core.workflow.inbox_rules import Feed, Refuse, Reply, StoredEnd, decide_request
from tidings.core.workflow_records import WorkflowInbox
from tidings.errors import WorkflowStepFailed


class Points(BaseModel):
    points: int


async def enrich(ctx: WorkflowContext, order: str) -> Points:
    await ctx.wait_signal("go")
    if order == "boom":
        raise RuntimeError("no points for boom")
    return Points(points=len(order))


ENRICH = define_workflow("enrich", enrich)


async def parent_body(ctx: WorkflowContext, order: str) -> list[Any]:
    detached = await ctx.start_child(ENRICH, order)
    again = await ctx.child(ENRICH, order + "-again")
    return [detached.id, again.points]


PARENT = define_workflow("parent", parent_body)


class Router:
    """Carries effects between one parent and its children, as the shell does through Kafka."""

    def __init__(self, parent: WorkflowInstance) -> None:
        self.parent = parent
        self.children: dict[str, WorkflowInstance] = {}
        self.cancels: list[CancelChild] = []
        self.starts: list[StartChild] = []
        self.journal: list[Any] = []

    def to_parent(self, message: Any) -> Any:
        decision = self.parent.advance(message, 1_000)
        self.journal.extend(decision.records)
        self.route(decision.effects)
        return decision

    def route(self, effects: Any, *, deliver: bool = True) -> None:
        for effect in effects:
            if isinstance(effect, StartChild):
                self.starts.append(effect)
                if deliver:
                    child = self.children.setdefault(effect.child_id, WorkflowInstance(ENRICH, effect.child_id))
                    start = Start(json.loads(effect.input), effect.parent)
                    self.route(child.advance(start, 1_000).effects)
            elif isinstance(effect, CancelChild):
                self.cancels.append(effect)
            elif isinstance(effect, AckParent):
                self.to_parent(ChildStarted(effect.parent.path, effect.workflow, effect.parent.token))
            elif isinstance(effect, TellParent):
                self.to_parent(ChildEnded(effect.parent.path, effect.workflow, effect.outcome, effect.result, effect.error,
                                           effect.parent.token))

    def go(self, child_id: str) -> None:
        self.route(self.children[child_id].advance(Signal("go"), 2_000).effects)


def token(router: Router, path: str) -> str:
    """The token the parent drew for the child it started at ``path`` (its ``StepStarted``)."""
    [stored] = [r.token for r in router.journal if isinstance(r, StepStarted) and r.path == path]
    assert stored is not None
    return stored


def started(body: Any, name: str = "parent", input: Any = "ab", *, deliver: bool = True) -> Router:
    router = Router(WorkflowInstance(define_workflow(name, body) if callable(body) else body, "p"))
    decision = router.parent.advance(Start(input), 1_000)
    router.journal.extend(decision.records)
    router.route(decision.effects, deliver=deliver)
    return router


def test_a_child_runs_with_the_parents_id_and_step_path_and_its_result_comes_back() -> None:
    router = started(PARENT)
    assert [s.child_id for s in router.starts] == ["p:1", "p:2"]
    assert router.starts[0].parent == ParentRef("parent", "p", "1", token(router, "1"))
    assert len(token(router, "1")) == 32 and token(router, "1") != token(router, "2")  # 128 random bits each
    assert router.children["p:1"].status is WorkflowStatus.RUNNING  # the detached child runs on
    router.go("p:2")
    assert router.parent.outcome == Finished(["p:1", len("ab-again")])
    kinds = [(r.path, r.kind, r.name) for r in router.journal if isinstance(r, StepStarted)]
    assert kinds == [("1", "child_start", "enrich"), ("2", "child_start", "enrich"), ("3", "child_await", "p:2")]


def test_the_handle_is_given_only_once_the_child_has_stored_its_start() -> None:
    router = started(PARENT, deliver=False)
    assert router.parent.pending_paths == ("1",)
    assert not any(isinstance(r, StepCompleted) for r in router.journal)
    router.to_parent(ChildStarted("1", "enrich", token(router, "1")))
    completed = [r for r in router.journal if isinstance(r, StepCompleted)]
    assert (completed[0].path, json.loads(completed[0].result)) == ("1", {"workflow": "enrich", "id": "p:1"})
    assert router.starts[-1].child_id == "p:2"  # the body went on to its next step


def test_the_child_stores_its_parent_and_acknowledges_then_reports_its_end() -> None:
    child = WorkflowInstance(ENRICH, "p:3")
    decision = child.advance(Start("abc", ParentRef("parent", "p", "3")), 5)
    assert decision.records[0] == Started(1, '"abc"', 5, "parent", "p", "3")
    assert [e for e in decision.effects if isinstance(e, AckParent)] == [AckParent(ParentRef("parent", "p", "3"), "enrich")]
    ended = child.advance(Signal("go"), 6)
    assert [e for e in ended.effects if isinstance(e, TellParent)] == [
        TellParent(ParentRef("parent", "p", "3"), "enrich", "finished", '{"points":3}')
    ]
    # An instance nobody started as a child tells nobody.
    plain = WorkflowInstance(ENRICH, "x")
    effects = plain.advance(Start("abc"), 5).effects + plain.advance(Signal("go"), 6).effects
    assert not [e for e in effects if isinstance(e, (AckParent, TellParent))]


def test_a_replayed_child_acknowledges_again_while_running_and_reports_again_once_ended() -> None:
    child = WorkflowInstance(ENRICH, "p:3")
    journal = list(child.advance(Start("abc", ParentRef("parent", "p", "3")), 5).records)
    _, replayed = WorkflowInstance.replay(ENRICH, "p:3", journal, 7)
    assert [e for e in replayed.effects if isinstance(e, AckParent)] == [AckParent(ParentRef("parent", "p", "3"), "enrich")]
    journal += child.advance(Signal("go"), 6).records
    _, replayed = WorkflowInstance.replay(ENRICH, "p:3", journal, 7)
    assert [e.outcome for e in replayed.effects if isinstance(e, TellParent)] == ["finished"]


def test_an_outcome_that_arrives_before_the_await_is_stored_and_found_later() -> None:
    async def body(ctx: WorkflowContext, order: str) -> int:
        handle = await ctx.start_child(ENRICH, order)
        await ctx.sleep(timedelta(minutes=5))
        first = await ctx.await_child(handle)
        second = await ctx.await_child(handle)  # the same outcome again
        return first.points + second.points

    router = started(body)
    router.go("p:1")
    assert [type(r) for r in router.journal][-1] is ChildOutcome
    router.to_parent(TimerFired("2"))
    assert router.parent.outcome == Finished(4)


def test_a_faulted_child_fails_the_await_child_faulted_with_its_error() -> None:
    async def body(ctx: WorkflowContext, _: str) -> str:
        try:
            await ctx.child(ENRICH, "boom")
        except WorkflowStepFailed as failed:
            return f"{failed.error.kind.value}|{failed.error.message}"  # type: ignore[union-attr]
        return "no"

    router = started(body)
    router.go("p:1")
    outcome = router.parent.outcome
    assert isinstance(outcome, Finished)
    kind, message = outcome.value.split("|")
    assert kind == ErrorKind.CHILD_FAULTED.value
    assert "enrich 'p:1' faulted" in message and "no points for boom" in message


def test_a_cancelled_child_fails_the_await_cancelled_and_the_parent_faults() -> None:
    router = started(PARENT)
    router.route(router.children["p:2"].advance(Cancel(), 2_000).effects)
    outcome = router.parent.outcome
    # The parent was not cancelled itself: its body let a step failure pass, so it faults.
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.CANCELLED
    assert "'p:2' was cancelled" in outcome.error.message


def test_a_result_the_await_type_cannot_read_fails_it_not_retryable() -> None:
    async def body(ctx: WorkflowContext, _: str) -> str:
        handle = await ctx.start_child(ENRICH, "abc")
        try:
            await ctx.await_child(handle, type=list[int])
        except WorkflowStepFailed as failed:
            return failed.error.kind.value  # type: ignore[union-attr]
        return "read"

    router = started(body)
    router.go("p:1")
    assert router.parent.outcome == Finished(ErrorKind.NOT_RETRYABLE.value)
    failed = [r for r in router.journal if isinstance(r, StepFailed)]
    assert failed[0].signal == next(r.seq for r in router.journal if isinstance(r, ChildOutcome))


def test_an_input_the_child_cannot_take_fails_the_start_not_retryable_and_sends_nothing() -> None:
    async def numbers(ctx: WorkflowContext, n: int) -> int:
        return n

    async def body(ctx: WorkflowContext, _: str) -> str:
        try:
            await ctx.start_child(define_workflow("numbers", numbers), "not a number")
        except WorkflowStepFailed as failed:
            return failed.error.kind.value  # type: ignore[union-attr]
        return "started"

    router = started(body)
    assert router.parent.outcome == Finished(ErrorKind.NOT_RETRYABLE.value)
    assert router.starts == []


def test_a_child_id_longer_than_the_id_limit_fails_the_start() -> None:
    router = Router(WorkflowInstance(PARENT, "p" * 255))
    router.to_parent(Start("ab"))
    outcome = router.parent.outcome
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.NOT_RETRYABLE
    assert router.starts == []


def test_replay_gives_the_same_results_and_starts_nothing_again() -> None:
    router = started(PARENT)
    router.go("p:2")
    instance, decision = WorkflowInstance.replay(PARENT, "p", router.journal, 9_000)
    assert instance.outcome == router.parent.outcome
    assert decision.records == () and not [e for e in decision.effects if isinstance(e, StartChild)]


def test_a_parent_restarted_mid_start_sends_the_same_start_again() -> None:
    router = started(PARENT, deliver=False)  # the start was sent; no acknowledgement stored
    instance, decision = WorkflowInstance.replay(PARENT, "p", router.journal, 9_000)
    again = [e for e in decision.effects if isinstance(e, StartChild)]
    assert again == router.starts  # same child id, same input, same parent: the same child
    # The child (started by the first send) acknowledges the repeated start; a second
    # acknowledgement changes nothing.
    assert again[0].parent.token == token(router, "1")  # the replay keeps the stored token
    assert instance.advance(ChildStarted("1", "enrich", token(router, "1")), 9_001).records
    assert instance.advance(ChildStarted("1", "enrich", token(router, "1")), 9_002).records == ()


def test_a_parent_restarted_while_awaiting_asks_the_child_again_for_a_lost_outcome() -> None:
    router = started(PARENT)  # step 1 started a detached child; step 2's child runs, awaited
    assert "p:2" in router.children and router.children["p:2"].outcome is None
    instance, decision = WorkflowInstance.replay(PARENT, "p", router.journal, 9_000)
    again = [e for e in decision.effects if isinstance(e, StartChild)]
    # Only the awaited child is asked, with the start it got first (its outcome may have been
    # lost on its way); the detached child is not awaited and is left alone.
    assert again == [s for s in router.starts if s.child_id == "p:2"]
    # The child answers a repeated start of its parent with its outcome once it has one.
    router.parent = instance
    router.go("p:2")
    assert instance.outcome is not None and instance.outcome.value == ["p:1", len("ab-again")]


def test_a_repeated_outcome_report_stores_nothing() -> None:
    router = started(PARENT)
    router.go("p:2")
    report = ChildEnded("2", "enrich", "finished", '{"points":8}', token=token(router, "2"))
    decision = router.parent.advance(report, 5_000)
    assert decision.records == () and decision.rejected is None


def test_an_outcome_for_a_start_whose_acknowledgement_was_lost_completes_the_start_too() -> None:
    router = started(PARENT, deliver=False)
    router.to_parent(ChildEnded("1", "enrich", "finished", '{"points":2}', token=token(router, "1")))
    paths = [(type(r).__name__, r.path) for r in router.journal if isinstance(r, (StepCompleted, ChildOutcome))]
    assert paths[:2] == [("StepCompleted", "1"), ("ChildOutcome", "1")]
    assert router.starts[-1].child_id == "p:2"  # the body went on to its next step


@pytest.mark.parametrize(
    "report",
    [
        ChildStarted("9", "enrich"),  # no such step
        ChildStarted("1", "other"),  # another workflow at that step
        ChildEnded("9", "enrich", "finished", "1"),
        ChildEnded("1", "other", "finished", "1"),
        ChildEnded("1", "enrich", "exploded"),
        ChildEnded("1", "enrich", "finished", None),
    ],
)
def test_a_report_about_no_child_of_the_instance_is_rejected_and_stores_nothing(report: Any) -> None:
    router = started(PARENT, deliver=False)
    decision = router.parent.advance(report, 5_000)
    assert decision.rejected is not None and decision.records == ()


@pytest.mark.parametrize("forged", [None, "", "0" * 32, "other"])
def test_a_report_for_a_real_child_without_its_token_is_rejected_and_changes_nothing(forged: Any) -> None:
    # Anyone who may write the parent's inbox can name a real child and its step; only the
    # child's worker knows the token the parent drew for it.
    router = started(PARENT, deliver=False)
    for report in (ChildStarted("1", "enrich", forged), ChildEnded("1", "enrich", "finished", '{"points":99}', token=forged),
                   ChildEnded("1", "enrich", "cancelled", token=forged)):
        decision = router.parent.advance(report, 5_000)
        assert decision.records == () and decision.effects == ()
        assert decision.rejected is not None and "does not carry the token" in decision.rejected
    assert router.parent.pending_paths == ("1",)
    router.to_parent(ChildEnded("1", "enrich", "finished", '{"points":2}', token=token(router, "1")))
    assert router.parent.pending_paths != ("1",)  # the real report is taken


def test_a_child_keeps_its_parents_token_and_every_report_carries_it() -> None:
    child = WorkflowInstance(ENRICH, "p:3")
    parent = ParentRef("parent", "p", "3", "ab" * 16)
    journal = list(child.advance(Start("abc", parent), 5).records)
    assert journal[0].parent_token == "ab" * 16
    replayed, decision = WorkflowInstance.replay(ENRICH, "p:3", journal, 6)
    assert [e.parent for e in decision.effects if isinstance(e, AckParent)] == [parent]
    ended = replayed.advance(Signal("go"), 7)
    assert [e.parent.token for e in ended.effects if isinstance(e, TellParent)] == ["ab" * 16]
    _, again = WorkflowInstance.replay(ENRICH, "p:3", journal + list(ended.records), 8)  # ended: reported again
    assert [e.parent.token for e in again.effects if isinstance(e, TellParent)] == ["ab" * 16]


def test_a_child_started_before_tokens_existed_is_still_taken_without_one() -> None:
    # A journal written before workflowjournal.v4: the child_start step has no token, so
    # its child (which has none either) is believed as before.
    router = started(PARENT, deliver=False)
    old = [replace(r, token=None) if isinstance(r, StepStarted) else r for r in router.journal]
    instance, decision = WorkflowInstance.replay(PARENT, "p", old, 9_000)
    assert [e.parent.token for e in decision.effects if isinstance(e, StartChild)] == [None]
    assert instance.advance(ChildStarted("1", "enrich"), 9_001).rejected is None
    assert instance.pending_paths == ("2",)


def test_inbox_rules_refuse_reports_to_nobody_ignore_reports_to_an_ended_parent_and_feed_the_rest() -> None:
    started_report = WorkflowInbox("r", "p", "child_started", 0, parent_path="1", child_workflow="enrich")
    assert isinstance(decide_request(started_report, None), Refuse)
    assert isinstance(decide_request(started_report, StoredEnd("FINISHED", "finished", "1")), Reply)
    live = started(PARENT, deliver=False).parent
    assert decide_request(started_report, live) == Feed(ChildStarted("1", "enrich"))
    for bad in (
        WorkflowInbox("r", "p", "child_started", 0, parent_path="1"),
        WorkflowInbox("r", "p", "child_ended", 0, parent_path="1", child_workflow="enrich", outcome="odd"),
        WorkflowInbox("r", "p", "child_ended", 0, parent_path="1", child_workflow="enrich", outcome="finished",
                      payload=b"{not json"),
        WorkflowInbox("r", "p:1", "start", 0, payload=b"1", parent_workflow="parent"),  # half a parent
    ):
        assert isinstance(decide_request(bad, live if bad.kind != "start" else None), Refuse), bad
    start = WorkflowInbox("r", "p:1", "start", 0, payload=b'"x"', parent_workflow="parent", parent_id="p",
                          parent_path="1")
    assert decide_request(start, None) == Feed(Start("x", ParentRef("parent", "p", "1")))
    with_token = replace(start, parent_token="cd" * 16)
    assert decide_request(with_token, None) == Feed(Start("x", ParentRef("parent", "p", "1", "cd" * 16)))
    report = replace(started_report, parent_token="cd" * 16)
    assert decide_request(report, live) == Feed(ChildStarted("1", "enrich", "cd" * 16))


# -- cancellation -------------------------------------------------------------------------


def test_cancelling_the_parent_cancels_the_child_it_awaits() -> None:
    router = started(PARENT)
    router.to_parent(Cancel())
    assert router.cancels == [CancelChild("enrich", "p:2")]
    assert router.parent.outcome == Cancelled()


def test_cancelling_the_parent_cancels_a_child_whose_start_is_in_flight() -> None:
    router = started(PARENT, deliver=False)
    router.to_parent(Cancel())
    assert router.cancels == [CancelChild("enrich", "p:1")]
    # The late acknowledgement of that child changes nothing.
    decision = router.parent.advance(ChildStarted("1", "enrich", token(router, "1")), 5_000)
    assert decision.records == () and decision.rejected is None


def test_a_started_child_that_is_not_awaited_runs_on_when_the_parent_is_cancelled() -> None:
    async def body(ctx: WorkflowContext, order: str) -> str:
        handle = await ctx.start_child(ENRICH, order)
        await ctx.wait_signal("never")
        return handle.id

    router = started(body)
    router.to_parent(Cancel())
    assert router.parent.outcome == Cancelled()
    assert router.cancels == []
    assert router.children["p:1"].status is WorkflowStatus.RUNNING


def test_a_parked_parent_that_is_cancelled_cancels_no_child() -> None:
    router = started(PARENT)
    # Deploy a body that no longer matches the journal: the replay parks the instance.
    async def changed(ctx: WorkflowContext, order: str) -> int:
        await ctx.sleep(timedelta(seconds=1))
        return 0

    parked, _ = WorkflowInstance.replay(define_workflow("parent", changed), "p", router.journal, 5_000)
    assert parked.status is WorkflowStatus.PARKED
    decision = parked.advance(Cancel(), 5_001)
    assert parked.outcome == Cancelled()
    assert not [e for e in decision.effects if isinstance(e, CancelChild)]


def test_the_cancel_of_a_child_is_sent_once_and_not_again_on_replay() -> None:
    router = started(PARENT)

    async def cleanup(ctx: WorkflowContext, order: str) -> list[Any]:
        try:
            return await parent_body(ctx, order)
        except WorkflowStepFailed:
            await ctx.wait_signal("cleaned")  # the parent is still running after the cancel
            raise

    router = started(define_workflow("parent", cleanup))
    router.to_parent(Cancel())
    assert router.cancels == [CancelChild("enrich", "p:2")]
    _, decision = WorkflowInstance.replay(define_workflow("parent", cleanup), "p", router.journal, 9_000)
    assert not [e for e in decision.effects if isinstance(e, CancelChild)]


def test_a_child_handle_the_instance_did_not_start_is_refused_in_the_body() -> None:
    async def body(ctx: WorkflowContext, _: str) -> str:
        try:
            await ctx.await_child(ChildHandle("enrich", "someone-else:1"))
        except ValueError as exc:
            return str(exc)
        return "awaited"

    router = started(body)
    outcome = router.parent.outcome
    assert isinstance(outcome, Finished) and "no child this instance started" in outcome.value


# -- the in-memory runtime ----------------------------------------------------------------


def test_the_in_memory_runtime_runs_children_and_a_restart_reaches_the_same_child() -> None:
    from tidings.testing.workflows import WorkflowTestRuntime

    runtime = WorkflowTestRuntime()
    parent = runtime.register(PARENT)
    parent.start("p", "ab")  # nobody hosts "enrich" yet: the child's start stays in flight
    assert parent.status("p") is WorkflowStatus.RUNNING and not runtime.journals.get(("enrich", "p:1"))
    points = runtime.register(ENRICH)
    runtime.restart()  # the parent sends its pending start again; the child answers it
    assert points.status("p:1") is WorkflowStatus.RUNNING
    runtime.restart()  # and again: the existing children acknowledge, nothing starts twice
    points.signal("p:2", "go")
    assert parent.outcome("p") == Finished(["p:1", len("ab-again")])
    assert [type(r) for r in points.journal("p:2")].count(Started) == 1


def test_the_in_memory_runtime_cancels_the_awaited_child_with_its_parent() -> None:
    from tidings.testing.workflows import WorkflowTestRuntime

    runtime = WorkflowTestRuntime()
    points = runtime.register(ENRICH)
    parent = runtime.register(PARENT)
    parent.start("p", "ab")
    parent.cancel("p")
    assert parent.outcome("p") == Cancelled()
    assert points.outcome("p:2") == Cancelled()
    assert points.status("p:1") is WorkflowStatus.RUNNING  # started, not awaited: runs on


def test_tidings_journal_prints_a_childs_tokens_as_hidden() -> None:
    from tidings.cli.journal import shown
    from tidings.core.workflow import record_to_json

    router = started(PARENT, deliver=False)
    lines = [shown(record_to_json(r)) for r in router.journal]
    step = next(line for line in lines if line["type"] == "step_started" and line["kind"] == "child_start")
    assert step["token"] == "hidden" and token(router, "1") not in json.dumps(lines)
    child = shown(record_to_json(Started(1, '"x"', 0, "parent", "p", "1", parent_token="ab" * 16)))
    assert child["parent_token"] == "hidden"
    assert shown(record_to_json(Started(1, '"x"', 0)))["parent_token"] is None  # unset stays null
