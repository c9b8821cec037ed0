"""The workflow the replay checker's tests deploy three times: as it ran, edited, and versioned.

``app`` is the code a worker ran (reserve, then charge, then wait for ``ship``);
``reordered`` is the same workflow with its first two steps swapped, which would park every
instance that had passed step 1; ``versioned`` keeps the old order for those instances
under the ``ctx.version`` change the checker suggests (``charge-at-1``) and runs the new
order for new ones. All three are the App named ``TEST_APP_ID``, so they share its topics:
``tidings replay tests.replay_apps:reordered checkout`` checks the edit against what the
worker of ``tests.replay_apps:app`` journaled.
"""

from __future__ import annotations

import os

from tidings import App
from tidings.core.workflow import Attempt, Retry, WorkflowContext

PARTITIONS = 4
ORIGINAL = ("reserve", "charge")
EDITED = ("charge", "reserve")


def _done(name: str) -> object:
    def activity(attempt: Attempt) -> str:
        return name

    return activity


def build(app_id: str, variant: str = "original") -> App:
    """The App named ``app_id`` with ``checkout`` as ``variant`` has it (original, reordered, versioned)."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)

    @app.workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: str) -> list[str]:
        order_of_steps = ORIGINAL
        if variant == "reordered":
            order_of_steps = EDITED
        elif variant == "versioned" and await ctx.version("charge-at-1", 2) >= 2:
            order_of_steps = EDITED
        done = [await ctx.activity(name, Retry.times(3), _done(name), type=str) for name in order_of_steps]
        await ctx.wait_signal("ship")
        done.append(await ctx.activity("ship", Retry.times(3), _done("ship"), type=str))
        return done

    return app


_APP_ID = os.environ.get("TEST_APP_ID", "replay-checks")
app = build(_APP_ID)
reordered = build(_APP_ID, "reordered")
versioned = build(_APP_ID, "versioned")
