"""The transfer saga: money sent by one account reaches the other, or comes back.

``SendTransfer`` makes the source store ``TransferSent`` (the money left it) and that
stored event starts this saga, whose id is the event's correlation id. The saga then:

    Idle --TransferSent--> Crediting        sends ReceiveTransfer to the target
    Crediting --TransferReceived--> Credited (ends)
    Crediting --Rejected (target closed, unknown)--> Refunding
                                            sends RefundTransfer to the source
    Refunding --TransferRefunded--> Refunded (ends)

A state's command is sent again on ``RESEND_EVERY`` while no answer came (a reply can be
lost when a worker dies) and after every restart (recovery re-runs ``on_enter``). It
keeps its command id each time (``saga_command_id``, from the saga id and the state's
sequence), so the account answers a resend with its first verdict and no money moves
twice: that, not a lookup of the transfer id, is what the account relies on.

If no answer comes within ``EXPECT_WITHIN`` the saga stops resending and waits in
``Stalled`` for the event that settles it; it never gives up on a credit by refunding,
because a credit whose answer is late may still have happened (both would create money).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tidings.core.saga import (
    Expect,
    ExpectationExhausted,
    Send,
    SagaEvent,
    Stay,
    Stop,
    Transition,
)

from .account import (
    ReceiveTransfer,
    RefundTransfer,
    Rejected,
    TransferReceived,
    TransferRefunded,
    TransferSent,
)

if TYPE_CHECKING:
    from tidings import App
    from tidings.shell.kinds.aggregate.handle import AggregateHandle
    from tidings.shell.kinds.saga.handle import SagaHandle

#: How often a state's command is sent again while it has no answer. Only a lost reply
#: needs it (a restart resends anyway, and a stored event reaches the saga without the
#: reply); a short interval would resend every command of a busy worker again and again.
RESEND_EVERY = timedelta(seconds=15)
#: How long a state resends before it waits in ``Stalled`` without resending.
EXPECT_WITHIN = timedelta(minutes=10)


class _State(BaseModel):
    model_config = ConfigDict(frozen=True)


class Transfer(_State):
    """The money the saga moves: ``amount`` from ``source`` to ``target``."""

    transfer_id: str
    source: str
    target: str
    amount: Decimal


class Idle(_State):
    """Before the starting event."""

    step: Literal["idle"] = "idle"


class Crediting(_State):
    """The source is debited; the target is asked to take the money."""

    step: Literal["crediting"] = "crediting"
    transfer: Transfer


class Refunding(_State):
    """The target refused (``reason``); the source is asked to take the money back."""

    step: Literal["refunding"] = "refunding"
    transfer: Transfer
    reason: str


class Credited(_State):
    """The target has the money: the saga ends."""

    step: Literal["credited"] = "credited"
    transfer: Transfer


class Refunded(_State):
    """The source has the money back: the saga ends."""

    step: Literal["refunded"] = "refunded"
    transfer: Transfer
    reason: str


class Stalled(_State):
    """No answer within ``EXPECT_WITHIN``: wait for the settling event, send nothing more."""

    step: Literal["stalled"] = "stalled"
    transfer: Transfer
    waiting_for: Literal["credit", "refund"]
    reason: str | None = None


TransferState = Annotated[
    Idle | Crediting | Refunding | Credited | Refunded | Stalled, Field(discriminator="step")
]


def start_on(event: SagaEvent) -> bool:
    """A stored ``TransferSent`` starts a transfer."""
    return not event.deferred and isinstance(event.value, TransferSent)


def handle(event: SagaEvent | ExpectationExhausted, state: Any) -> Any:
    """The next state for ``event``, or None when the event is not for this state."""
    if isinstance(event, ExpectationExhausted):
        match state:
            case Crediting(transfer=transfer):
                return Stalled(transfer=transfer, waiting_for="credit")
            case Refunding(transfer=transfer, reason=reason):
                return Stalled(transfer=transfer, waiting_for="refund", reason=reason)
        return None
    value = event.value
    match state:
        case Idle() if isinstance(value, TransferSent):
            return Crediting(transfer=Transfer(
                transfer_id=value.transfer_id, source=event.aggregate_id, target=value.target,
                amount=value.amount,
            ))
        case Crediting(transfer=t) | Stalled(transfer=t, waiting_for="credit"):
            if event.aggregate_id != t.target:
                return None
            if isinstance(value, TransferReceived) and value.transfer_id == t.transfer_id:
                return Credited(transfer=t)
            # The target's refusal is deferred: it comes only in the reply to our command.
            if isinstance(value, Rejected):
                return Refunding(transfer=t, reason=value.reason)
        case Refunding(transfer=t) | Stalled(transfer=t, waiting_for="refund"):
            if (event.aggregate_id == t.source and isinstance(value, TransferRefunded)
                    and value.transfer_id == t.transfer_id):
                return Refunded(transfer=t, reason=state.reason or "")
    return None


def on_enter_for(accounts: Any) -> Callable[[Any, bool], tuple[Transition, list[Send]]]:
    """The saga's ``on_enter``, sending its commands to the ``accounts`` aggregate handle."""
    expect = Expect(within=EXPECT_WITHIN, resend_every=RESEND_EVERY)

    def on_enter(state: Any, recovering: bool) -> tuple[Transition, list[Send]]:
        match state:
            case Crediting(transfer=t):
                receive = ReceiveTransfer(transfer_id=t.transfer_id, source=t.source, amount=t.amount)
                return Stay(), [Send(accounts, t.target, receive, expect=expect)]
            case Refunding(transfer=t):
                refund = RefundTransfer(transfer_id=t.transfer_id, target=t.target, amount=t.amount)
                return Stay(), [Send(accounts, t.source, refund, expect=expect)]
            case Credited() | Refunded():
                return Stop(), []
        # Idle is never entered; Stalled waits for the event that settles it.
        return Stay(), []

    return on_enter


def declare(app: App, accounts: AggregateHandle[Any, Any, Any]) -> SagaHandle:
    """Declare the transfer saga on ``app`` over ``accounts``; return its handle."""
    return app.saga(
        "transfer",
        subscribe=[accounts],
        start_on=start_on,
        initial=Idle(),
        handle=handle,
        on_enter=on_enter_for(accounts),
        state=TransferState,
    )
