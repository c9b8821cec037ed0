"""The App the console's tests run in worker processes (``tests.integration.console_apps:app``).

The saga test App (``saga_apps``: aggregates ``wallet`` and ``vault``, the ``transfer``
saga) plus what the console must show and act on:

- the workflow ``approval``: an activity ``score``, a wait for the signal ``decision``, an
  activity ``receipt``; so a page shows a step running, a signal taking effect, a cancel;
- the aggregate ``ledger``, whose ``decide`` fails while the file ``closed`` exists in
  ``CONSOLE_STATE_DIR``: a command sent then is dead-lettered (``HandlerFailed``), and the
  same letter sent back once the file is gone is decided (the "fix, then replay" of
  docs/operations.md);
- schedules of ``approval`` (``app.schedules``), to pause and resume.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tidings import App, Persist
from tidings.core.workflow import Retry, WorkflowContext

from tests.integration import saga_apps


class Book(BaseModel):
    entry: str
    amount: int


class Booked(BaseModel):
    entry: str
    amount: int


def build(app_id: str, state_dir: Path | None) -> App:
    """The console test App named ``app_id``; ``state_dir`` holds the ``closed`` switch."""
    app = saga_apps.build(app_id)

    def ledger_decide(command: Book, state: int) -> Persist[Any]:
        if state_dir is not None and (state_dir / "closed").exists():
            raise RuntimeError("the ledger is closed")
        return Persist(Booked(entry=command.entry, amount=command.amount))

    app.aggregate("ledger", 0, ledger_decide, lambda event, state: state + event.amount, command=Book, event=Booked)

    @app.workflow("approval")
    async def approval(ctx: WorkflowContext, order: str) -> str:
        score = await ctx.activity("score", Retry.times(3), lambda attempt: len(order), type=int)
        decision = await ctx.wait_signal("decision", type=str)
        return await ctx.activity("receipt", Retry.times(3), lambda attempt: f"{order}:{decision}:{score}", type=str)

    app.schedules([approval])
    return app


app = (build(os.environ["TEST_APP_ID"], Path(os.environ["CONSOLE_STATE_DIR"]) if "CONSOLE_STATE_DIR" in os.environ else None)
       if "TEST_APP_ID" in os.environ else None)
