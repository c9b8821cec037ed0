"""The bank's transfer saga, driven through the pure saga core (no Kafka)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from examples.bank import transfer
from examples.bank.account import (
    ReceiveTransfer,
    RefundTransfer,
    Rejected,
    TransferReceived,
    TransferRefunded,
    TransferSent,
)
from examples.bank.transfer import Credited, Crediting, Refunded, Refunding, Stalled, Transfer
from tidings.codec.payloads import payload_of
from tidings.core import saga as core
from tidings.core.saga import ExpectationExhausted, SagaDefinition, SagaEvent, TimerFired


@dataclass(frozen=True)
class Accounts:
    """Stands for the accounts aggregate handle: a Send only needs its name."""

    name: str = "account"


DEFINITION = SagaDefinition(
    "transfer", start_on=transfer.start_on, initial=transfer.Idle(), handle=transfer.handle,
    on_enter=transfer.on_enter_for(Accounts()), state=transfer.TransferState,
)
T = Transfer(transfer_id="t-1", source="alice", target="bob", amount=Decimal(30))


def event(aggregate_id: str, value: Any, n: int, *, deferred: bool = False) -> SagaEvent:
    return SagaEvent("account", aggregate_id, f"e-{n}", f"c-{n}", "t-1", 0 if deferred else n,
                     type(value).__name__, value, deferred)


def feed(saga: core.SagaState | None, e: SagaEvent, now_ms: int = 1_000) -> core.SagaStep:
    return core.feed(DEFINITION, saga, "t-1", e, now_ms=now_ms,
                     encode=lambda aggregate, command: payload_of(command), replies_topic="bank.saga.transfer.replies")


SENT = event("alice", TransferSent(transfer_id="t-1", target="bob", amount=Decimal(30)), 1)


def test_transfer_sent_starts_the_saga_which_asks_the_target_to_take_the_money() -> None:
    step = feed(None, SENT)
    assert step.saga is not None and step.saga.state == Crediting(transfer=T)
    (command,) = step.commands
    assert command.envelope.aggregate_id == "bob" and command.envelope.correlation_id == "t-1"
    assert command.envelope.type == "ReceiveTransfer"
    assert ReceiveTransfer.model_validate_json(command.envelope.payload) == ReceiveTransfer(
        transfer_id="t-1", source="alice", amount=Decimal(30))
    # It expects an answer, resending meanwhile.
    assert {timer.kind for timer in step.timers} == {"resend", "deadline"}


def test_a_deferred_transfer_sent_or_another_event_starts_nothing() -> None:
    assert feed(None, event("alice", SENT.value, 1, deferred=True)).saga is None
    assert feed(None, event("alice", Rejected(reason="no"), 1, deferred=True)).saga is None


def test_the_target_receiving_ends_the_saga() -> None:
    crediting = feed(None, SENT).saga
    step = feed(crediting, event("bob", TransferReceived(transfer_id="t-1", source="alice",
                                                         amount=Decimal(30)), 2))
    assert step.saga is not None and step.saga.ended and step.saga.state == Credited(transfer=T)
    assert step.commands == ()


def test_a_refusing_target_gets_the_source_refunded_then_the_saga_ends() -> None:
    crediting = feed(None, SENT).saga
    # Someone else's refusal is not the target's answer.
    other = feed(crediting, event("carol", Rejected(reason="closed"), 2, deferred=True))
    assert other.saga is not None and other.saga.state == crediting.state and other.records == ()
    refunding = feed(crediting, event("bob", Rejected(reason="The account is not open"), 2, deferred=True))
    assert refunding.saga is not None
    assert refunding.saga.state == Refunding(transfer=T, reason="The account is not open")
    (command,) = refunding.commands
    assert (command.envelope.aggregate_id, command.envelope.type) == ("alice", "RefundTransfer")
    assert RefundTransfer.model_validate_json(command.envelope.payload).amount == Decimal(30)
    done = feed(refunding.saga, event("alice", TransferRefunded(transfer_id="t-1", target="bob",
                                                                amount=Decimal(30)), 3))
    assert done.saga is not None and done.saga.ended
    assert done.saga.state == Refunded(transfer=T, reason="The account is not open")


def test_a_resend_and_a_recovery_send_the_command_with_its_first_id() -> None:
    step = feed(None, SENT, now_ms=1_000)
    (first,) = step.commands
    resend_timer = next(t for t in step.timers if t.kind == "resend")
    resent = core.fire(DEFINITION, step.saga, TimerFired(resend_timer.seq, resend_timer.index, "resend",
                                                         resend_timer.due_ms),
                       now_ms=resend_timer.due_ms, encode=lambda a, c: payload_of(c),
                       replies_topic="bank.saga.transfer.replies")
    restored = core.restore(DEFINITION, step.records)
    assert restored is not None
    recovered = core.recover(DEFINITION, restored, now_ms=5_000, encode=lambda a, c: payload_of(c),
                             replies_topic="bank.saga.transfer.replies")
    ids = {first.envelope.command_id} | {c.envelope.command_id for c in resent.commands + recovered.commands}
    assert len(ids) == 1  # what the account's de-duplication recognises


def test_no_answer_in_time_stalls_without_refunding_a_credit_that_may_have_happened() -> None:
    crediting = feed(None, SENT).saga
    assert transfer.handle(ExpectationExhausted("account", "bob", None), crediting.state) == Stalled(
        transfer=T, waiting_for="credit")
    stalled = Stalled(transfer=T, waiting_for="credit")
    assert transfer.on_enter_for(Accounts())(stalled, False)[1] == []
    late = event("bob", TransferReceived(transfer_id="t-1", source="alice", amount=Decimal(30)), 2)
    assert transfer.handle(late, stalled) == Credited(transfer=T)
