"""The seed's Account aggregate, as plain Python: commands, events, state, decide, fold.

Nothing here knows about Kafka. Amounts are Decimals, serialised as strings, so money
never goes through binary floating point.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict

from tidings.core.aggregate import Decision, Defer, Persist


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True)


# What a caller, or the transfer saga, can ask an account to do.
class Open(_Message):
    owner: str


class Deposit(_Message):
    amount: Decimal


class Withdraw(_Message):
    amount: Decimal


class SendTransfer(_Message):
    transfer_id: str
    target: str
    amount: Decimal


class ReceiveTransfer(_Message):
    transfer_id: str
    source: str
    amount: Decimal


class RefundTransfer(_Message):
    transfer_id: str
    target: str
    amount: Decimal


AccountCommand = Open | Deposit | Withdraw | SendTransfer | ReceiveTransfer | RefundTransfer


# What the account replies. Rejected is a reply only: it is never stored.
class Opened(_Message):
    owner: str


class Deposited(_Message):
    amount: Decimal


class Withdrawn(_Message):
    amount: Decimal


class TransferSent(_Message):
    transfer_id: str
    target: str
    amount: Decimal


class TransferReceived(_Message):
    transfer_id: str
    source: str
    amount: Decimal


class TransferRefunded(_Message):
    transfer_id: str
    target: str
    amount: Decimal


class Rejected(_Message):
    reason: str


AccountEvent = (
    Opened | Deposited | Withdrawn | TransferSent | TransferReceived | TransferRefunded | Rejected
)


class AccountState(_Message):
    """What the account knows now; the sets make repeated transfers move no money twice."""

    owner: str | None = None
    balance: Decimal = Decimal(0)
    sent: frozenset[str] = frozenset()
    received: frozenset[str] = frozenset()
    refunded: frozenset[str] = frozenset()


initial = AccountState()


def decide(command: AccountCommand, state: AccountState) -> Decision:
    """Choose what to do with a command, based on the current state."""
    match command:
        case Open() if state.owner is not None:
            return Defer(Rejected(reason="The account is already open"))
        case Open(owner=owner):
            return Persist(Opened(owner=owner))
        case _ if state.owner is None:
            return Defer(Rejected(reason="The account is not open"))
        case Deposit(amount=amount) | Withdraw(amount=amount) | SendTransfer(
            amount=amount
        ) if amount <= 0:
            return Defer(Rejected(reason="The amount must be positive"))
        case Deposit(amount=amount):
            return Persist(Deposited(amount=amount))
        case Withdraw(amount=amount) | SendTransfer(amount=amount) if amount > state.balance:
            return Defer(Rejected(reason=f"Insufficient funds: {state.balance} available"))
        case Withdraw(amount=amount):
            return Persist(Withdrawn(amount=amount))
        case SendTransfer(transfer_id=tid) if tid in state.sent:
            return Defer(Rejected(reason=f"Transfer {tid} was already sent"))
        case SendTransfer(transfer_id=tid, target=target, amount=amount):
            return Persist(TransferSent(transfer_id=tid, target=target, amount=amount))
        # A repeated delivery gets the first answer; no money moves.
        case ReceiveTransfer(transfer_id=tid, source=source, amount=amount):
            event = TransferReceived(transfer_id=tid, source=source, amount=amount)
            return Defer(event) if tid in state.received else Persist(event)
        case RefundTransfer(transfer_id=tid, target=target, amount=amount):
            refunded = TransferRefunded(transfer_id=tid, target=target, amount=amount)
            return Defer(refunded) if tid in state.refunded else Persist(refunded)
    raise TypeError(f"not an account command: {command!r}")


def fold(event: AccountEvent, state: AccountState) -> AccountState:
    """Apply one event. A rejection or a repeated reply changes nothing."""
    match event:
        case Opened(owner=owner):
            return state.model_copy(update={"owner": owner})
        case Deposited(amount=amount):
            return state.model_copy(update={"balance": state.balance + amount})
        case Withdrawn(amount=amount):
            return state.model_copy(update={"balance": state.balance - amount})
        case TransferSent(transfer_id=tid, amount=amount):
            return state.model_copy(
                update={"balance": state.balance - amount, "sent": state.sent | {tid}}
            )
        case TransferReceived(transfer_id=tid) if tid in state.received:
            return state
        case TransferReceived(transfer_id=tid, amount=amount):
            return state.model_copy(
                update={"balance": state.balance + amount, "received": state.received | {tid}}
            )
        case TransferRefunded(transfer_id=tid) if tid in state.refunded:
            return state
        case TransferRefunded(transfer_id=tid, amount=amount):
            return state.model_copy(
                update={"balance": state.balance + amount, "refunded": state.refunded | {tid}}
            )
        case Rejected():
            return state
    raise TypeError(f"not an account event: {event!r}")
