"""The App of the child-workflow tests: parents of one workflow definition, children of another.

A worker subprocess imports ``tests.integration.child_apps:app``; ``TEST_APP_ID`` names it,
``TEST_CALLS_DIR`` is where the child's activity records its calls (so a test counts
children across SIGKILLs), and ``TEST_HOST_CHILDREN=0`` builds the App without hosting
the child workflow ``points``: the parents still start it (by its definition), so a
worker of that App produces a child's start that nobody acknowledges until a full worker
runs; ``TEST_HOST_PARENTS=0`` hosts only the child workflow. That is how a test stops a
parent between the child's start and its acknowledgement.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from tidings import App
from tidings.core.workflow import Attempt, Retry, WorkflowContext, define_workflow
from tidings.errors import WorkflowStepFailed

from .workflow_apps import Calls

PARTITIONS = 4


def build(app_id: str, calls_dir: Path, *, host_children: bool = True, host_parents: bool = True) -> App:
    """Return the child-workflow test App named ``app_id``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    calls = Calls(calls_dir)

    def counted(attempt: Attempt, order: str) -> int:
        calls.record("points", attempt, order)
        return len(order)

    async def points(ctx: WorkflowContext, order: str) -> int:
        """The child: counts its call; ``wait-*`` waits for signal "go", ``boom*`` faults."""
        n = await ctx.activity("points", Retry.times(3), lambda a: counted(a, order), type=int)
        if order.startswith("wait"):
            await ctx.wait_signal("go")
        if order.startswith("boom"):
            raise RuntimeError(f"no points for {order}")
        return n

    child: Any = app.workflow("points")(points) if host_children else define_workflow("points", points)
    if not host_parents:
        return app

    @app.workflow("parent")
    async def parent(ctx: WorkflowContext, order: str) -> list[Any]:
        """The seed's parent: a detached child, then a child it waits for."""
        detached = await ctx.start_child(child, f"wait-{order}")
        again = await ctx.child(child, f"{order}-again")
        return [detached.id, again]

    @app.workflow("later")
    async def later(ctx: WorkflowContext, order: str) -> int:
        """Starts a child, sleeps past its end, then awaits it."""
        handle = await ctx.start_child(child, order)
        await ctx.sleep(timedelta(seconds=2))
        return int(await ctx.await_child(handle))

    changed = os.environ.get("TEST_PARENT_VARIANT") == "changed"

    @app.workflow("awaiting")
    async def awaiting(ctx: WorkflowContext, order: str) -> int:
        """Waits for a child that waits for a signal: cancelled with this one.

        With ``TEST_PARENT_VARIANT=changed`` a sleep comes first: a running instance no
        longer matches its journal and parks.
        """
        if changed:
            await ctx.sleep(timedelta(seconds=1))
        return int(await ctx.child(child, f"wait-{order}"))

    @app.workflow("detached")
    async def detached(ctx: WorkflowContext, order: str) -> str:
        """Starts a child and never awaits it; waits for a signal nobody sends."""
        handle = await ctx.start_child(child, f"wait-{order}")
        await ctx.wait_signal("never")
        return handle.id

    @app.workflow("careful")
    async def careful(ctx: WorkflowContext, order: str) -> str:
        """Catches its child's fault."""
        try:
            await ctx.child(child, f"boom-{order}")
        except WorkflowStepFailed as failed:
            return str(failed.error)
        return "no fault"

    return app


app = build(
    os.environ.get("TEST_APP_ID", "children"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
    host_children=os.environ.get("TEST_HOST_CHILDREN", "1") != "0",
    host_parents=os.environ.get("TEST_HOST_PARENTS", "1") != "0",
)
