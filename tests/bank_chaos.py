"""What the bank chaos tests share: the accounts they open, callers that send random transfers
the way a real caller does (again with the same command id on a timeout or a broker error), the
wait for a worker that serves again, the wait for every saga to end, and the invariant check
over the accounts' journal (tests/chaos/test_bank_invariant.py, tests/chaos/test_cluster_failures.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from examples.bank import account
from examples.bank.account import (
    Close,
    Deposit,
    Open,
    SendTransfer,
    TransferReceived,
    TransferRefunded,
    TransferSent,
)
from tidings import App
from tidings.codec import avro
from tidings.codec.payloads import load_payload
from tidings.core.records import EventEnvelope, ReplyEnvelope
from tidings.core.saga_records import SagaJournalEntry
from tidings.errors import BrokerError, ReplyTimeout
from tidings.shell.client.client import Client
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tidings.testing.topics import read_topic

ACCOUNTS = [f"acc-{n}" for n in range(6)]
OPENING = Decimal(1000)
TOTAL = OPENING * len(ACCOUNTS)
GHOST = "ghost"  # never opened: a transfer to it is refused and refunded
CLOSED = "closed"  # opened empty and closed: likewise
CALLERS = 6
EVENT_TYPES = {name: t for name, t in ((t.__name__, t) for t in account.AccountEvent.__args__)}  # type: ignore[attr-defined]


@dataclass
class Progress:
    """How many replies the callers have had so far, and when each came (monotonic seconds)."""

    replies: int = 0
    at: list[float] = field(default_factory=list)


async def send(client: Client, aggregate_id: str, command: Any, command_id: str,
               correlation_id: str | None = None) -> ReplyEnvelope:
    """Send like a real caller: on a timeout or a broker error, again with the same command id."""
    while True:
        try:
            return await client.send_envelope("account", aggregate_id, command, 10,
                                              command_id=command_id, correlation_id=correlation_id)
        except (ReplyTimeout, BrokerError):
            await asyncio.sleep(0.2)


async def open_accounts(client: Client) -> None:
    for name in ACCOUNTS:
        await send(client, name, Open(owner=name), f"open-{name}")
        await send(client, name, Deposit(amount=OPENING), f"fund-{name}")
    await send(client, CLOSED, Open(owner=CLOSED), f"open-{CLOSED}")
    await send(client, CLOSED, Close(), f"close-{CLOSED}")


async def caller(client: Client, number: int, stop: asyncio.Event, progress: Progress,
                 confirmed: dict[str, tuple[str, str, Decimal]], refused: list[str]) -> None:
    rng = random.Random(number)
    n = 0
    while not stop.is_set():
        n += 1
        transfer_id = f"c{number}-{n}"
        source = rng.choice(ACCOUNTS)
        roll = rng.random()
        target = GHOST if roll < 0.05 else CLOSED if roll < 0.1 else rng.choice(ACCOUNTS)
        amount = Decimal(rng.randint(1, 80))
        command = SendTransfer(transfer_id=transfer_id, target=target, amount=amount)
        # The transfer id is the correlation id: it names the saga.
        reply = await send(client, source, command, f"send-{transfer_id}", transfer_id)
        progress.replies += 1
        progress.at.append(time.monotonic())
        assert reply.status == "accepted", reply
        last = reply.events[-1]
        if last.type == "TransferSent" and not last.deferred:
            confirmed[transfer_id] = (source, target, amount)
        else:
            assert last.type == "Rejected" and last.deferred, reply
            refused.append(transfer_id)


async def serving_again(progress: Progress, alive: list[WorkerProcess], timeout: float = 60) -> None:
    """Wait until a caller got a reply after this point: the workers decide again.

    A worker that exited on its own (status 70 when it lost the broker: it expects to be
    restarted, as a supervisor would) is started again meanwhile.
    """
    seen = progress.replies
    deadline = time.monotonic() + timeout
    while progress.replies == seen:
        for worker in alive:
            if not worker.running:
                worker.start()
        if time.monotonic() > deadline:
            logs = "\n".join(worker.log_tail() for worker in alive)
            raise AssertionError(f"no reply for {timeout} s; worker logs:\n{logs}")
        await asyncio.sleep(0.05)


def journal(bootstrap: str, app: App) -> list[EventEnvelope]:
    """Every event of the accounts, in topic order."""
    return [avro.decode_as(r.value or b"", EventEnvelope)
            for r in read_topic(bootstrap, f"{app.name}.aggregate.account.events")]


def drain(bootstrap: str, app: App, confirmed: dict[str, tuple[str, str, Decimal]]) -> None:
    """Wait until every confirmed transfer's saga has ended, then for stragglers to land."""
    journal_topic = f"{app.name}.saga.transfer.journal"

    def all_ended() -> bool:
        ended = {entry.saga_id for entry in (avro.decode_as(r.value or b"", SagaJournalEntry)
                                             for r in read_topic(bootstrap, journal_topic))
                 if entry.ended}
        pending = set(confirmed) - ended
        assert not pending, f"{len(pending)} sagas have not ended, e.g. {sorted(pending)[:5]}"
        return True

    assert_eventually(all_ended, timeout=90, interval=1.0)
    # A resend produced just before its saga ended may still be decided: let it land.
    time.sleep(3.0)


def violations(events: list[EventEnvelope], confirmed: dict[str, tuple[str, str, Decimal]]) -> list[str]:
    """Every way the journal breaks the bank invariant; empty when it holds."""
    found: list[str] = []
    by_account: dict[str, dict[int, EventEnvelope]] = defaultdict(dict)
    for event in events:
        # The first record of a version is the one the aggregate folds (core.aggregate.restore).
        by_account[event.aggregate_id].setdefault(event.version, event)
    sent: Counter[str] = Counter()
    received: Counter[str] = Counter()
    refunded: Counter[str] = Counter()
    amounts: dict[str, Decimal] = {}
    total = Decimal(0)
    for aggregate_id, versions in sorted(by_account.items()):
        if sorted(versions) != list(range(1, len(versions) + 1)):
            found.append(f"{aggregate_id}: versions {sorted(versions)} have a gap")
        state = account.initial
        for version in sorted(versions):
            value = load_payload(versions[version].type, versions[version].payload, EVENT_TYPES)
            state = account.fold(value, state)
            if state.balance < 0:
                found.append(f"{aggregate_id}: balance {state.balance} at version {version}")
            match value:
                case TransferSent(transfer_id=tid, amount=amount):
                    sent[tid] += 1
                    amounts[tid] = amount
                case TransferReceived(transfer_id=tid):
                    received[tid] += 1
                case TransferRefunded(transfer_id=tid):
                    refunded[tid] += 1
        total += state.balance
    if total != TOTAL:
        found.append(f"the total is {total}, not {TOTAL}")
    for tid in confirmed:
        if sent[tid] != 1:
            found.append(f"confirmed transfer {tid} is stored as sent {sent[tid]} times")
    for tid in sent:
        if tid not in confirmed:
            found.append(f"transfer {tid} is stored as sent but no caller saw it confirmed")
        if received[tid] and refunded[tid]:
            found.append(f"transfer {tid} was both received and refunded")
        if received[tid] + refunded[tid] != 1:
            found.append(f"transfer {tid} was received {received[tid]} and refunded "
                         f"{refunded[tid]} times")
    for tid in (received | refunded):
        if tid not in sent:
            found.append(f"transfer {tid} was received or refunded but never sent")
    return found
