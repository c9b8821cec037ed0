"""The pure saga state machine (tidings.core.saga), without Kafka."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from tidings.codec import avro
from tidings.codec.payloads import payload_of
from tidings.core import saga as core
from tidings.core.saga import (
    MAX_CHAIN,
    Expect,
    ExpectationExhausted,
    Goto,
    SagaDefinition,
    SagaEvent,
    SagaState,
    SagaStep,
    Send,
    Stay,
    Stop,
    TimerFired,
    saga_command_id,
)
from tidings.core.saga_records import SagaJournalEntry
from tidings.errors import DefinitionError, HandlerFailed

REPLIES = "bank.saga.transfer.replies"


@dataclass(frozen=True)
class Handle:
    """Stands in for an aggregate handle: the core only reads its name."""

    name: str


ACCOUNTS = Handle("account")


class Sent(BaseModel):
    transfer: str
    source: str
    target: str
    amount: int


class Receive(BaseModel):
    transfer: str
    amount: int


class Refund(BaseModel):
    transfer: str
    amount: int


class Transfer(BaseModel):
    phase: str = "new"
    source: str = ""
    target: str = ""
    amount: int = 0


def event(type_: str, value: Any, *, event_id: str = "e1", correlation: str = "t-1",
          aggregate_id: str = "alice", deferred: bool = False) -> SagaEvent:
    return SagaEvent("account", aggregate_id, event_id, "c-" + event_id, correlation, 1, type_, value, deferred)


def start_on(e: SagaEvent) -> bool:
    return isinstance(e.value, Sent)


def handle(e: Any, state: Transfer) -> Transfer | None:
    if isinstance(e, SagaEvent) and isinstance(e.value, Sent) and state.phase == "new":
        return Transfer(phase="receiving", source=e.value.source, target=e.value.target, amount=e.value.amount)
    if isinstance(e, SagaEvent) and e.type == "Received" and state.phase == "receiving":
        return state.model_copy(update={"phase": "done"})
    if isinstance(e, SagaEvent) and e.type == "Refused" and state.phase == "receiving":
        return state.model_copy(update={"phase": "refunding"})
    if isinstance(e, ExpectationExhausted) and state.phase == "receiving":
        return state.model_copy(update={"phase": "refunding"})
    if isinstance(e, SagaEvent) and e.type == "Refunded" and state.phase == "refunding":
        return state.model_copy(update={"phase": "done"})
    return None


def on_enter(state: Transfer, recovering: bool) -> tuple[Any, list[Send]]:
    if state.phase == "receiving":
        return Stay(), [Send(ACCOUNTS, state.target, Receive(transfer="t-1", amount=state.amount),
                             Expect(within=timedelta(seconds=1.3), resend_every=timedelta(seconds=0.3)))]
    if state.phase == "refunding":
        return Stay(), [Send(ACCOUNTS, state.source, Refund(transfer="t-1", amount=state.amount))]
    if state.phase == "done":
        return Stop(), []
    return Stay(), []


def encode(aggregate: Any, command: Any) -> tuple[str, bytes]:
    return payload_of(command)


TRANSFER = SagaDefinition("transfer", start_on=start_on, initial=Transfer(), handle=handle, on_enter=on_enter)
SENT = Sent(transfer="t-1", source="alice", target="bob", amount=30)


def feed(saga: SagaState | None, e: SagaEvent, now_ms: int = 1_000, definition: SagaDefinition = TRANSFER) -> SagaStep:
    return core.feed(definition, saga, "t-1", e, now_ms=now_ms, encode=encode, replies_topic=REPLIES)


def fire(saga: SagaState, timer: core.ArmTimer, now_ms: int | None = None) -> SagaStep:
    fired = TimerFired(timer.seq, timer.index, timer.kind, timer.due_ms)
    return core.fire(TRANSFER, saga, fired, now_ms=now_ms or timer.due_ms, encode=encode, replies_topic=REPLIES)


def started() -> SagaStep:
    return feed(None, event("Sent", SENT))


# -- starting ------------------------------------------------------------------------------


def test_an_accepted_stored_event_starts_the_saga_and_sends_its_first_commands() -> None:
    step = started()
    assert step.saga is not None and step.saga.seq == 1 and step.saga.state.phase == "receiving"
    (record,) = step.records
    assert (record.saga, record.saga_id, record.seq, record.transition) == ("transfer", "t-1", 1, "start")
    assert record.cause == "e1" and record.events == ("e1",) and record.entered_at_ms == 1_000
    assert TRANSFER.load_state(record.state or b"") == step.saga.state
    (command,) = step.commands
    envelope = command.envelope
    assert command.aggregate is ACCOUNTS
    assert envelope.command_id == saga_command_id("transfer", "t-1", 1, 0) == "transfer:t-1:1:0"
    assert (envelope.correlation_id, envelope.reply_to, envelope.reply_key) == ("t-1", REPLIES, "t-1")
    assert (envelope.aggregate_id, envelope.type) == ("bob", "Receive")
    assert record.commands[0].command_id == envelope.command_id
    assert record.commands[0].expect_within_ms == 1300 and record.commands[0].resend_every_ms == 300


def test_no_saga_starts_from_a_deferred_event_or_one_start_on_refuses() -> None:
    assert feed(None, event("Sent", SENT, deferred=True)).saga is None
    assert feed(None, event("Other", {"x": 1})).saga is None
    assert feed(None, event("Other", {"x": 1})).records == ()


def test_a_starting_event_that_handle_leaves_alone_starts_the_saga_in_initial() -> None:
    # start_on alone decides a start, as the aggregate's SagaAlreadyStarted check does: a
    # correlation id the aggregate refuses a second start for must have its saga.
    definition = SagaDefinition("lazy", start_on=lambda e: True, initial=Transfer(),
                                handle=lambda e, s: None, on_enter=on_enter)
    step = feed(None, event("Sent", SENT), definition=definition)
    assert step.saga is not None and step.saga.state == Transfer() and len(step.records) == 1


# -- events --------------------------------------------------------------------------------


def test_an_event_is_handled_once_by_id_whichever_way_it_comes() -> None:
    saga = started().saga
    received = feed(saga, event("Received", {}, event_id="e2", aggregate_id="bob"), now_ms=2_000)
    assert received.saga is not None and received.saga.ended
    assert [r.transition for r in received.records] == ["handle", "stop"]
    assert [r.seq for r in received.records] == [2, 3]
    again = feed(received.saga, event("Received", {}, event_id="e2", aggregate_id="bob"), now_ms=2_100)
    assert again.records == () and again.commands == ()
    # Before the end, a second copy (the reply's, then the events topic's) is dropped too.
    refused = feed(saga, event("Refused", {}, event_id="e3"))
    assert refused.saga is not None and refused.saga.state.phase == "refunding"
    assert feed(refused.saga, event("Refused", {}, event_id="e3")).records == ()


def test_an_event_handle_ignores_is_remembered_and_journaled_with_the_next_transition() -> None:
    saga = started().saga
    ignored = feed(saga, event("Noise", {}, event_id="n1"))
    assert ignored.records == () and ignored.saga is not None and "n1" in ignored.saga.seen
    moved = feed(ignored.saga, event("Received", {}, event_id="e2"))
    assert moved.records[0].events == ("n1", "e2")
    restored = core.restore(TRANSFER, started().records + moved.records)
    assert restored is not None and {"e1", "n1", "e2"} <= restored.seen


def test_an_ended_saga_takes_no_more_events() -> None:
    ended = feed(started().saga, event("Received", {}, event_id="e2")).saga
    assert ended is not None and ended.ended
    step = feed(ended, event("Refused", {}, event_id="e9"))
    assert step.records == () and step.note == "the saga has ended"


# -- Goto chains, Stop ----------------------------------------------------------------------


def test_goto_runs_the_next_on_enter_at_once_and_journals_each_state() -> None:
    def chain(state: int, recovering: bool) -> tuple[Any, list[Send]]:
        if state < 3:
            return Goto(state + 1), [Send(ACCOUNTS, f"a{state}", {"n": state})]
        return Stay(), []

    definition = SagaDefinition("chain", start_on=lambda e: True, initial=0, handle=lambda e, s: 1, on_enter=chain)
    step = feed(None, event("X", {}), definition=definition)
    assert [(r.seq, r.transition, r.state) for r in step.records] == [
        (1, "start", b"1"), (2, "goto", b"2"), (3, "goto", b"3")
    ]
    assert [c.envelope.command_id for c in step.commands] == ["chain:t-1:1:0", "chain:t-1:2:0"]
    assert step.saga is not None and step.saga.seq == 3 and not step.saga.ended


def test_a_goto_loop_faults_the_saga_instead_of_hanging() -> None:
    definition = SagaDefinition("loop", start_on=lambda e: True, initial=0, handle=lambda e, s: 1,
                                on_enter=lambda s, r: (Goto(s + 1), []))
    step = feed(None, event("X", {}), definition=definition)
    (fault,) = step.records
    assert fault.transition == "fault" and fault.ended and str(MAX_CHAIN) in (fault.reason or "")
    assert step.saga is not None and step.saga.ended and step.commands == ()


def test_stop_sends_the_last_commands_and_ends_the_saga() -> None:
    definition = SagaDefinition(
        "once", start_on=lambda e: True, initial="", handle=lambda e, s: "go",
        on_enter=lambda s, r: (Stop(), [Send(ACCOUNTS, "bob", {"final": True})]),
    )
    step = feed(None, event("X", {}), definition=definition)
    assert [(r.seq, r.transition, r.ended) for r in step.records] == [(1, "start", False), (2, "stop", True)]
    assert len(step.commands) == 1 and step.records[0].commands[0].command_id == "once:t-1:1:0"


# -- user code that fails -------------------------------------------------------------------


@pytest.mark.parametrize("where", ["start_on", "handle", "on_enter"])
def test_user_code_raising_fails_the_input_and_leaves_the_saga_where_it_was(where: str) -> None:
    def boom(*args: Any) -> Any:
        raise RuntimeError("boom")

    functions: dict[str, Any] = {"start_on": start_on, "handle": handle, "on_enter": on_enter}
    functions[where] = boom
    definition = SagaDefinition("bad", initial=Transfer(), **functions)
    with pytest.raises(HandlerFailed, match=f"{where} of saga bad raised: RuntimeError: boom"):
        feed(None, event("Sent", SENT), definition=definition)


def test_unusable_returns_of_on_enter_are_handler_failures() -> None:
    for bad in [None, (Stay(),), ("stay", []), (Stay(), [1]), (Stay(), 5),
                (Stay(), [Send(object(), "x", {})]), (Stay(), [Send(ACCOUNTS, "", {})]),
                (Stay(), [Send(ACCOUNTS, "x", object())]),
                (Stay(), [Send(ACCOUNTS, "x", {}, Expect(within=timedelta(0)))])]:
        definition = SagaDefinition("odd", start_on=lambda e: True, initial=0, handle=lambda e, s: 1,
                                    on_enter=lambda s, r, bad=bad: bad)
        with pytest.raises(HandlerFailed):
            feed(None, event("X", {}), definition=definition)


def test_a_state_that_cannot_be_stored_fails_the_input() -> None:
    definition = SagaDefinition("typed", start_on=lambda e: True, initial=Transfer(),
                                handle=lambda e, s: object(), on_enter=on_enter)
    with pytest.raises(HandlerFailed, match="cannot be stored"):
        feed(None, event("X", {}), definition=definition)


def test_a_definition_lists_every_problem() -> None:
    with pytest.raises(DefinitionError) as raised:
        SagaDefinition("bad name", start_on=1, initial=object(), handle=None, on_enter="x")  # type: ignore[arg-type]
    assert len(raised.value.reasons) == 5


# -- expectations ---------------------------------------------------------------------------


def test_an_expectation_resends_on_its_interval_then_gives_handle_expectation_exhausted() -> None:
    step = started()
    saga = step.saga
    assert saga is not None
    timers = {t.kind: t for t in step.timers}
    assert timers["deadline"].due_ms == 1_000 + 1_300 and timers["resend"].due_ms == 1_300
    resent = []
    timer: core.ArmTimer | None = timers["resend"]
    while timer is not None:
        fired = fire(saga, timer)
        resent.extend(fired.commands)
        timer = fired.timers[0] if fired.timers else None
    # 1.3, 1.6, 1.9, 2.2 s: four resends before the deadline at 2.3 s, all with one id.
    assert [c.envelope.command_id for c in resent] == ["transfer:t-1:1:0"] * 4
    exhausted = fire(saga, timers["deadline"])
    assert exhausted.saga is not None and exhausted.saga.state.phase == "refunding"
    assert exhausted.records[0].transition == "expectation"
    assert exhausted.records[0].cause == "expectation:transfer:t-1:1:0"
    assert [c.envelope.type for c in exhausted.commands] == ["Refund"]


def test_timers_of_a_state_the_saga_left_change_nothing() -> None:
    step = started()
    moved = feed(step.saga, event("Refused", {}, event_id="e2"))
    assert moved.saga is not None
    for timer in step.timers:
        assert fire(moved.saga, timer).records == ()
        assert fire(moved.saga, timer).commands == ()


def test_an_exhausted_expectation_that_handle_ignores_stops_resending() -> None:
    definition = SagaDefinition(
        "patient", start_on=lambda e: True, initial=0, handle=lambda e, s: 1 if s == 0 else None,
        on_enter=lambda s, r: (Stay(), [Send(ACCOUNTS, "x", {}, Expect(timedelta(seconds=1), timedelta(seconds=0.4)))]),
    )
    step = core.feed(definition, None, "t-1", event("X", {}), now_ms=0, encode=encode, replies_topic=REPLIES)
    assert step.saga is not None
    deadline = next(t for t in step.timers if t.kind == "deadline")
    out = core.fire(definition, step.saga, TimerFired(1, 0, "deadline", deadline.due_ms), now_ms=1_000,
                    encode=encode, replies_topic=REPLIES)
    assert out.records == () and out.saga is not None and out.saga.exhausted == {0}
    late = core.fire(definition, out.saga, TimerFired(1, 0, "resend", 800), now_ms=1_001,
                     encode=encode, replies_topic=REPLIES)
    assert late.commands == ()


# -- recovery -------------------------------------------------------------------------------


def test_recovery_reruns_on_enter_recovering_and_resends_with_the_same_ids() -> None:
    calls: list[bool] = []

    def watching(state: Transfer, recovering: bool) -> tuple[Any, list[Send]]:
        calls.append(recovering)
        return on_enter(state, recovering)

    definition = SagaDefinition("transfer", start_on=start_on, initial=Transfer(), handle=handle, on_enter=watching)
    first = feed(None, event("Sent", SENT), definition=definition)
    saga = core.restore(definition, first.records)
    assert saga is not None and saga.sends == ()
    recovered = core.recover(definition, saga, now_ms=1_700, encode=encode, replies_topic=REPLIES)
    assert calls == [False, True]
    assert [c.envelope.command_id for c in recovered.commands] == [c.envelope.command_id for c in first.commands]
    assert recovered.records == ()
    timers = {t.kind: t.due_ms for t in recovered.timers}
    # The deadline is the stored entry time + 1.3 s, not now + 1.3 s; resends keep their rhythm.
    assert timers == {"deadline": 2_300, "resend": 1_900}


def test_recovery_after_the_deadline_fires_it_at_once_without_resends() -> None:
    saga = core.restore(TRANSFER, started().records)
    assert saga is not None
    recovered = core.recover(TRANSFER, saga, now_ms=9_000, encode=encode, replies_topic=REPLIES)
    assert [(t.kind, t.due_ms) for t in recovered.timers] == [("deadline", 2_300)]


def test_recovery_finishes_a_chain_a_crash_cut_short() -> None:
    def chain(state: int, recovering: bool) -> tuple[Any, list[Send]]:
        return (Goto(2), []) if state == 1 else (Stop(), [])

    definition = SagaDefinition("cut", start_on=lambda e: True, initial=0, handle=lambda e, s: 1, on_enter=chain)
    full = feed(None, event("X", {}), definition=definition)
    assert [r.seq for r in full.records] == [1, 2, 3]
    saga = core.restore(definition, full.records[:1])  # only the first record was written
    assert saga is not None
    recovered = core.recover(definition, saga, now_ms=5_000, encode=encode, replies_topic=REPLIES)
    assert [(r.seq, r.transition) for r in recovered.records] == [(2, "goto"), (3, "stop")]
    assert recovered.saga is not None and recovered.saga.ended


def test_restore_keeps_the_first_record_of_a_seq_and_reads_the_end() -> None:
    records = list(feed(started().saga, event("Received", {}, event_id="e2")).records)
    first = started().records[0]
    zombie = SagaJournalEntry("transfer", "t-1", 1, 5, "start", b'{"phase": "zombie"}')
    saga = core.restore(TRANSFER, [records[1], first, zombie, records[0]])
    assert saga is not None and saga.ended and saga.seq == 3 and saga.state.phase == "done"
    assert saga.commands == {"transfer:t-1:1:0": "account"}
    assert core.restore(TRANSFER, []) is None


def test_journal_records_round_trip_through_avro() -> None:
    for record in started().records + feed(started().saga, event("Received", {}, event_id="e2")).records:
        assert avro.decode_as(avro.encode(record), SagaJournalEntry) == record


# -- command ids ----------------------------------------------------------------------------


def test_command_ids_are_stable_distinct_and_within_the_id_limit() -> None:
    ids = {saga_command_id("s", "x", seq, index) for seq in range(1, 4) for index in range(3)}
    assert len(ids) == 9
    long_id = "é" * 127
    hashed = saga_command_id("s", long_id, 12, 3)
    assert len(hashed.encode()) <= 255 and hashed == saga_command_id("s", long_id, 12, 3)
    assert hashed != saga_command_id("s", long_id + "x", 12, 3)

