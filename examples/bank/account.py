"""The seed's Account aggregate, as plain Python: commands, events, state, decide, fold.

Nothing here knows about Kafka. Amounts are Decimals, serialised as strings, so money
never goes through binary floating point.

A transfer is three commands on two accounts: ``SendTransfer`` debits the source (its
``TransferSent`` starts the transfer saga, ``transfer.py``), the saga's ``ReceiveTransfer``
credits the target, or its ``RefundTransfer`` credits the source back when the target
refused. The saga may send those two again (after a restart, or while it waits for an
answer); what keeps a resend from moving money twice is that an account answers a
repeated command id with its first verdict (the aggregate core's de-duplication) and
the saga's command ids are stable. So ``decide`` deliberately does not look the
transfer id up: the bank invariant test proves the command ids are what protect it.
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


class Close(_Message):
    """Close an empty account: it then refuses everything but refunds of its own transfers."""


AccountCommand = (
    Open | Deposit | Withdraw | SendTransfer | ReceiveTransfer | RefundTransfer | Close
)


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


class Closed(_Message):
    pass


class Rejected(_Message):
    reason: str


AccountEvent = (
    Opened
    | Deposited
    | Withdrawn
    | TransferSent
    | TransferReceived
    | TransferRefunded
    | Closed
    | Rejected
)


class AccountState(_Message):
    """What the account knows now; ``sent`` refuses a second ``SendTransfer`` of one id."""

    owner: str | None = None
    balance: Decimal = Decimal(0)
    closed: bool = False
    sent: frozenset[str] = frozenset()


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
        # A transfer this account sent comes back even when it closed since: money is never
        # left nowhere. A repeated RefundTransfer (same command id) never gets here.
        case RefundTransfer(transfer_id=tid, target=target, amount=amount):
            return Persist(TransferRefunded(transfer_id=tid, target=target, amount=amount))
        case _ if state.closed:
            return Defer(Rejected(reason="The account is closed"))
        case Close() if state.balance != 0:
            return Defer(Rejected(reason=f"Only an empty account closes: {state.balance} left"))
        case Close():
            return Persist(Closed())
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
        # Only the saga sends this, with a stable command id: a resend is a repeated command
        # id, answered with the first verdict before decide is called.
        case ReceiveTransfer(transfer_id=tid, source=source, amount=amount):
            return Persist(TransferReceived(transfer_id=tid, source=source, amount=amount))
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
        case TransferReceived(amount=amount) | TransferRefunded(amount=amount):
            return state.model_copy(update={"balance": state.balance + amount})
        case Closed():
            return state.model_copy(update={"closed": True})
        case Rejected():
            return state
    raise TypeError(f"not an account event: {event!r}")
