"""The App of the flow stage's hostile-input test: a flow reading JSON and Avro elements.

``TEST_APP_ID`` names it. The stage reads ``{app}.elements`` (made by the test, as any
producer's topic would be) with ``SCHEMA`` as its ``source_schema``, starts ``double`` with
the id ``id_of`` gives and writes outcomes to ``{app}.doubled``. ``Element.mode`` makes
``id_of`` misbehave on purpose, so the test can send records whose id cannot be made.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, Field

from tidings import App
from tidings.core.workflow import Retry, WorkflowContext

PARTITIONS = 4
PARALLELISM = 16
#: Every element's workflow is one quick activity: far below it when the worker is healthy.
TIMEOUT_S = 60.0
#: Not in the registry of any producer: the stage reads both Avro framings with it.
SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Element", "namespace": "hostile.flow",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "n", "type": "int"},
        {"name": "mode", "type": "string", "default": "ok"},
        {"name": "note", "type": "string", "default": ""},
    ],
}


class Element(BaseModel):
    id: str
    n: int = Field(ge=0)  # a negative n is an element the workflow's input type rejects
    mode: str = "ok"
    note: str = ""


def source_topic(app_id: str) -> str:
    return f"{app_id}.elements"


def sink_topic(app_id: str) -> str:
    return f"{app_id}.doubled"


class Unprintable(Exception):
    """An exception whose message cannot even be rendered."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def id_of(element: Element) -> Any:
    """``h-{id}``, unless ``mode`` asks for one of the ways user code gets ids wrong."""
    if element.mode == "raise":
        raise RuntimeError(f"id_of cannot place element {element.id}")
    if element.mode == "unprintable":
        raise Unprintable()
    if element.mode == "int":
        return element.n
    if element.mode == "empty":
        return ""
    if element.mode == "long":
        return "é" * 200  # 200 characters, 400 bytes of UTF-8: over the 255-byte limit
    return f"h-{element.id}"


def build(app_id: str) -> App:
    """Return the hostile flow App named ``app_id``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)

    @app.workflow("double")
    async def double(ctx: WorkflowContext, element: Element) -> int:
        return await ctx.activity("double", Retry.none, lambda a: element.n * 2, type=int)

    app.workflow_flow("hostile", source_topic(app_id), "double", id_of, sink_topic(app_id),
                      PARALLELISM, TIMEOUT_S, source_schema=SCHEMA)
    return app


app = build(os.environ.get("TEST_APP_ID", "flow-hostile"))
