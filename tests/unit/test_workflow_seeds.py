"""The seed's workflow examples (those without send/child), run on the in-memory runtime."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tidings.core.workflow import (
    Attempt,
    Cancelled,
    ErrorKind,
    Finished,
    Retry,
    WorkflowContext,
    WorkflowStatus,
    define_workflow,
    subroutine,
)
from tidings.errors import WorkflowStepFailed
from tidings.testing.workflows import WorkflowTestRuntime


class Calls:
    """Counts calls of the seed's external functions (score, charge, isShipped)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, object]] = []

    def score(self, key: str, order: str) -> int:
        self.log.append(("score", key, order))
        return 42

    def charge(self, key: str, amount: float) -> str:
        self.log.append(("charge", key, amount))
        return "paid"

    def names(self) -> list[str]:
        return [name for name, _, _ in self.log]


@pytest.fixture
def runtime() -> WorkflowTestRuntime:
    return WorkflowTestRuntime()


def test_enrich_scores_waits_five_minutes_and_reads_the_time(runtime: WorkflowTestRuntime) -> None:
    calls = Calls()

    async def enrich(ctx: WorkflowContext, order: str) -> tuple[int, datetime]:
        points = await ctx.activity("score", Retry.times(3), lambda attempt: calls.score(attempt.idempotency_key, order))
        await ctx.sleep(timedelta(minutes=5))
        at = await ctx.now()
        return points, at

    handle = runtime.register(define_workflow("enrich", enrich))
    started_at = runtime.clock.now()
    handle.start("order-17", "ABC")
    runtime.run_until_idle()
    assert calls.log == [("score", "enrich/order-17/1", "ABC")]
    runtime.advance(timedelta(minutes=4, seconds=59))
    assert handle.status("order-17") is WorkflowStatus.RUNNING
    runtime.advance(timedelta(seconds=1))
    assert handle.outcome("order-17") == Finished((42, started_at + timedelta(minutes=5)))


def test_approve_gives_the_signal_or_false_after_two_days(runtime: WorkflowTestRuntime) -> None:
    async def approve(ctx: WorkflowContext, _: None) -> bool:
        answer = await ctx.wait_signal_for("approval", timedelta(days=2), type=bool)
        return answer if answer is not None else False

    handle = runtime.register(define_workflow("approve", approve))
    handle.start("yes", None)
    handle.start("late", None)
    runtime.advance(timedelta(days=1))
    handle.signal("yes", "approval", True)
    runtime.advance(timedelta(days=1))
    assert handle.outcome("yes") == Finished(True)
    assert handle.outcome("late") == Finished(False)


def test_both_scores_three_orders_and_races_a_charge_against_a_minute(runtime: WorkflowTestRuntime) -> None:
    calls = Calls()

    async def charged(ctx: WorkflowContext) -> str | None:
        return await ctx.activity("charge", Retry.none, lambda a: calls.charge(a.idempotency_key, 30))

    async def timed_out(ctx: WorkflowContext) -> str | None:
        await ctx.sleep(timedelta(minutes=1))
        return None

    async def both(ctx: WorkflowContext, _: None) -> tuple[list[int], str | None]:
        points = await ctx.all(
            [
                ctx.activity("score", Retry.times(3), lambda a, order=order: calls.score(a.idempotency_key, order))
                for order in ["A", "B", "C"]
            ]
        )
        first = await ctx.race([charged(ctx), timed_out(ctx)])
        return points, first

    handle = runtime.register(define_workflow("both", both))
    handle.start("b-1", None)
    runtime.run_until_idle()
    assert handle.outcome("b-1") == Finished(([42, 42, 42], "paid"))
    assert [key for _, key, _ in calls.log] == ["both/b-1/1.1.1", "both/b-1/1.2.1", "both/b-1/1.3.1", "both/b-1/2.1.1"]


def test_both_race_falls_back_to_none_when_the_charge_is_slower_than_a_minute(runtime: WorkflowTestRuntime) -> None:
    async def both(ctx: WorkflowContext, _: None) -> str | None:
        async def charged() -> str | None:
            await ctx.sleep(timedelta(minutes=2))  # a slow charge
            return "paid"

        async def timed_out() -> str | None:
            await ctx.sleep(timedelta(minutes=1))
            return None

        return await ctx.race([charged(), timed_out()])

    handle = runtime.register(define_workflow("race", both))
    handle.start("r-1", None)
    runtime.advance(timedelta(minutes=5))
    assert handle.outcome("r-1") == Finished(None)


def test_points_and_receipt_runs_two_steps_together_and_gives_a_tuple(runtime: WorkflowTestRuntime) -> None:
    calls = Calls()

    async def points_and_receipt(ctx: WorkflowContext, _: None) -> tuple[int, str]:
        points, receipt = await ctx.both(
            ctx.activity("score", Retry.times(3), lambda a: calls.score(a.idempotency_key, "A")),
            ctx.activity("charge", Retry.none, lambda a: calls.charge(a.idempotency_key, 30)),
        )
        return points, receipt

    handle = runtime.register(define_workflow("par", points_and_receipt))
    handle.start("p-1", None)
    runtime.run_until_idle()
    assert handle.outcome("p-1") == Finished((42, "paid"))


def test_wait_until_shipped_checks_every_five_minutes_until_shipped(runtime: WorkflowTestRuntime) -> None:
    answers = iter([False, False, True])
    keys: list[str] = []

    def is_shipped(attempt: Attempt) -> bool:
        keys.append(attempt.idempotency_key)
        return next(answers)

    @subroutine
    async def wait_until_shipped(ctx: WorkflowContext, checks: int) -> int:
        shipped = await ctx.activity("check", Retry.times(3), is_shipped)
        if shipped:
            return checks
        await ctx.sleep(timedelta(minutes=5))
        return await wait_until_shipped(ctx, checks + 1)

    async def body(ctx: WorkflowContext, _: None) -> int:
        return await wait_until_shipped(ctx, 0)

    handle = runtime.register(define_workflow("ship", body))
    handle.start("s-1", None)
    runtime.advance(timedelta(minutes=10))
    assert handle.outcome("s-1") == Finished(2)
    # Every round's check has its own number and its own stored result.
    assert keys == ["ship/s-1/1", "ship/s-1/3", "ship/s-1/5"]


def _booking(calls: Calls):  # type: ignore[no-untyped-def]
    async def booking(ctx: WorkflowContext, _: None) -> str:
        try:
            return await ctx.activity(
                "charge", Retry.forever(timedelta(hours=1)), lambda a: calls.charge(a.idempotency_key, 30)
            )
        except WorkflowStepFailed as failed:
            if failed.error.kind is ErrorKind.CANCELLED:
                await ctx.activity("refund", Retry.none, lambda a: calls.charge(a.idempotency_key, -30))
            raise

    return booking


def test_booking_cancelled_runs_its_refund_and_ends_cancelled(runtime: WorkflowTestRuntime) -> None:
    calls = Calls()
    handle = runtime.register(define_workflow("booking", _booking(calls)))
    handle.start("bk-1", None)  # the charge is scheduled, not yet run
    handle.cancel("bk-1")
    runtime.run_until_idle()
    assert calls.log == [("charge", "booking/bk-1/2", -30)]
    assert handle.outcome("bk-1") == Cancelled()


def test_booking_that_is_not_cancelled_returns_the_charge(runtime: WorkflowTestRuntime) -> None:
    calls = Calls()
    handle = runtime.register(define_workflow("booking", _booking(calls)))
    handle.start("bk-2", None)
    runtime.run_until_idle()
    assert handle.outcome("bk-2") == Finished("paid")


def _evolving(calls: Calls, *, with_charge: bool):  # type: ignore[no-untyped-def]
    async def evolving(ctx: WorkflowContext, _: None) -> int:
        points = await ctx.activity("score", Retry.times(3), lambda a: calls.score(a.idempotency_key, "A"))
        if with_charge:
            change = await ctx.version("add-charge", 2)
            if change >= 2:
                await ctx.activity("charge", Retry.none, lambda a: calls.charge(a.idempotency_key, 5))
        await ctx.sleep(timedelta(minutes=1))
        return points

    return evolving


def test_evolving_gives_new_instances_the_new_steps_and_old_ones_the_old(runtime: WorkflowTestRuntime) -> None:
    calls = Calls()
    handle = runtime.register(define_workflow("evolving", _evolving(calls, with_charge=False)))
    handle.start("old", None)
    runtime.run_until_idle()  # "old" passed the point: its sleep (step 2) is stored
    runtime.deploy(define_workflow("evolving", _evolving(calls, with_charge=True)))
    runtime.restart()
    handle.start("new", None)
    runtime.advance(timedelta(minutes=2))
    assert handle.outcome("old") == Finished(42)
    assert handle.outcome("new") == Finished(42)
    assert calls.log == [("score", "evolving/old/1", "A"), ("score", "evolving/new/1", "A"), ("charge", "evolving/new/2", 5)]
