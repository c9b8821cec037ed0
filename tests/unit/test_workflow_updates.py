"""Updates in the pure core and the in-memory runtime: accepted, journaled, answered once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest

from tidings.codec.workflow import inbox_from_json
from tidings.core.limits import check_inbox
from tidings.core.workflow.inbox_rules import (
    ACCEPTED,
    NOT_FOUND,
    AwaitUpdate,
    Feed,
    InboxReply,
    Refuse,
    Reply,
    StoredEnd,
    answer_fed,
    decide_request,
)
from tidings.core.workflow_records import WorkflowInbox

from tidings import Retry, WorkflowContext
from tidings.core.workflow import (
    ActivityResult,
    Finished,
    SignalReceived,
    Start,
    Started,
    StepCompleted,
    StepStarted,
    Update,
    UpdateDeclaration,
    WorkflowInstance,
    WorkflowStatus,
    define_workflow,
)
from tidings.core.workflow.journal import UpdateAnswered, UpdateReceived
from tidings.core.workflow.updates import AnswerUpdate, ReplyAddress
from tidings.errors import (
    DefinitionError,
    LimitError,
    SchemaError,
    WorkflowEnded,
    WorkflowNotFound,
    WorkflowUpdateFailed,
    WorkflowUpdateRejected,
)
from tidings.testing import WorkflowTestRuntime


def positive(qty: int) -> None:
    if qty <= 0:
        raise ValueError("the quantity must be positive")


async def cart(ctx: WorkflowContext, owner: str) -> list[int]:
    items: list[int] = []
    while True:
        call = await ctx.wait_update("add_item")
        if call.payload == 99:
            await call.fail("99 is out of stock")
            continue
        if call.payload == 0:
            await call.reply(sum(items))
            return items
        # A step before the answer: the answer waits for it.
        doubled = await ctx.activity("double", Retry.times(3), lambda a, q=call.payload: q * 2)
        items.append(doubled)
        await call.reply(len(items))


def cart_definition() -> Any:
    return define_workflow("cart", cart, updates=[UpdateDeclaration("add_item", int, positive_or_stop)])


def positive_or_stop(qty: int) -> None:
    if qty < 0:
        raise ValueError("the quantity must not be negative")


def runtime() -> tuple[WorkflowTestRuntime, Any]:
    rt = WorkflowTestRuntime()
    return rt, rt.register(cart_definition())


def test_an_update_is_accepted_runs_a_step_and_is_answered() -> None:
    rt, handle = runtime()
    handle.start("c-1", "ann")
    assert handle.update("c-1", "add_item", 3) == 1
    assert handle.update("c-1", "add_item", 4) == 2
    journal = handle.journal("c-1")
    received = [r for r in journal if isinstance(r, UpdateReceived)]
    answered = [r for r in journal if isinstance(r, UpdateAnswered)]
    assert [r.payload for r in received] == ["3", "4"]
    assert [r.result for r in answered] == ["1", "2"]
    assert handle.update("c-1", "add_item", 0) == 14
    assert handle.outcome("c-1") == Finished([6, 8])


def test_a_rejected_update_journals_nothing() -> None:
    rt, handle = runtime()
    handle.start("c-1", "ann")
    before = handle.journal("c-1")
    with pytest.raises(WorkflowUpdateRejected, match="must not be negative"):
        handle.update("c-1", "add_item", -1)
    with pytest.raises(WorkflowUpdateRejected, match="declares no update 'remove'"):
        handle.update("c-1", "remove", 1)
    with pytest.raises(WorkflowUpdateRejected, match="does not read as its type"):
        handle.update("c-1", "add_item", "three")
    assert handle.journal("c-1") == before
    assert handle.update("c-1", "add_item", 1) == 1  # the instance goes on


def test_the_body_fails_an_update() -> None:
    rt, handle = runtime()
    handle.start("c-1", "ann")
    with pytest.raises(WorkflowUpdateFailed, match="out of stock") as failed:
        handle.update("c-1", "add_item", 99)
    assert failed.value.error is not None and "out of stock" in failed.value.error.message
    assert handle.update("c-1", "add_item", 2) == 1


def test_an_update_id_is_stored_once_and_a_repeat_gets_the_first_answer() -> None:
    rt, handle = runtime()
    handle.start("c-1", "ann")
    assert handle.update("c-1", "add_item", 5, update_id="u-1") == 1
    assert handle.update("c-1", "add_item", 7, update_id="u-1") == 1  # the first answer, not a second item
    assert sum(isinstance(r, UpdateReceived) for r in handle.journal("c-1")) == 1
    rt.restart()  # the ids are the journal's: a repeat after a restart stores nothing either
    assert handle.update("c-1", "add_item", 7, update_id="u-1") == 1
    assert sum(isinstance(r, UpdateReceived) for r in handle.journal("c-1")) == 1


def test_an_update_before_the_body_waits_is_stored_and_handed_over() -> None:
    async def late(ctx: WorkflowContext, _: None) -> int:
        await ctx.sleep(timedelta(minutes=5))
        call = await ctx.wait_update("go")
        await call.reply(call.payload + 1)
        return int(call.payload)

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("late", late, updates={"go": int}))
    handle.start("l-1")
    assert handle.update("l-1", "go", 41, update_id="u-9", wait_for="accepted") is None  # stored, not taken
    assert [type(r) for r in handle.journal("l-1")][-1] is UpdateReceived
    # The repeat waits for the body, which takes the stored update after its sleep.
    assert handle.update("l-1", "go", 41, update_id="u-9", timeout=timedelta(minutes=10)) == 42
    assert handle.outcome("l-1") == Finished(41)
    assert sum(isinstance(r, UpdateReceived) for r in handle.journal("l-1")) == 1


def test_an_update_to_an_ended_or_unknown_instance() -> None:
    rt, handle = runtime()
    with pytest.raises(WorkflowNotFound):
        handle.update("nobody", "add_item", 1)
    handle.start("c-1", "ann")
    assert handle.update("c-1", "add_item", 2, update_id="first") == 1
    handle.update("c-1", "add_item", 0)
    before = handle.journal("c-1")
    with pytest.raises(WorkflowEnded):
        handle.update("c-1", "add_item", 1)
    assert handle.journal("c-1") == before
    # A repeat of an update it answered before its end gets that answer, after a restart too.
    assert handle.update("c-1", "add_item", 9, update_id="first") == 1
    rt.restart()
    assert handle.update("c-1", "add_item", 9, update_id="first") == 1
    with pytest.raises(WorkflowEnded):
        handle.update("c-1", "add_item", 9, update_id="never")
    assert handle.journal("c-1") == before


def test_an_instance_that_ends_answers_its_unanswered_updates_ended() -> None:
    async def ends(ctx: WorkflowContext, _: None) -> None:
        await ctx.sleep(timedelta(seconds=10))

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("ends", ends, updates=["ping"]))
    handle.start("e-1")
    with pytest.raises(WorkflowEnded):
        handle.update("e-1", "ping", None, timeout=timedelta(seconds=30))


def test_update_with_start_starts_once_and_stores_the_update_with_the_start() -> None:
    rt, handle = runtime()
    assert handle.update_with_start("c-2", "bob", "add_item", 3) == 1
    journal = handle.journal("c-2")
    assert isinstance(journal[0], Started) and isinstance(journal[1], UpdateReceived)
    assert handle.update_with_start("c-2", "bob", "add_item", 4) == 2  # running: only the update
    assert sum(isinstance(r, Started) for r in handle.journal("c-2")) == 1
    with pytest.raises(WorkflowUpdateRejected):
        handle.update_with_start("c-3", "bob", "add_item", -5)
    assert handle.journal("c-3") == []  # a refused update starts nothing
    rt.restart()
    assert handle.update("c-2", "add_item", 0) == 14


def test_replay_gives_the_stored_update_and_sends_no_answer_again() -> None:
    definition = cart_definition()
    instance = WorkflowInstance(definition, "c-1")
    started = instance.advance(Start("ann"), 1)
    decision = instance.advance(Update("add_item", 2, "u-1", ReplyAddress("r", "q-1")), 2)
    assert isinstance(decision.records[0], UpdateReceived)
    path = next(r.path for r in decision.records if isinstance(r, StepStarted) and r.kind == "activity")
    answered = instance.advance(ActivityResult(path, 1, value=4), 3)
    answers = [e for e in answered.effects if isinstance(e, AnswerUpdate)]
    assert answers == [AnswerUpdate("u-1", "completed", ReplyAddress("r", "q-1"), "1")]
    journal = [*started.records, *decision.records, *answered.records]
    replayed, replay_decision = WorkflowInstance.replay(definition, "c-1", journal, 4)
    assert replayed.status is WorkflowStatus.RUNNING
    assert not [e for e in replay_decision.effects if isinstance(e, AnswerUpdate)]
    assert isinstance(replayed.update_state("u-1"), UpdateAnswered)
    # A repeat of the id stores nothing.
    assert replayed.advance(Update("add_item", 5, "u-1"), 5).records == ()


def test_a_stuck_update_survives_a_crash_and_is_answered_after_recovery() -> None:
    rt, handle = runtime()
    handle.start("c-1", "ann")
    pending = handle.ask("c-1", "query")
    assert pending.reply is not None
    handle.update("c-1", "add_item", 3, wait_for="accepted")  # accepted; its activity not run yet
    rt.crash()
    rt.recover()
    assert handle.update("c-1", "add_item", 0) == 6


def test_declarations_are_checked() -> None:
    with pytest.raises(DefinitionError, match="declared twice"):
        define_workflow("x", cart, updates=["a", "a"])
    with pytest.raises(DefinitionError, match="non-empty"):
        define_workflow("x", cart, updates=[""])


def test_a_signal_and_an_update_of_one_name_do_not_mix() -> None:
    async def both(ctx: WorkflowContext, _: None) -> Any:
        signal = await ctx.wait_signal("x")
        call = await ctx.wait_update("x")
        await call.reply(signal)
        return call.payload

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("both", both, updates=["x"]))
    handle.start("b-1")
    handle.update("b-1", "x", "update", wait_for="accepted")
    handle.signal("b-1", "x", "signal")
    assert handle.outcome("b-1") == Finished("update")
    assert [type(r) for r in handle.journal("b-1")][:3] == [Started, StepStarted, UpdateReceived]
    assert any(isinstance(r, SignalReceived) for r in handle.journal("b-1"))
    assert any(isinstance(r, StepCompleted) and r.result == '"update"' for r in handle.journal("b-1"))


# -- the inbox rules and the JSON envelope, pure ----------------------------------------------


@dataclass(frozen=True)
class Req:
    kind: str = "update"
    payload: bytes | None = b"3"
    update: str | None = "add_item"
    update_id: str | None = "u-1"
    wait_for: str | None = None
    reply_to: str | None = "x.replies"
    request_id: str = "r-1"
    input: bytes | None = None
    signal: str | None = None
    signal_id: str | None = None
    wait: bool = False
    metadata: dict[str, str] = field(default_factory=dict)


def live() -> WorkflowInstance:
    instance = WorkflowInstance(cart_definition(), "c-1")
    instance.advance(Start("ann"), 1)
    return instance


def test_rules_for_an_update_to_each_kind_of_instance() -> None:
    assert decide_request(Req(), None) == Reply(NOT_FOUND)
    ended = StoredEnd("FINISHED", "finished", "[]")
    verdict = decide_request(Req(), ended)
    assert isinstance(verdict, Reply) and verdict.reply.answer == "ended" and verdict.reply.outcome == "finished"
    answered = StoredEnd("FINISHED", "finished", "[]", answered=UpdateAnswered(5, "u-1", 3, result="2"))
    assert decide_request(Req(), answered) == Reply(InboxReply("completed", result="2"))
    fed = decide_request(Req(), live())
    assert fed == Feed(Update("add_item", 3, "u-1", ReplyAddress("x.replies", "r-1")))
    accepted_only = decide_request(Req(wait_for="accepted"), live())
    assert isinstance(accepted_only, Feed) and accepted_only.message.reply is None  # type: ignore[union-attr]
    starts = decide_request(Req(kind="update_with_start", input=b'"ann"'), None)
    assert isinstance(starts, Feed) and isinstance(starts.message, Start)
    assert starts.message.update == Update("add_item", 3, "u-1", ReplyAddress("x.replies", "r-1"))


def test_rules_refuse_unusable_updates() -> None:
    for request in (Req(update=None), Req(update_id=None), Req(wait_for="soon"), Req(payload=b"{nope")):
        assert isinstance(decide_request(request, live()), Refuse), request
    # An update-with-start's input is read only when it starts the instance (as a second start's).
    assert isinstance(decide_request(Req(kind="update_with_start", input=b"{nope"), None), Refuse)
    assert isinstance(decide_request(Req(kind="update_with_start", input=b"{nope"), live()), Feed)


def test_rules_answer_a_repeat_from_the_journal() -> None:
    instance = live()
    instance.advance(Update("add_item", 3, "u-1", ReplyAddress("x", "r-1")), 2)
    assert decide_request(Req(), instance) == AwaitUpdate("u-1")  # pending: waits for the body
    assert decide_request(Req(wait_for="accepted"), instance) == Reply(ACCEPTED)


def test_answer_fed_for_updates() -> None:
    instance = live()
    assert answer_fed(Req(), instance, None, None) is None  # the AnswerUpdate effect answers it
    assert answer_fed(Req(wait_for="accepted"), instance, None, None) == Reply(ACCEPTED)
    assert answer_fed(Req(), instance, "no", None) == Reply(InboxReply("rejected", reason="no"))


def test_the_json_envelope_of_an_update() -> None:
    inbox = inbox_from_json(json.dumps({"kind": "update", "instance_id": "c-1", "update": "add_item",
                                        "update_id": "u-1", "payload": {"qty": 2}, "wait_for": "accepted",
                                        "reply_to": "x.replies"}).encode())
    assert (inbox.update, inbox.update_id, inbox.wait_for, inbox.payload) == (
        "add_item", "u-1", "accepted", b'{"qty":2}')
    with_start = inbox_from_json(json.dumps({"kind": "update_with_start", "instance_id": "c-1", "input": "ann",
                                             "update": "add_item", "update_id": "u-2"}).encode())
    assert with_start.input == b'"ann"'
    for bad in ({"kind": "update", "instance_id": "c-1", "update_id": "u"},
                {"kind": "update", "instance_id": "c-1", "update": "a"},
                {"kind": "update", "instance_id": "c-1", "update": "a", "update_id": 7},
                {"kind": "signal", "instance_id": "c-1", "signal": "s", "update_id": "u"},
                {"kind": "start", "instance_id": "c-1", "wait_for": "accepted"}):
        with pytest.raises(SchemaError):
            inbox_from_json(json.dumps(bad).encode())


def test_the_limits_of_an_update_request() -> None:
    base = WorkflowInbox("r", "c-1", "update", 1, payload=b"1", update="a", update_id="u")
    assert check_inbox(base) is base
    for bad in (replace(base, update_id=None), replace(base, update=None), replace(base, update="n" * 300),
                replace(base, update_id="u" * 300), replace(base, payload=b"1" * 600_000)):
        with pytest.raises(LimitError):
            check_inbox(bad)
