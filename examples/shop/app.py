"""The shop app: the seeds' ``enrich`` and ``approve`` workflows and a ``cart`` that takes updates.

Run a worker with ``tidings worker examples.shop.app:app``, then drive it from another
terminal (README.md, "Workflows and orchestrations")::

    tidings start examples.shop.app:app enrich order-17 '"ABC"'
    tidings result examples.shop.app:app enrich order-17
    tidings start examples.shop.app:app approve order-18
    tidings signal examples.shop.app:app approve order-18 approval true
    tidings update examples.shop.app:app cart cart-7 add_item '{"sku": "A-1", "qty": 2}' --start '"ann"'
    tidings query examples.shop.app:app cart cart-7 items

Two environment variables, read when the module is imported (by the worker), serve the
demo and the tests: ``SHOP_SCORE_LOG`` names a file where the scoring service notes each
call, and ``SHOP_APPROVAL_WINDOW`` sets ``approve``'s window in seconds.

``build(name)`` declares the workflows on an App of that name: ``app`` is ``build("shop")``,
and a test suite builds the shop under a name of each test's own, so its topics and
consumer group are the test's (the pytest plugin's ``tidings_app``: examples/shop/tests,
docs/testing.md).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from tidings import App, Attempt, Retry, WorkflowContext, WorkflowHandle
from tidings.core.workflow import UpdateDeclaration

#: The seed's ``enrich`` waits five minutes after scoring; three seconds keep the demo (and a
#: try at the command line) short while still leaving time to kill a worker mid-sleep.
ENRICH_NAP = timedelta(seconds=3)

#: How long ``approve`` waits for its "approval" signal. The seed waits two days; a minute
#: leaves time to type ``tidings signal`` by hand. ``$SHOP_APPROVAL_WINDOW`` (seconds)
#: changes it, e.g. for the demo and the tests.
APPROVAL_WINDOW = timedelta(seconds=float(os.environ.get("SHOP_APPROVAL_WINDOW", "60")))

#: Points the scoring service gives per item of an order.
POINTS_PER_ITEM = 10


class Enriched(BaseModel):
    """What ``enrich`` returns: the order's points and the time it finished (from ``ctx.now()``)."""

    model_config = ConfigDict(frozen=True)

    points: int
    at: datetime


def score(attempt: Attempt, order: str) -> int:
    """Score ``order``: the seed's call to an external scoring service (a stand-in here).

    Shows an activity: a plain function that gets the ``Attempt``. It runs at least once (a
    crash after the call and before its result is stored repeats it), so a real service is
    handed ``attempt.idempotency_key`` (``enrich/{order id}/1``, the same for every attempt
    and restart) and answers a repeated key with its first answer. This one gives
    ``POINTS_PER_ITEM`` per item, an item being a character of ``order`` ("ABC" is 30), and,
    when ``$SHOP_SCORE_LOG`` names a file, appends ``{key} {attempt number} {order}`` to it,
    so the demo can count the calls.

    Args:
        attempt: The attempt the worker makes: its idempotency key and number.
        order: The order's items, e.g. "ABC".

    Returns:
        The order's points.
    """
    calls_log = os.environ.get("SHOP_SCORE_LOG")
    if calls_log:
        with open(calls_log, "a", encoding="utf-8") as log:
            log.write(f"{attempt.idempotency_key} {attempt.number} {order}\n")
    return POINTS_PER_ITEM * len(order)


async def enrich_order(ctx: WorkflowContext, order: str) -> Enriched:
    """Score an order, wait ``ENRICH_NAP``, and read the time: the seed's first workflow.

    Shows the three kinds of step a body awaits on ``ctx``, each journaled: an activity
    with a retry policy (its result is stored, so after a crash it is not called again), a
    durable sleep (its due time is stored when first reached, so a restart does not
    postpone it) and ``now()`` (stored, so replay gives the same time).

    Args:
        ctx: The workflow's steps.
        order: The order's items, e.g. "ABC".

    Returns:
        ``Enriched(points, at)``: the score and the stored time after the nap.
    """
    points = await ctx.activity("score", Retry.times(3), lambda attempt: score(attempt, order))
    await ctx.sleep(ENRICH_NAP)
    return Enriched(points=points, at=await ctx.now())


async def approve_order(ctx: WorkflowContext, order: str | None) -> bool:
    """Wait up to ``APPROVAL_WINDOW`` for the signal "approval" (a bool): the seed's ``approve``.

    Shows a timed wait for a signal sent from outside (``tidings signal``,
    ``Client.signal``, a kcat producer). A signal that arrives before the body reaches the
    wait is stored and taken here; the window counts from the stored start of the wait.

    Args:
        ctx: The workflow's steps.
        order: What is being approved; not used by the body (may be null).

    Returns:
        The signal's payload, or False when no approval arrives within the window (as the
        seed's ``defaultArg answer false``).
    """
    answer = await ctx.wait_signal_for("approval", APPROVAL_WINDOW, type=bool)
    return answer if answer is not None else False


class Item(BaseModel):
    """What ``cart``'s update "add_item" carries."""

    model_config = ConfigDict(frozen=True)

    sku: str
    qty: int


def positive(item: Item) -> None:
    """The validator of "add_item": run on arrival, before anything is stored; raising rejects."""
    if item.qty <= 0:
        raise ValueError(f"the quantity of {item.sku} must be positive, got {item.qty}")


#: The updates ``cart`` takes: "add_item" (an ``Item``, checked by ``positive``) and "checkout".
CART_UPDATES = [UpdateDeclaration("add_item", Item, positive), "checkout"]


async def shopping_cart(ctx: WorkflowContext, owner: str) -> list[Item]:
    """A shopping cart that takes updates: each "add_item" is answered with the number of items,
    "checkout" with the items, and ends the cart.

    Shows updates (docs/workflows.md, "Updates"): the body takes them as steps, oldest first,
    and answers each (``call.reply``) once it has what it needs; the caller of
    ``cart.update(...)`` / ``tidings update`` gets that answer once it is journaled. A
    quantity of 0 or less is refused by the validator and journals nothing. Its query "items"
    (docs/workflows.md, "Queries") reads what it holds, journaling nothing.
    """
    items: list[Item] = []
    await ctx.on_query("items", lambda: list(items))
    while True:
        call = await ctx.race([ctx.wait_update("add_item"), ctx.wait_update("checkout")])
        if call.name == "checkout":
            await call.reply(items)
            return items
        items.append(call.payload)
        await call.reply(len(items))


def build(name: str = "shop") -> App:
    """Return an App named ``name`` with the shop's workflows, ``enrich``, ``approve`` and ``cart``.

    Args:
        name: The app's name, the prefix of its topics and its consumer group.
    """
    shop = App(name)
    shop.workflow("enrich")(enrich_order)
    shop.workflow("approve")(approve_order)
    shop.workflow("cart", updates=CART_UPDATES)(shopping_cart)
    return shop


app = build()
#: The handles of ``app``, for the demo, the README's commands and programs of its own.
enrich: WorkflowHandle = app.workflow_handle("enrich")
approve: WorkflowHandle = app.workflow_handle("approve")
cart: WorkflowHandle = app.workflow_handle("cart")
