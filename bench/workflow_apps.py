"""The workflow App a bench worker runs (SPEC §10's workflow rows).

A worker subprocess imports ``bench.workflow_apps:app``; ``BENCH_WORKFLOW_APP_ID`` names it,
so every run gets fresh topics and a fresh consumer group. The bench builds the same App
in-process with ``build(app_id)`` to talk to it.

Workflows:

- ``one-activity``: one sync activity (``n + 1``), then returns;
- ``ten-steps``: ten sync activities in a row, each adding one;
- ``slow-activity``: one sync activity that sleeps ``seconds`` in its thread, so a SIGKILL
  lands while instances are in flight;
- ``one-send``: one ``ctx.send`` of ``Add`` to the ``counter`` aggregate (hosted by the same
  worker), ``counter-{n % 100}``, then returns the reply's amount.

With ``BENCH_WORKFLOW_FLOW=1`` (the bench's flow row) the app also deploys the flow
``one-activity-flow``: ``{app}.flow-source`` (JSON ints, made by the bench before the worker
starts) through ``one-activity`` (id ``flow-{n}``) to ``{app}.flow-sink``, parallelism
``FLOW_PARALLELISM``. ``BENCH_PROFILE=PATH`` profiles the worker's main thread as
``bench.apps`` does.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from tidings import App, Persist
from tidings.core.workflow import Attempt, Retry, WorkflowContext

PARTITIONS = 4
STEPS = 10
COUNTERS = 100
FLOW_PARALLELISM = 64


def flow_source(app_id: str) -> str:
    return f"{app_id}.flow-source"


def flow_sink(app_id: str) -> str:
    return f"{app_id}.flow-sink"


class Add(BaseModel):
    amount: int


class Added(BaseModel):
    amount: int


def _decide(command: Add, total: int) -> Persist[Added]:
    return Persist(Added(amount=command.amount))


def _fold(event: Added, total: int) -> int:
    return total + event.amount


def _note(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def bodies_twice(path: str) -> tuple[int, int]:
    """(bodies that ran to the end twice or more, bodies started twice or more) in ``path``."""
    from collections import Counter

    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        return 0, 0
    counts = Counter(lines)
    ended = sum(1 for line, n in counts.items() if line.startswith("E ") and n > 1)
    started = sum(1 for line, n in counts.items() if line.startswith("S ") and n > 1)
    return ended, started


def build(app_id: str, *, flow: bool = False) -> App:
    """Return the workflow bench App named ``app_id``; with ``flow``, with its flow stage."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=120)

    @app.workflow("one-activity")
    async def one_activity(ctx: WorkflowContext, n: int) -> int:
        return await ctx.activity("inc", Retry.times(3), lambda a: n + 1, type=int)

    @app.workflow("ten-steps")
    async def ten_steps(ctx: WorkflowContext, n: int) -> int:
        total = n
        for step in range(STEPS):
            total = await ctx.activity(f"step-{step}", Retry.times(3), lambda a, t=total: t + 1, type=int)
        return total

    bodies = os.environ.get("BENCH_WORKFLOW_BODIES")

    def nap(attempt: Attempt, seconds: float) -> str:
        # One line per body start and end, appended with O_APPEND (atomic for a short line, and
        # kept across a SIGKILL), so the bench counts the bodies that ran twice (issue 20).
        if bodies:
            _note(bodies, f"S {attempt.idempotency_key}\n")
        time.sleep(seconds)
        if bodies:
            _note(bodies, f"E {attempt.idempotency_key}\n")
        return "done"

    @app.workflow("slow-activity")
    async def slow_activity(ctx: WorkflowContext, seconds: float) -> str:
        return await ctx.activity("nap", Retry.times(3), lambda a: nap(a, seconds), type=str)

    counters = app.aggregate("counter", 0, _decide, _fold, command=Add, event=Added)

    @app.workflow("one-send")
    async def one_send(ctx: WorkflowContext, n: int) -> int:
        reply = await ctx.send(counters, f"counter-{n % COUNTERS}", Add(amount=1))
        return int(reply.amount)

    if flow:
        app.workflow_flow("one-activity-flow", flow_source(app_id), "one-activity", lambda n: f"flow-{n}",
                          flow_sink(app_id), FLOW_PARALLELISM, 300)
    return app


app = build(os.environ.get("BENCH_WORKFLOW_APP_ID", "bench-workflows"),
            flow=os.environ.get("BENCH_WORKFLOW_FLOW") == "1")
if os.environ.get("BENCH_PROFILE"):
    from .apps import _profile

    _profile(os.environ["BENCH_PROFILE"])
