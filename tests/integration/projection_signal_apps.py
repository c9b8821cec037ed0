"""An App whose projection signals a workflow, as the seed's "transfer-finished" example.

A ``transfer`` aggregate, keyed by the id of the workflow that waits on it, stores
``TransferFinished``; the ``notify`` projection signals ``transfer-finished`` to the
``transfer_and_wait`` instance with that id, catching ``WorkflowEnded`` and
``WorkflowNotFound``. Every handler run appends ``{outcome} {aggregate_id}@{version}`` to
``{TEST_CALLS_DIR}/notify.log`` (fsynced), so a test sees each run, also a repeated one.

A worker subprocess imports ``tests.integration.projection_signal_apps:app``, named by
``TEST_APP_ID``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from tidings import App, Persist, ProjectedEvent, View, WorkflowContext, WorkflowEnded, WorkflowNotFound

PARTITIONS = 4


class Finish(BaseModel):
    delivered: bool


class Nudge(BaseModel):
    """Stores an event the projection ignores: it makes a partition show up to the projection."""


class TransferFinished(BaseModel):
    delivered: bool


class Nudged(BaseModel):
    pass


def decide(command: Finish | Nudge, state: int) -> Persist[TransferFinished | Nudged]:
    if isinstance(command, Finish):
        return Persist(TransferFinished(delivered=command.delivered))
    return Persist(Nudged())


def fold(event: TransferFinished | Nudged, state: int) -> int:
    return state + 1


def handler_log(calls_dir: Path) -> Path:
    return calls_dir / "notify.log"


def build(app_id: str, calls_dir: Path) -> App:
    """Return the App named ``app_id``; the projection logs under ``calls_dir``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    transfers = app.aggregate("transfer", 0, decide, fold, command=Finish | Nudge, event=TransferFinished | Nudged)

    @app.workflow("transfer_and_wait")
    async def transfer_and_wait(ctx: WorkflowContext, mode: str) -> bool:
        delivered = await ctx.wait_signal_for("transfer-finished", timedelta(minutes=10), type=bool)
        if mode == "linger":
            # Still running when the test handles the event again: a repeated signal must
            # reach a live instance to show that it stores nothing.
            await ctx.wait_signal("close")
        return bool(delivered)

    async def notify(event: ProjectedEvent, view: View) -> None:
        if not isinstance(event.value, TransferFinished):
            return
        try:
            await event.signal(transfer_and_wait, event.aggregate_id, "transfer-finished", event.value.delivered)
            outcome = "signalled"
        except WorkflowEnded:
            outcome = "ended"  # it stopped waiting: nothing to tell it, the projection goes on
        except WorkflowNotFound:
            outcome = "not_found"
        view.put(event.aggregate_id, outcome)
        calls_dir.mkdir(parents=True, exist_ok=True)
        with open(handler_log(calls_dir), "a", encoding="utf-8") as log:
            log.write(f"{outcome} {event.aggregate_id}@{event.version}\n")
            log.flush()
            os.fsync(log.fileno())

    app.projection("notify", [transfers], notify)
    return app


app = build(
    os.environ.get("TEST_APP_ID", "projection-signals"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
)
