"""The App of test_kafka_connection_everywhere: one of each kind of Kafka client a worker builds.

An aggregate (``tally``), a projection over it that signals a workflow (so the worker has a
requester of its own), a workflow that sends the aggregate a command and waits for an event
of it (its replies reader and its events tail), and one that waits for the signal. A worker
subprocess imports ``tests.integration.connection_apps:app``, named by ``TEST_APP_ID``.
"""

from __future__ import annotations

import os
from datetime import timedelta

from pydantic import BaseModel

from tidings import App, Persist, ProjectedEvent, Retry, View, WorkflowContext

PARTITIONS = 2


class Add(BaseModel):
    amount: int


class Added(BaseModel):
    amount: int


def decide(command: Add, state: int) -> Persist[Added]:
    return Persist(Added(amount=command.amount))


def fold(event: Added, state: int) -> int:
    return state + event.amount


def build(app_id: str) -> App:
    app = App(app_id, partitions=PARTITIONS, command_timeout=30)
    tally = app.aggregate("tally", 0, decide, fold, command=Add, event=Added)

    @app.workflow("pay")
    async def pay(ctx: WorkflowContext, who: str) -> int:
        reply = await ctx.send(tally, who, Add(amount=5))
        # Waits for an event of the aggregate: the workflow's events tail reads it.
        added = await ctx.send_with_filter(Retry.command, lambda event: isinstance(event, Added), tally, who,
                                           Add(amount=1))
        points = await ctx.activity("points", Retry.times(3), lambda attempt: 10)
        return int(reply.amount + added.amount + points)

    @app.workflow("waiter")
    async def waiter(ctx: WorkflowContext, _: None) -> bool:
        return bool(await ctx.wait_signal_for("go", timedelta(minutes=2), type=bool))

    async def notify(event: ProjectedEvent, view: View) -> None:
        if isinstance(event.value, Added) and event.value.amount == 99:
            await event.signal(waiter, event.aggregate_id, "go", True)
        view.put(event.aggregate_id, view.get(event.aggregate_id, 0) + 1)

    app.projection("seen", [tally], notify)
    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
