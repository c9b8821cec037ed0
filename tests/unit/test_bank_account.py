"""The bank account's transfer rules, as the transfer saga relies on them."""

from __future__ import annotations

from decimal import Decimal

from examples.bank import account
from examples.bank.account import (
    AccountState,
    Close,
    Closed,
    Deposit,
    Open,
    ReceiveTransfer,
    RefundTransfer,
    Rejected,
    SendTransfer,
    TransferReceived,
    TransferRefunded,
    TransferSent,
)
from tidings.codec.payloads import payload_of, type_registry
from tidings.core.aggregate import (
    AggregateDefinition,
    AggregateInstance,
    Defer,
    Persist,
    handle,
)
from tidings.core.records import CommandEnvelope

BANK = AggregateDefinition(
    "account", account.initial, account.decide, account.fold,
    type_registry(account.AccountCommand.__args__),  # type: ignore[attr-defined]
    type_registry(account.AccountEvent.__args__),  # type: ignore[attr-defined]
)


def state(balance: int = 0, **more: object) -> AccountState:
    return AccountState(owner="Alice", balance=Decimal(balance), **more)


def test_a_transfer_debits_the_source_once_per_transfer_id() -> None:
    sent = account.decide(SendTransfer(transfer_id="t", target="bob", amount=Decimal(30)), state(100))
    assert sent == Persist(TransferSent(transfer_id="t", target="bob", amount=Decimal(30)))
    after = account.fold(sent.event, state(100))
    assert after.balance == 70 and after.sent == {"t"}
    again = account.decide(SendTransfer(transfer_id="t", target="bob", amount=Decimal(30)), after)
    assert isinstance(again, Defer) and isinstance(again.event, Rejected)


def test_receive_and_refund_credit_without_looking_the_transfer_up() -> None:
    # What keeps a resend from crediting twice is the command id (next test), not the state.
    receive = ReceiveTransfer(transfer_id="t", source="alice", amount=Decimal(5))
    credited = account.fold(account.decide(receive, state(10)).event, state(10))  # type: ignore[union-attr]
    assert credited.balance == 15
    assert account.decide(receive, credited) == Persist(
        TransferReceived(transfer_id="t", source="alice", amount=Decimal(5))
    )
    refund = RefundTransfer(transfer_id="t", target="bob", amount=Decimal(5))
    assert account.decide(refund, state(10)) == Persist(
        TransferRefunded(transfer_id="t", target="bob", amount=Decimal(5))
    )
    assert account.fold(TransferRefunded(transfer_id="t", target="bob", amount=Decimal(5)),
                        state(10)).balance == 15


def test_a_repeated_saga_command_id_gets_its_first_verdict_and_moves_no_money() -> None:
    verdicts: set[str] = set()  # what the worker's store of first verdicts holds

    def send(instance: AggregateInstance[AccountState], command_id: str, value: object):  # noqa: ANN202
        type_name, payload = payload_of(value)
        envelope = CommandEnvelope(command_id=command_id, correlation_id="t-1", aggregate_id="bob",
                                   type=type_name, payload=payload, timestamp_ms=1)
        handled = handle(BANK, instance, envelope, value, now_ms=1, encode=payload_of,
                         seen=verdicts.__contains__)
        verdicts.add(command_id)
        return handled

    bob = send(AggregateInstance.new("bob", account.initial), "open", Open(owner="Bob")).instance
    receive = ReceiveTransfer(transfer_id="t-1", source="alice", amount=Decimal(5))
    first = send(bob, "transfer:t-1:1:0", receive)
    assert first.instance.state.balance == 5 and len(first.stored) == 1
    resent = send(first.instance, "transfer:t-1:1:0", receive)
    assert resent.duplicate and resent.stored == () and resent.instance.state.balance == 5
    # A fresh command id (what a saga without stable ids would send) credits again.
    assert send(first.instance, "another-id", receive).instance.state.balance == 10


def test_an_unknown_or_closed_target_refuses_a_transfer() -> None:
    receive = ReceiveTransfer(transfer_id="t", source="alice", amount=Decimal(5))
    unknown = account.decide(receive, AccountState())
    assert unknown == Defer(Rejected(reason="The account is not open"))
    closed = account.fold(Closed(), state(0))
    assert account.decide(receive, closed) == Defer(Rejected(reason="The account is closed"))
    assert isinstance(account.decide(Deposit(amount=Decimal(1)), closed), Defer)


def test_only_an_empty_account_closes_and_a_closed_one_still_takes_its_refunds() -> None:
    assert account.decide(Close(), state(5)) == Defer(
        Rejected(reason="Only an empty account closes: 5 left")
    )
    assert account.decide(Close(), state(0)) == Persist(Closed())
    closed = account.fold(Closed(), state(0))
    refund = RefundTransfer(transfer_id="t", target="bob", amount=Decimal(5))
    # The money of a transfer it sent before closing comes back rather than vanish.
    refunded = account.decide(refund, closed)
    assert refunded == Persist(TransferRefunded(transfer_id="t", target="bob", amount=Decimal(5)))
    assert account.fold(refunded.event, closed).balance == 5  # type: ignore[union-attr]
