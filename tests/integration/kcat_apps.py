"""The App the kcat test drives from outside Python: an aggregate, a workflow and a flow stage.

A worker subprocess imports ``tests.integration.kcat_apps:app``; ``TEST_APP_ID`` names it.
A JSON start's outcome record is JSON; ``TEST_JSON_OUTCOMES=1`` makes every outcome record
JSON (``App(json_outcomes=True)``).

- aggregate ``tally``: command ``Add {"amount": n}`` stores ``Added {"amount": n}``;
- workflow ``greet``: input a name, waits for the signal ``approve`` (a bool) and returns
  ``{"greeting": "hello NAME", "approved": ...}``;
- workflow ``echo``: answers one update "echo" with its payload and ends (query ``echoed``);
- workflow ``shout`` and the flow stage ``names``: each JSON string on ``{app}.names``
  starts ``shout`` with id ``shout-{name}``; the outcome goes to ``{app}.shouted``.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from tidings import App, Persist
from tidings.core.workflow import WorkflowContext

PARTITIONS = 4


class Add(BaseModel):
    amount: int


class Added(BaseModel):
    amount: int


class Greeting(BaseModel):
    greeting: str
    approved: bool


def source_topic(app_id: str) -> str:
    return f"{app_id}.names"


def sink_topic(app_id: str) -> str:
    return f"{app_id}.shouted"


def tally_decide(command: Add, state: int) -> Persist[Added]:
    return Persist(Added(amount=command.amount))


def tally_fold(event: Added, state: int) -> int:
    return state + event.amount


def build(app_id: str, json_outcomes: bool = False) -> App:
    """Return the kcat test App named ``app_id``."""
    app = App(app_id, partitions=PARTITIONS, json_outcomes=json_outcomes)
    app.aggregate("tally", 0, tally_decide, tally_fold, command=Add, event=Added)

    @app.workflow("greet")
    async def greet(ctx: WorkflowContext, name: str) -> Greeting:
        approved = await ctx.wait_signal("approve", type=bool)
        return Greeting(greeting=f"hello {name}", approved=approved)

    @app.workflow("echo", updates=["echo"])
    async def echo(ctx: WorkflowContext, _: None) -> str:
        """Answers one update "echo" with its payload, then ends with it (query "echoed": how many)."""
        echoed: list[object] = []
        await ctx.on_query("echoed", lambda: len(echoed))
        call = await ctx.wait_update("echo")
        echoed.append(call.payload)
        await call.reply(call.payload)
        return str(call.payload)

    @app.workflow("shout")
    async def shout(ctx: WorkflowContext, name: str) -> str:
        return name.upper()

    app.workflow_flow("names", source_topic(app_id), "shout", lambda name: f"shout-{name}",
                      sink_topic(app_id), parallelism=4, timeout=60)
    return app


app = (build(os.environ["TEST_APP_ID"], os.environ.get("TEST_JSON_OUTCOMES") == "1")
       if "TEST_APP_ID" in os.environ else None)
