"""The Apps of ``test_hostile_links.py``: the inputs issue 9 added, each with a reader waiting on it.

A worker subprocess imports ``tests.integration.hostile_links_apps:app`` (``TEST_APP_ID``
names it). Its inputs that any producer can write to:

- ``relay``'s replies topic: ``relay`` in mode ``send`` sends ``Ring`` to ``bell``, an
  aggregate of a second App (``{app_id}-mute``) that no worker runs, so the step waits
  until the test itself writes a reply (a forged one is the only one it can get);
- ``till``'s events topic, read by the durable filter wait (``relay`` in mode ``filter``
  sends ``Add(n=1)`` and waits for an ``Added`` with ``n == 7`` under its step's
  correlation id) and by the router of saga ``tally`` (started by ``Added(n=5)``);
- the saga's inbox and replies;
- ``parent``'s inbox (child reports: ``parent`` starts a ``kid`` and awaits it) and
  ``kid``'s inbox (starts naming a parent, signals with a ``signal_id``: a ``kid`` waits
  for the signal ``go``).

``Added``'s validator raises ``ZeroDivisionError`` (not a ``ValueError``, so pydantic lets
it through) on ``n == 13``: user code raising while an event any producer can write is
read.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, field_validator

from tidings import App, Persist, Retry, SagaEvent, Stay, Stop, WorkflowContext
from tidings.shell.kinds.aggregate.handle import AggregateHandle

PARTITIONS = 4
#: The filter step's event: ``Added(n=WANTED)`` under the step's correlation id.
WANTED = 7
#: ``Added(n=STARTS)`` starts a ``tally`` saga.
STARTS = 5


class Add(BaseModel):
    n: int


class Added(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def _unlucky(cls, n: int) -> int:
        if n == 13:
            raise ZeroDivisionError("13 divides nothing")  # user code raising on a payload
        return n


class Ring(BaseModel):
    word: str


class Rung(BaseModel):
    word: str


class Job(BaseModel):
    target: str
    mode: str = "send"  # send (to the mute bell) | filter (to till)


class Tally(BaseModel):
    phase: str = "new"


def till_decide(command: Add, state: int) -> Persist[Added]:
    return Persist(Added(n=command.n))


def till_fold(event: Added, state: int) -> int:
    return state + event.n


def bell_decide(command: Ring, state: int) -> Persist[Rung]:
    return Persist(Rung(word=command.word))


def bell_fold(event: Rung, state: int) -> int:
    return state + 1


def starts_tally(event: SagaEvent) -> bool:
    return isinstance(event.value, Added) and event.value.n == STARTS


def tally_handle(event: Any, state: Tally) -> Tally | None:
    return Tally(phase="done") if state.phase == "new" else None


def tally_enter(state: Tally, recovering: bool) -> tuple[Any, list[Any]]:
    return (Stop(), []) if state.phase == "done" else (Stay(), [])


def wanted(event: object) -> bool:
    return isinstance(event, Added) and event.n == WANTED


def build(app_id: str) -> tuple[App, App]:
    """Return (the App ``app_id`` a worker runs, the mute App ``{app_id}-mute`` nobody runs)."""
    mute = App(f"{app_id}-mute", partitions=PARTITIONS)
    bell: AggregateHandle[Any, Any, int] = mute.aggregate("bell", 0, bell_decide, bell_fold, command=Ring, event=Rung)

    app = App(app_id, partitions=PARTITIONS, command_timeout=120)
    till: AggregateHandle[Any, Any, int] = app.aggregate("till", 0, till_decide, till_fold, command=Add, event=Added)
    app.saga("tally", subscribe=[till], start_on=starts_tally, initial=Tally(), handle=tally_handle,
             on_enter=tally_enter)
    # One attempt for the whole test: a resend would only add commands nobody reads.
    patient = Retry.command.replace(attempt_timeout=timedelta(minutes=5))

    @app.workflow("relay")
    async def relay(ctx: WorkflowContext, job: Job) -> str:
        if job.mode == "filter":
            added = await ctx.send_with_filter(patient, wanted, till, job.target, Add(n=1))
            return f"added {added.n}"
        rung = await ctx.send_with(patient, bell, job.target, Ring(word="hi"))
        return f"rung {rung.word}"

    @app.workflow("kid")
    async def kid(ctx: WorkflowContext, name: str) -> str:
        await ctx.wait_signal("go")
        return f"kid {name}"

    @app.workflow("parent")
    async def parent(ctx: WorkflowContext, name: str) -> str:
        handle = await ctx.start_child(kid, name)
        got = await ctx.await_child(handle)
        return f"parent got {str(got)[:40]}"

    return app, mute


app, mute = build(os.environ.get("TEST_APP_ID", "hostile-links"))
