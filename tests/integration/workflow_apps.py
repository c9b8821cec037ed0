"""The workflow App the integration and chaos tests run in worker processes.

A worker subprocess imports ``tests.integration.workflow_apps:app``; ``TEST_APP_ID`` names
it and ``TEST_CALLS_DIR`` is where activities record their calls (one line per call, in a
file per activity), so a test can count side effects across SIGKILLs. Tests build the same
App in-process with ``build(app_id, calls_dir)`` to talk to it.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tidings import App
from tidings.core.workflow import Attempt, Backoff, ErrorKind, Retry, UpdateDeclaration, WorkflowContext, subroutine
from tidings.errors import WorkflowEnded, WorkflowNotFound, WorkflowStepFailed

PARTITIONS = 4
#: The seeds' five minutes, one minute and two days, scaled down so tests take seconds.
SLEEP = timedelta(seconds=2)
RACE_LIMIT = timedelta(seconds=3)
APPROVAL_WINDOW = timedelta(seconds=4)


class Calls:
    """Appends one line per activity call to ``{dir}/{activity}.log``; counts them back."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def record(self, activity: str, attempt: Attempt, detail: Any = "") -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / f"{activity}.log", "a", encoding="utf-8") as log:
            log.write(f"{attempt.idempotency_key} {attempt.number} {detail}\n")
            log.flush()
            os.fsync(log.fileno())

    def lines(self, activity: str) -> list[str]:
        path = self.directory / f"{activity}.log"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def keys(self, activity: str) -> list[str]:
        return [line.split(" ", 1)[0] for line in self.lines(activity)]


def build(app_id: str, calls_dir: Path, *, without_collector: bool = False) -> App:
    """Return the workflow test App named ``app_id``, recording calls under ``calls_dir``.

    ``without_collector``: a worker that does not host ``collector`` (its topics exist, from
    the full App): a signal to it waits unanswered, so a test can kill the sender meanwhile.
    """
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    calls = Calls(calls_dir)

    def score(attempt: Attempt, order: str) -> int:
        calls.record("score", attempt, order)
        return 42

    def charge(attempt: Attempt, amount: int) -> str:
        calls.record("charge", attempt, amount)
        return "paid"

    @app.workflow("enrich")
    async def enrich(ctx: WorkflowContext, order: str) -> tuple[int, datetime]:
        points = await ctx.activity("score", Retry.times(3), lambda a: score(a, order))
        await ctx.sleep(SLEEP)
        return points, await ctx.now()

    @app.workflow("approve")
    async def approve(ctx: WorkflowContext, _: None) -> bool:
        answer = await ctx.wait_signal_for("approval", APPROVAL_WINDOW, type=bool)
        return answer if answer is not None else False

    @app.workflow("both")
    async def both(ctx: WorkflowContext, _: None) -> tuple[list[int], str | None]:
        async def charged(ctx: WorkflowContext) -> str | None:
            return await ctx.activity("charge", Retry.none, lambda a: charge(a, 30))

        async def timed_out(ctx: WorkflowContext) -> str | None:
            await ctx.sleep(RACE_LIMIT)
            return None

        points = await ctx.all(
            [ctx.activity("score", Retry.times(3), lambda a, o=o: score(a, o)) for o in ["A", "B", "C"]]
        )
        return points, await ctx.race([charged(ctx), timed_out(ctx)])

    @app.workflow("points-and-receipt")
    async def points_and_receipt(ctx: WorkflowContext, _: None) -> tuple[int, str]:
        return await ctx.both(
            ctx.activity("score", Retry.times(3), lambda a: score(a, "A")),
            ctx.activity("charge", Retry.none, lambda a: charge(a, 30)),
        )

    def is_shipped(attempt: Attempt) -> bool:
        calls.record("check", attempt)
        return len(calls.lines("check")) >= 3

    @subroutine
    async def wait_until_shipped(ctx: WorkflowContext, checks: int) -> int:
        if await ctx.activity("check", Retry.times(3), is_shipped):
            return checks
        await ctx.sleep(timedelta(milliseconds=200))
        return await wait_until_shipped(ctx, checks + 1)

    @app.workflow("shipping")
    async def shipping(ctx: WorkflowContext, _: None) -> int:
        return await wait_until_shipped(ctx, 0)

    def slow_charge(attempt: Attempt, amount: int) -> str:
        # Watches its cancellation so a cancel ends the attempt early, charging nothing. Every
        # test of it cancels; the wait is long so that a busy CI machine delivering the cancel
        # late cannot make it charge first.
        if attempt.cancellation.wait(30.0):
            raise RuntimeError("cancelled before charging")
        calls.record("charge", attempt, amount)
        return "paid"

    @app.workflow("booking")
    async def booking(ctx: WorkflowContext, _: None) -> str:
        try:
            return await ctx.activity("charge", Retry.forever(timedelta(hours=1)), lambda a: slow_charge(a, 30))
        except WorkflowStepFailed as failed:
            if failed.error.kind is ErrorKind.CANCELLED:
                await ctx.activity("refund", Retry.none, lambda a: charge(a, -30))
            raise

    @app.workflow("faulty")
    async def faulty(ctx: WorkflowContext, reason: str) -> None:
        raise ValueError(reason)

    def declined(attempt: Attempt, card: str) -> str:
        calls.record("declined", attempt, card)
        try:
            raise KeyError(card)
        except KeyError as missing:
            raise RuntimeError("the charge failed") from ValueError(f"card {card} declined: {missing}")

    @app.workflow("caused")
    async def caused(ctx: WorkflowContext, catch: bool) -> list[str]:
        """An activity raises ``X from Y``: faults with its causes, or returns them when caught."""
        try:
            await ctx.activity("declined", Retry.none, lambda a: declined(a, "4242"))
        except WorkflowStepFailed as failed:
            if not catch:
                raise
            return [str(cause) for cause in failed.error.causes]
        return []

    # -- for the chaos tests ------------------------------------------------------------

    def slow_side_effect(attempt: Attempt, seconds: float) -> str:
        calls.record("slow", attempt, "begin")
        time.sleep(seconds)
        calls.record("slow", attempt, "end")
        return "done"

    def quick_side_effect(attempt: Attempt) -> int:
        calls.record("quick", attempt)
        return 1

    @app.workflow("steps")
    async def steps(ctx: WorkflowContext, seconds: float) -> list[str]:
        """A completed activity, then a slow one, then another: crash during the slow one."""
        first = await ctx.activity("quick", Retry.times(3), quick_side_effect)
        second = await ctx.activity("slow", Retry.times(3), lambda a: slow_side_effect(a, seconds))
        third = await ctx.activity("quick", Retry.times(3), quick_side_effect)
        return [str(first), second, str(third)]

    @app.workflow("napper")
    async def napper(ctx: WorkflowContext, seconds: float) -> list[str]:
        """Sleeps ``seconds``; returns when it started the sleep and when it woke."""
        before = await ctx.now()
        await ctx.sleep(timedelta(seconds=seconds))
        after = await ctx.now()
        return [before.isoformat(), after.isoformat()]

    async def collector(ctx: WorkflowContext, count: int) -> list[int]:
        """Collects ``count`` signals named "item", in arrival order."""
        items = []
        for _ in range(count):
            items.append(await ctx.wait_signal("item", type=int))
        return items

    if not without_collector:
        app.workflow("collector")(collector)

    @app.workflow("signaller")
    async def signaller(ctx: WorkflowContext, target: list[str]) -> str:
        """Signals "item" 7 to instance ``target[1]`` of workflow ``target[0]`` from the body."""
        try:
            await ctx.signal(target[0], target[1], "item", 7)
        except WorkflowNotFound as missing:
            return f"not found: {missing}"
        except WorkflowEnded as ended:
            return f"ended: {ended}"
        except WorkflowStepFailed as failed:
            return f"failed: {failed.error.message}"
        return "sent"

    @app.workflow("one-activity")
    async def one_activity(ctx: WorkflowContext, n: int) -> int:
        return await ctx.activity("inc", Retry.times(3), lambda a: n + 1)

    _recovery_workflows(app, calls)
    _cache_and_rebalance_workflows(app, calls)
    _update_workflows(app, calls)
    _query_workflows(app)
    _continue_workflows(app, calls)
    return app


def _continue_workflows(app: App, calls: Calls) -> None:
    """``looper`` and ``bad-continue`` of ``tests/integration/test_workflow_continue_as_new.py``."""

    def tick(attempt: Attempt, n: int) -> int:
        calls.record("tick", attempt, n)
        return n

    @app.workflow("looper")
    async def looper(ctx: WorkflowContext, state: list[int]) -> list[int]:
        """``[n, limit, expect]``: one activity per run and continue as new until run ``limit``,
        then take ``expect`` "add" signals (sent at any time: each run carries them on)."""
        n, limit, expect = state
        if n < limit:
            await ctx.activity("tick", Retry.times(3), lambda a: tick(a, n))
            await ctx.continue_as_new([n + 1, limit, expect])
        return [n, *[await ctx.wait_signal("add", type=int) for _ in range(expect)]]

    @app.workflow("bad-continue")
    async def bad_continue(ctx: WorkflowContext, n: int) -> int:
        """Continues with an input that is no int: faults, with the reason."""
        await ctx.continue_as_new({"not": "an int"})
        return n


def _update_workflows(app: App, calls: Calls) -> None:
    """``cart`` of ``tests/integration/test_workflow_updates.py``: updates answered by the body."""

    def not_negative(qty: int) -> None:
        if qty < 0:
            raise ValueError("the quantity must not be negative")

    def gated(attempt: Attempt, qty: int) -> int:
        # Blocks until the test creates gate-{qty}: the update is accepted and not yet answered.
        calls.record("gated", attempt, qty)
        gate = calls.directory / f"gate-{qty}"
        deadline = time.monotonic() + 120
        while not gate.exists() and not attempt.cancellation.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        return qty * 10

    @app.workflow("cart", updates=[UpdateDeclaration("add_item", int, not_negative), "close"])
    async def cart(ctx: WorkflowContext, delay: float) -> list[int]:
        """Sleeps ``delay`` s (updates sent meanwhile are stored), then adds items until "close".

        An item of 100 or more is priced by an activity that waits for its gate file; 13
        raises in the handler (the instance faults); 99 is failed by the body."""
        await ctx.sleep(timedelta(seconds=delay))
        items: list[int] = []
        while True:
            call = await ctx.race([ctx.wait_update("add_item"), ctx.wait_update("close")])
            if call.name == "close":
                await call.reply(items)
                return items
            qty = call.payload
            if qty == 13:
                raise RuntimeError("13 is unlucky")
            if qty == 99:
                await call.fail("99 is out of stock")
                continue
            if qty >= 100:
                qty = await ctx.activity("gated", Retry.times(3), lambda a, q=qty: gated(a, q))
            items.append(qty)
            await call.reply(len(items))


def _query_workflows(app: App) -> None:
    """``ledger`` of ``tests/integration/test_workflow_queries.py``: state read by query handlers."""

    @app.workflow("ledger")
    async def ledger(ctx: WorkflowContext, opening: int) -> int:
        """Posts the amounts signalled as "post" until one is 0, then ends with the balance.

        Its queries: ``balance``, ``entries``, ``entry(i)``; ``broken`` raises, ``spin`` loops,
        ``huge`` answers more than a record holds."""
        balance = opening
        entries: list[int] = []

        def spin() -> None:
            while True:
                pass

        await ctx.on_query("balance", lambda: balance)
        await ctx.on_query("entries", lambda: list(entries))
        await ctx.on_query("entry", lambda i: entries[i])
        await ctx.on_query("broken", lambda: {}["missing"])
        await ctx.on_query("spin", spin)
        await ctx.on_query("huge", lambda: "x" * 600_000)
        while True:
            amount = await ctx.wait_signal("post", type=int)
            if amount == 0:
                return balance
            await ctx.sleep(timedelta(milliseconds=10))  # a step between posts: a replay walks it
            entries.append(amount)
            balance += amount


def _recovery_workflows(app: App, calls: Calls) -> None:
    """Workflows of ``tests/chaos/test_workflow_recovery.py``.

    ``WORKFLOW_VARIANT`` (read when the App is built) selects the body of "evolving":
    ``original``, ``inserted`` (a step inserted before a running instance's position) or
    ``versioned`` (a step added behind ``ctx.version``).
    """
    variant = os.environ.get("WORKFLOW_VARIANT", "original")

    def noted(attempt: Attempt, activity: str, detail: Any) -> Any:
        calls.record(activity, attempt, detail)
        return detail

    @app.workflow("racer")
    async def racer(ctx: WorkflowContext, seconds: float) -> str:
        """Races a sleep against signal "go"; notes the winner, then waits for "finish"."""

        async def slept(ctx: WorkflowContext) -> str:
            await ctx.sleep(timedelta(seconds=seconds))
            return "sleep"

        async def signalled(ctx: WorkflowContext) -> str:
            return f"signal {await ctx.wait_signal('go', type=int)}"

        winner = await ctx.race([slept(ctx), signalled(ctx)])
        await ctx.activity("winner", Retry.times(3), lambda a: noted(a, "winner", winner), type=str)
        await ctx.wait_signal("finish", type=bool)
        return winner

    @app.workflow("evolving")
    async def evolving(ctx: WorkflowContext, _: None) -> list[int]:
        if variant == "inserted":
            await ctx.now()  # inserted before the position of instances already running
        first = await ctx.activity("evolve", Retry.times(3), lambda a: noted(a, "evolve", 1), type=int)
        version = 1
        if variant == "versioned":
            version = await ctx.version("extra-step", 2)
            if version >= 2:
                await ctx.activity("extra", Retry.times(3), lambda a: noted(a, "extra", 1), type=int)
        last = await ctx.wait_signal("next", type=int)
        return [version, first, last]

    def tick(attempt: Attempt, n: int) -> int:
        calls.record("tick", attempt, n)
        time.sleep(0.02)
        return n

    @app.workflow("long-loop")
    async def long_loop(ctx: WorkflowContext, steps: int) -> list[int]:
        """``steps`` steps: ``now()``, and every 100th an activity (a round trip, so a kill lands mid-way)."""
        done = total = 0
        for n in range(steps):
            if n % 100 == 99:
                total += await ctx.activity("tick", Retry.times(3), lambda a, n=n: tick(a, n), type=int)
            else:
                await ctx.now()
            done += 1
        return [done, total]

    @app.workflow("forgiving")
    async def forgiving(ctx: WorkflowContext, _: None) -> str:
        """Catches its cancellation, cleans up and returns."""
        try:
            await ctx.wait_signal("never", type=bool)
        except WorkflowStepFailed as failed:
            if failed.error.kind is not ErrorKind.CANCELLED:
                raise
            await ctx.activity("cleanup", Retry.none, lambda a: noted(a, "cleanup", 1), type=int)
            return "cleaned up"
        return "signalled"

    def always_failing(attempt: Attempt) -> int:
        calls.record("failing", attempt, f"{time.time():.3f}")
        raise RuntimeError("always fails")

    @app.workflow("stubborn")
    async def stubborn(ctx: WorkflowContext, seconds: float) -> int:
        """An activity that always fails, retried every 0.3 s until ``seconds`` after its start."""
        every = timedelta(milliseconds=300)
        policy = Retry.forever(timedelta(seconds=seconds)).replace(backoff=Backoff(every, 1.0, every))
        return await ctx.activity("failing", policy, always_failing)


#: The cache of "evicted": far fewer instances than a test keeps waiting at once.
EVICTED_CACHE = 5
#: The sleep of "moved" between its signal and its second activity.
MOVED_NAP = timedelta(milliseconds=500)
#: How long the second activity of "moved" takes when ``n % 3 == 1`` (a kill lands in it).
MOVED_SLOW = 5.0


def _cache_and_rebalance_workflows(app: App, calls: Calls) -> None:
    """Workflows of ``tests/chaos/test_workflow_cache_and_rebalance.py``.

    Both take a number ``n``, run an activity giving ``100 * n``, wait for signal "go" with
    an int, then run a second activity giving the sum of the two, and return all three.
    Their bodies note every entry in ``{dir}/{workflow}-entered.log`` (``n`` and the worker's
    pid), outside any activity: a body runs again from its top whenever its instance is
    rebuilt by replay (after eviction from the cache, or on a worker that took its partition
    over), so these lines count rebuilds. Activity calls note the worker's pid as well.
    """

    def entered(workflow: str, n: int) -> None:
        calls.directory.mkdir(parents=True, exist_ok=True)
        with open(calls.directory / f"{workflow}-entered.log", "a", encoding="utf-8") as log:
            log.write(f"{n} {os.getpid()}\n")

    def counted(attempt: Attempt, activity: str, value: int) -> int:
        calls.record(activity, attempt, os.getpid())
        return value

    def timed(attempt: Attempt, activity: str, value: int, seconds: float) -> int:
        calls.record(activity, attempt, f"{os.getpid()} begin")
        time.sleep(seconds)
        calls.record(activity, attempt, f"{os.getpid()} end")
        return value

    @app.workflow("evicted", cache_size=EVICTED_CACHE)
    async def evicted(ctx: WorkflowContext, n: int) -> list[int]:
        """Waits for its signal with a cache of ``EVICTED_CACHE``: most waiting instances are evicted."""
        entered("evicted", n)
        first = await ctx.activity("evicted-first", Retry.times(3), lambda a: counted(a, "evicted-first", 100 * n),
                                   type=int)
        extra = await ctx.wait_signal("go", type=int)
        second = await ctx.activity("evicted-second", Retry.times(3),
                                    lambda a: counted(a, "evicted-second", first + extra), type=int)
        return [first, extra, second]

    @app.workflow("moved")
    async def moved(ctx: WorkflowContext, n: int) -> list[int]:
        """Waits for its signal, naps, then a second activity: ``MOVED_SLOW`` s when ``n % 3 == 1``, else quick."""
        entered("moved", n)
        first = await ctx.activity("moved-first", Retry.times(3), lambda a: counted(a, "moved-first", 100 * n),
                                   type=int)
        extra = await ctx.wait_signal("go", type=int)
        await ctx.sleep(MOVED_NAP)
        seconds = MOVED_SLOW if n % 3 == 1 else 0.0
        second = await ctx.activity("moved-second", Retry.times(3),
                                    lambda a: timed(a, "moved-second", first + extra, seconds), type=int)
        return [first, extra, second]


app = build(
    os.environ.get("TEST_APP_ID", "workflows"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
    without_collector=os.environ.get("TEST_WITHOUT_COLLECTOR") == "1",
)
