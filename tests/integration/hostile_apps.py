"""The App the hostile-input test runs in a worker process: one definition of every kind.

A worker subprocess imports ``tests.integration.hostile_apps:app``; ``TEST_APP_ID`` names it
and ``TEST_CALLS_DIR`` is where the projection notes each event it applies (one line per
application), so the test can count applications from outside the worker. Tests build the
same App in-process with ``build(app_id, calls_dir)`` to learn its topics.

Each kind has user code that raises on some value any producer can send, the way the bank's
``fold`` raises ``decimal.Overflow`` on ``Deposit(amount="1e999999999")``:

- aggregate ``vault``: ``fold`` overflows on a huge ``Deposit``; ``decide`` divides by zero
  on ``Share(parts=0)``;
- projection ``balances`` over ``vault``: the handler raises on ``Deposited(amount=13)``;
- aggregate ``ledger``: ``decide`` raises on step ``decide-boom``, ``fold`` on ``fold-boom``;
- orchestration ``track`` over ``ledger``: ``key_of`` raises on step ``explode``, the
  orchestration on step ``boom``; step ``go`` finishes an instance with ``Tracked(order)``;
- workflow ``greet``: validating its input overflows on ``times="1e999999999"``; the body
  raises on the name ``raise`` (that instance ends faulted).

The projection and the orchestration read different aggregates, so a record sent to an
events topic has exactly one reader that can dead-letter it.
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, field_validator

from tidings import App, Defer, Persist, ProjectedEvent, View, WorkflowContext
from tidings.coordination import Coordination, event, orchestrate, orchestration

PARTITIONS = 4
#: The projection's notes: one JSON line ``[aggregate_id, version]`` per applied event.
PROJECTED_FILE = "projected.jsonl"


# -- aggregate "vault" and projection "balances" ---------------------------------------------


class Deposit(BaseModel):
    amount: Decimal


class Share(BaseModel):
    """Asks what each of ``parts`` shares of the balance is (a reply only)."""

    parts: int


class Deposited(BaseModel):
    amount: Decimal


class Shared(BaseModel):
    each: Decimal


def vault_decide(command: Deposit | Share, state: Decimal) -> Persist[Deposited] | Defer[Shared]:
    match command:
        case Deposit(amount=amount):
            return Persist(Deposited(amount=amount))
        case Share(parts=parts):
            # Decimal division by zero raises (DivisionByZero or InvalidOperation): a bug in
            # user code that any producer can trigger.
            return Defer(Shared(each=state / parts))
    raise TypeError(command)


def vault_fold(event_: Deposited | Shared, state: Decimal) -> Decimal:
    # Decimal("1e999999999") passes validation; adding it overflows the default context
    # (decimal.Overflow), exactly as the bank's fold does.
    return state + event_.amount if isinstance(event_, Deposited) else state


def note_projection(calls_dir: Path) -> Any:
    """Return the projection handler: it notes every event it applies in ``calls_dir``."""

    def project(event_: ProjectedEvent, view: View) -> None:
        if isinstance(event_.value, Deposited) and event_.value.amount == 13:
            raise ValueError("13 is unlucky")  # a handler bug: this event is dead-lettered
        calls_dir.mkdir(parents=True, exist_ok=True)
        with open(calls_dir / PROJECTED_FILE, "a", encoding="utf-8") as notes:
            notes.write(json.dumps([event_.aggregate_id, event_.version]) + "\n")
        total = view.get(event_.aggregate_id, "0")
        view.put(event_.aggregate_id, str(Decimal(total) + event_.value.amount))

    return project


def projected(calls_dir: Path) -> list[tuple[str, int]]:
    """Return the ``(aggregate_id, version)`` of every application the projection noted."""
    path = calls_dir / PROJECTED_FILE
    if not path.exists():
        return []
    # The worker may be writing the last line right now: only complete lines count.
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    return [(line[0], line[1]) for line in map(json.loads, lines)]


# -- aggregate "ledger" and orchestration "track" -----------------------------------------------


class Note(BaseModel):
    order: str
    step: str


class Noted(BaseModel):
    order: str
    step: str


class Tracked(BaseModel):
    order: str


def ledger_decide(command: Note, state: int) -> Persist[Noted]:
    if command.step == "decide-boom":
        raise RuntimeError("decide cannot take this step")
    return Persist(Noted(order=command.order, step=command.step))


def ledger_fold(event_: Noted, state: int) -> int:
    if event_.step == "fold-boom":
        raise RuntimeError("fold cannot take this step")
    return state + 1


def order_of(source: Any) -> str | None:
    """``key_of`` of "track": the order of a ``Noted`` event; raises on step ``explode``."""
    if source.value.step == "explode":
        raise ValueError("no key for this one")
    return str(source.value.order) or None


def _noted(step: str) -> Coordination[Any, Any]:
    def choose(value: Noted) -> bool | None:
        if value.step == "boom":
            raise RuntimeError("the orchestration cannot take this")
        return True if value.step == step else None

    return event(choose)


@orchestration
def track(order: str):  # noqa: ANN201 - an orchestration
    yield orchestrate(_noted("go"))
    return Tracked(order=order)


# -- workflow "greet" -----------------------------------------------------------------------


class Greeting(BaseModel):
    name: str
    times: Decimal = Decimal(1)

    @field_validator("times")
    @classmethod
    def _scaled(cls, times: Decimal) -> Decimal:
        # Overflows (decimal.Overflow, not a ValueError, so pydantic lets it through) on
        # times="1e999999999": user code raising while the input is deserialised.
        return times * 1000


def build(app_id: str, calls_dir: Path) -> App:
    """Return the hostile-input App named ``app_id``; its projection notes under ``calls_dir``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    vault = app.aggregate("vault", Decimal(0), vault_decide, vault_fold,
                          command=Deposit | Share, event=Deposited | Shared)
    app.projection("balances", [vault], note_projection(calls_dir))
    ledger = app.aggregate("ledger", 0, ledger_decide, ledger_fold, command=Note, event=Noted)
    app.orchestration("track", [ledger], order_of, track)

    @app.workflow("greet")
    async def greet(ctx: WorkflowContext, greeting: Greeting) -> str:
        if greeting.name == "raise":
            raise ValueError("the body refuses this name")  # ends this instance, faulted
        return f"hello {greeting.name}"

    return app


app = build(
    os.environ.get("TEST_APP_ID", "hostile"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
)
