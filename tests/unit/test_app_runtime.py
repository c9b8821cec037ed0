"""AppTestRuntime: an App's workflows, aggregates, sagas and projections in memory, on a fake clock."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from examples.bank.account import Deposit, Deposited, Open, Opened, SendTransfer, TransferSent, Withdraw
from tidings import App, Finished, Retry, WorkflowContext
from tidings.core.workflow.retry import RetryPolicy
from tidings.errors import AggregateVersionConflict, SchemaError
from tidings.testing import AppTestRuntime, FakeClock
from tests.parity_app import NAP, WINDOW, Paid, Payout, build


def order(account: str = "ann", target: str = "bob") -> Payout:
    return Payout(account=account, target=target, amount=Decimal(30))


def test_a_workflow_sends_to_the_aggregate_and_the_saga_and_projection_follow_its_events() -> None:
    runtime = AppTestRuntime(build())
    runtime.send("account", "bob", Open(owner="bob"))
    payout = runtime.workflow("payout")
    payout.start("p-1", order())
    runtime.run_until_idle()
    assert runtime.state("account", "ann").balance == Decimal(100)  # the two sends were decided
    payout.signal("p-1", "approve", True)
    runtime.advance(NAP)
    outcome = payout.outcome("p-1")
    assert isinstance(outcome, Finished), outcome
    assert outcome.value.model_dump() == {"fee": 6, "approved": True, "reply": "TransferSent",
                                          "guid": outcome.value.guid}
    # TransferSent started the transfer saga, which credited bob; the projection saw it all.
    assert runtime.state("account", "ann").balance == Decimal(70)
    assert runtime.state("account", "bob").balance == Decimal(30)
    saga = runtime.saga_state("transfer", "payout/p-1/5")
    assert saga is not None and saga.ended and saga.state.step == "credited"
    assert [r.transition for r in runtime.saga_journal("transfer", "payout/p-1/5")] == ["start", "handle", "stop"]
    assert runtime.view("balances").get("ann") == {"owner": "ann", "balance": "70", "events": 3}
    assert runtime.view("balances").get("bob") == {"owner": "bob", "balance": "30", "events": 2}
    # The send steps' command ids are the step keys, as the worker's.
    assert [e.command_id for e in runtime.events("account", "ann")] == [
        "payout/p-1/2", "payout/p-1/3", "payout/p-1/5"]
    assert runtime.dead_letters == []


def test_a_transfer_to_an_account_that_is_not_open_is_refunded_by_the_saga() -> None:
    runtime = AppTestRuntime(build())
    payout = runtime.workflow("payout")
    payout.start("p-2", order(target="nobody"))
    runtime.run_until_idle()
    payout.signal("p-2", "approve", True)
    runtime.advance(NAP)
    assert payout.value("p-2").reply == "TransferSent"
    assert runtime.state("account", "ann").balance == Decimal(100)  # the refund came back
    saga = runtime.saga_state("transfer", "payout/p-2/5")
    assert saga is not None and saga.ended and saga.state.step == "refunded"
    assert runtime.view("balances").get("nobody") is None


def test_no_signal_within_the_window_ends_without_a_transfer_on_the_virtual_clock() -> None:
    runtime = AppTestRuntime(build())
    payout = runtime.workflow("payout")
    payout.start("p-3", order())
    value = payout.value("p-3", timeout=WINDOW + NAP)
    assert (value.approved, value.reply) == (False, "skipped")
    assert runtime.saga_state("transfer", "payout/p-3/5") is None


def test_an_activity_is_replaced_by_name_with_a_stand_in() -> None:
    runtime = AppTestRuntime(build())
    calls: list[str] = []

    def stand_in(attempt: object) -> int:
        calls.append(getattr(attempt, "idempotency_key"))
        return 99

    runtime.replace_activity("fee", stand_in)
    runtime.workflow("payout").start("p-4", order())
    assert runtime.workflow("payout").value("p-4", timeout=WINDOW + NAP).fee == 99
    assert calls == ["payout/p-4/1"]
    with pytest.raises(TypeError, match="callable"):
        runtime.replace_activity("fee", 3)  # type: ignore[arg-type]


def test_an_activity_stand_in_that_raises_is_retried_under_the_body_s_policy() -> None:
    runtime = AppTestRuntime(build())
    attempts: list[int] = []

    def flaky(attempt: object) -> int:
        attempts.append(getattr(attempt, "number"))
        if len(attempts) < 3:
            raise ConnectionError("the fee service is down")
        return 1

    runtime.replace_activity("fee", flaky)
    runtime.workflow("payout").start("p-5", order())
    assert runtime.workflow("payout").value("p-5", timeout=timedelta(minutes=5)).fee == 1
    assert attempts == [1, 2, 3]


def test_sending_to_an_aggregate_directly_answers_as_the_client_does() -> None:
    runtime = AppTestRuntime(build())
    assert runtime.send("account", "cy", Open(owner="cy")) == Opened(owner="cy")
    assert runtime.send("account", "cy", Deposit(amount=Decimal(5)), command_id="c-1") == Deposited(amount=Decimal(5))
    # A repeated command id gets its first verdict and stores nothing.
    assert runtime.send("account", "cy", Deposit(amount=Decimal(5)), command_id="c-1") == Deposited(amount=Decimal(5))
    assert runtime.state("account", "cy").balance == Decimal(5)
    with pytest.raises(AggregateVersionConflict):
        runtime.send("account", "cy", Withdraw(amount=Decimal(1)), expected_version=7)
    with pytest.raises(SchemaError, match="not a command"):
        runtime.send("account", "cy", Opened(owner="x"))
    with pytest.raises(LookupError, match="no aggregate 'nope'"):
        runtime.send("nope", "cy", Open(owner="x"))
    assert [e.version for e in runtime.events("account", "cy")] == [1, 2]


def test_a_stored_transfer_sent_directly_starts_the_saga_once() -> None:
    runtime = AppTestRuntime(build())
    runtime.send("account", "dee", Open(owner="dee"))
    runtime.send("account", "eve", Open(owner="eve"))
    runtime.send("account", "dee", Deposit(amount=Decimal(50)))
    sent = runtime.send("account", "dee", SendTransfer(transfer_id="t1", target="eve", amount=Decimal(20)),
                        correlation_id="corr-1")
    assert isinstance(sent, TransferSent)
    runtime.run_until_idle()
    assert runtime.state("account", "eve").balance == Decimal(20)
    assert runtime.saga_state("transfer", "corr-1").ended  # type: ignore[union-attr]


def test_a_projection_handler_that_raises_has_its_writes_dropped_and_is_a_dead_letter() -> None:
    app = build()
    accounts = app.aggregates[0]

    def picky(event: object, view: object) -> None:
        view.put("seen", getattr(event, "version"))  # type: ignore[attr-defined]
        if getattr(event, "version") == 2:
            raise ValueError("version 2 is not liked")

    app.projection("picky", [accounts], picky)
    runtime = AppTestRuntime(app)
    runtime.send("account", "fay", Open(owner="fay"))
    runtime.send("account", "fay", Deposit(amount=Decimal(1)))
    runtime.run_until_idle()
    assert runtime.view("picky").get("seen") == 1
    assert [d.origin for d in runtime.dead_letters] == ["projection picky"]
    runtime.send("account", "fay", Deposit(amount=Decimal(1)))
    runtime.run_until_idle()
    assert list(runtime.view("picky").items()) == [("seen", 3)]


def test_a_send_to_an_aggregate_no_one_hosts_times_out_under_the_policy() -> None:
    other = App("other")
    accounts = other.aggregate("account", None, lambda c, s: None, lambda e, s: s, command=Open, event=Opened)
    app = App("lonely")

    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.send_with(RetryPolicy(attempts=2, attempt_timeout=timedelta(seconds=5)), accounts, "x",
                                Open(owner="x"))
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__
        return "sent"

    app.workflow("w")(body)
    runtime = AppTestRuntime(app)
    runtime.workflow("w").start("w-1")
    assert runtime.workflow("w").value("w-1", timeout=timedelta(minutes=1)) == "WorkflowStepFailed"


def test_a_thirty_day_timer_finishes_on_the_virtual_clock_in_well_under_100_ms() -> None:
    app = App("timers")

    async def month(ctx: WorkflowContext, _: None) -> str:
        await ctx.sleep(timedelta(days=30))
        return "a month later"

    app.workflow("month")(month)
    clock = FakeClock()
    started = clock.now()
    began = time.perf_counter()
    runtime = AppTestRuntime(app, clock=clock)
    runtime.workflow("month").start("m-1")
    runtime.advance(timedelta(days=30))
    value = runtime.workflow("month").value("m-1")
    elapsed = time.perf_counter() - began
    print(f"\na 30-day sleep ran in {elapsed * 1000:.2f} ms of wall time")
    assert value == "a month later"
    assert clock.now() - started == timedelta(days=30)
    assert elapsed < 1.0  # well under 100 ms in practice; generous for a loaded CI machine


def test_a_daily_schedule_starts_its_workflow_runs_on_the_virtual_clock() -> None:
    from examples.reminder import app as reminder

    clock = FakeClock(datetime(2026, 11, 14, 12, 0, tzinfo=timezone.utc))
    runtime = AppTestRuntime(reminder.app, clock=clock)
    asyncio.run(runtime.schedules.create(reminder.ADA_SCHEDULE, "reminder", reminder.ADA_TEXT, reminder.ADA_RULE))
    asyncio.run(runtime.schedules.create(reminder.ADA_SCHEDULE, "reminder", reminder.ADA_TEXT, reminder.ADA_RULE))
    runtime.advance(timedelta(days=3))
    runs = sorted(key[1] for key in runtime.outcomes if key[0] == "reminder")
    assert runs == ["ada-daily@2026-11-15T08:00:00.0000000Z", "ada-daily@2026-11-16T08:00:00.0000000Z",
                    "ada-daily@2026-11-17T08:00:00.0000000Z"]
    assert {runtime.workflow("reminder").value(run) for run in runs} == {"09:00 Europe/Oslo: Drink water"}
    state = asyncio.run(runtime.schedules.state(reminder.ADA_SCHEDULE))
    assert state.pending == () and state.next_due() == datetime(2026, 11, 18, 8, 0, tzinfo=timezone.utc)
    assert asyncio.run(runtime.schedules.pause(reminder.ADA_SCHEDULE))
    runtime.advance(timedelta(days=2))
    assert len([key for key in runtime.outcomes if key[0] == "reminder"]) == 3  # paused: no run
    assert runtime.dead_letters == []


def test_a_fire_sent_as_a_client_would_is_refused_as_a_worker_refuses_it() -> None:
    from examples.reminder import app as reminder
    from tidings.core.schedule.aggregate import FireSchedule

    runtime = AppTestRuntime(reminder.app)
    asyncio.run(runtime.schedules.create(reminder.ADA_SCHEDULE, "reminder", reminder.ADA_TEXT, reminder.ADA_RULE))
    with pytest.raises(SchemaError, match="asks for no reply"):
        runtime.send("schedule", reminder.ADA_SCHEDULE, FireSchedule(due=runtime.clock.now(), now=runtime.clock.now()))
    assert [d.origin for d in runtime.dead_letters] == ["aggregate schedule"]
    runtime.run_until_idle()
    assert runtime.outcomes == {}


def test_an_app_without_schedules_says_so() -> None:
    with pytest.raises(LookupError, match="declares no schedules"):
        AppTestRuntime(build()).schedules


def test_a_crash_after_the_transfer_was_stored_loses_nothing_and_moves_no_money_twice() -> None:
    runtime = AppTestRuntime(build())
    runtime.send("account", "bob", Open(owner="bob"))
    payout = runtime.workflow("payout")
    payout.start("p-6", order())
    runtime.run_until_idle()
    payout.signal("p-6", "approve", True)  # the transfer is decided and stored at once ...
    assert runtime.state("account", "ann").balance == Decimal(70)
    runtime.crash()  # ... and its reply, the saga's start and the projection's inputs are lost
    assert runtime.saga_state("transfer", "payout/p-6/5") is None
    runtime.recover()
    runtime.advance(NAP)
    assert payout.value("p-6").reply == "TransferSent"  # the resend got the first verdict
    assert [e.type for e in runtime.events("account", "ann")] == ["Opened", "Deposited", "TransferSent"]
    assert runtime.state("account", "ann").balance == Decimal(70)
    assert runtime.state("account", "bob").balance == Decimal(30)
    assert runtime.saga_state("transfer", "payout/p-6/5").ended  # type: ignore[union-attr]
    assert runtime.view("balances").get("bob") == {"owner": "bob", "balance": "30", "events": 2}


def test_a_crash_while_the_saga_waits_resends_its_command_under_the_same_id() -> None:
    app = build()
    runtime = AppTestRuntime(app)
    runtime.send("account", "gus", Open(owner="gus"))
    runtime.send("account", "gus", Deposit(amount=Decimal(10)))
    # The target opens only later: the credit is refused (deferred Rejected) and refunded.
    runtime.send("account", "gus", SendTransfer(transfer_id="t9", target="hal", amount=Decimal(10)),
                 correlation_id="t9")
    runtime.crash()
    runtime.recover()
    runtime.run_until_idle()
    saga = runtime.saga_state("transfer", "t9")
    assert saga is not None and saga.ended and saga.state.step == "refunded"
    assert runtime.state("account", "gus").balance == Decimal(10)
    refunds = [e for e in runtime.events("account", "gus") if e.type == "TransferRefunded"]
    assert len(refunds) == 1 and refunds[0].command_id == "transfer:t9:2:0"


def test_hostile_ids_and_payloads_are_refused_before_anything_is_decided() -> None:
    from tidings.errors import LimitError

    runtime = AppTestRuntime(build())
    with pytest.raises(LimitError):
        runtime.send("account", "", Open(owner="x"))
    with pytest.raises(LimitError):
        runtime.send("account", "x" * 300, Open(owner="x"))
    with pytest.raises(LimitError):
        runtime.send("account", "ok", Open(owner="x"), command_id="c" * 300)
    with pytest.raises(LimitError):
        runtime.send("account", "ok", Open(owner="x" * 600_000))
    with pytest.raises(LookupError, match="declares no workflow 'nope'; it declares: payout"):
        runtime.workflow("nope")
    for ask, what in ((lambda: runtime.view("nope"), "projection"), (lambda: runtime.saga_state("nope", "x"), "saga"),
                      (lambda: runtime.saga_journal("nope", "x"), "saga"),
                      (lambda: runtime.orchestration_actions("nope", "x"), "orchestration"),
                      (lambda: runtime.feed_flow("nope", b"1"), "flow stage")):
        with pytest.raises(LookupError, match=f"declares no {what} 'nope'"):
            ask()
    assert runtime.events("account", "ok") == [] and runtime.dead_letters == []


def test_an_approved_payout_moves_the_money_through_the_saga() -> None:
    """The example of docs/testing.md, "The in-memory runtime", as it is written there."""
    runtime = AppTestRuntime(build())
    runtime.replace_activity("fee", lambda attempt: 3)       # no fee service in a unit test
    runtime.send("account", "bob", Open(owner="bob"))
    payout = runtime.workflow("payout")
    payout.start("p-1", Payout(account="ann", target="bob", amount=Decimal(30)))
    runtime.run_until_idle()                                  # the fee, then the two sends
    payout.signal("p-1", "approve", True)
    runtime.advance(NAP)                                      # the transfer, the saga, the nap
    assert payout.value("p-1").fee == 3
    assert runtime.state("account", "bob").balance == Decimal(30)
    assert runtime.saga_state("transfer", "payout/p-1/5").ended  # type: ignore[union-attr]
    assert runtime.view("balances").get("ann")["balance"] == "70"


def test_an_orchestration_steps_on_the_events_its_key_of_routes_and_acts_once_per_position() -> None:
    import json

    from tests.integration.orchestration_apps import REPLIES, Happen
    from tests.integration.orchestration_apps import build as build_orchestrations

    runtime = AppTestRuntime(build_orchestrations("orchestrations"))
    runtime.send("ledger", "order-a", Happen(order="a", step="placed"))
    runtime.send("ledger", "noise-a", Happen(order="a", step="noise"))  # for the order, changes nothing
    runtime.send("ledger", "x", Happen(order="b", step="explode"))  # key_of raises: a dead letter
    runtime.send("ledger", "y", Happen(order="a", step="boom"))  # the orchestration raises: a dead letter
    runtime.run_until_idle()
    done: set[tuple[int, str]] = set()
    for _ in range(10):  # the test is the executor: each action asked for is answered by its event
        for record in runtime.orchestration_actions("fulfil", "a"):
            for action in record.actions:
                if (record.position, action.type) not in done:
                    done.add((record.position, action.type))
                    runtime.send("ledger", f"exec-{action.type}", Happen(order="a", step=REPLIES[action.type]))
        runtime.run_until_idle()
    asked = [(r.position, [a.type for a in r.actions]) for r in runtime.orchestration_actions("fulfil", "a")]
    # placed (1) asks for Charge; noise (2); paid (3) for Pack and Label; packed (4), labelled (5) for Ship.
    assert asked == [(1, ["Charge"]), (3, ["Pack", "Label"]), (5, ["Ship"])]
    outcome = runtime.orchestration_outcome("fulfil", "a")
    assert outcome is not None and outcome.type == "Shipped" and json.loads(outcome.payload or b"") == {"order": "a"}
    assert sorted(d.origin for d in runtime.dead_letters) == ["orchestration fulfil"] * 2
    # A crash loses the live orchestration; recovery replays its journal and acts on nothing again.
    runtime.restart()
    runtime.run_until_idle()
    assert [(r.position, [a.type for a in r.actions]) for r in runtime.orchestration_actions("fulfil", "a")] == asked


def test_a_flow_stage_starts_a_workflow_per_source_record_and_writes_each_outcome_to_its_sink() -> None:
    app = App("flows")

    async def square(ctx: WorkflowContext, n: int) -> int:
        if n < 0:
            raise ValueError("no negative numbers")
        if n == 0:
            await ctx.sleep(timedelta(hours=1))
        return await ctx.activity("square", Retry.times(1), lambda attempt: n * n)

    app.workflow("square")(square)
    app.workflow_flow("numbers", "flows.numbers", "square", lambda n: f"sq-{n}", "flows.squared", 4,
                      timedelta(minutes=10))
    runtime = AppTestRuntime(app)
    for value in (b"3", b"-1", b"0", b"not json", b'"a string"', None):
        runtime.feed_flow("numbers", value)
    runtime.advance(timedelta(minutes=11))
    sink = dict(runtime.sinks["flows.squared"])  # in the order the outcomes came
    assert sink["sq-3"] == {"id": "sq-3", "workflow": "square", "outcome": "finished", "value": 9}
    assert sink["sq--1"]["outcome"] == "faulted" and "no negative numbers" in sink["sq--1"]["error"]["message"]
    assert len(sink) == 2  # sq-0 sleeps for an hour: dead-lettered at the timeout, it carries on
    reasons = [d.reason for d in runtime.dead_letters]
    assert len(reasons) == 4 and any("did not end within 600.0 s" in r for r in reasons), reasons
    runtime.advance(timedelta(hours=1))
    assert runtime.workflow("square").value("sq-0") == 0 and len(runtime.sinks["flows.squared"]) == 2
    runtime.feed_flow("numbers", b"3")  # a replayed element: its start stores nothing, its outcome again
    assert runtime.sinks["flows.squared"][-1] == ("sq-3", sink["sq-3"])


def test_the_async_variant_runs_every_kind_with_activities_as_tasks_and_an_async_projection() -> None:
    app = build()
    accounts = app.aggregates[0]
    seen: list[int] = []

    async def counting(event: object, view: object) -> None:
        await asyncio.sleep(0)
        seen.append(getattr(event, "version"))

    app.projection("counting", [accounts], counting)
    runtime = AppTestRuntime(app)

    async def scenario() -> Paid:
        runtime.send("account", "bob", Open(owner="bob"))
        payout = runtime.workflow("payout")
        payout.start("p-7", order())
        await runtime.run_until_idle_async()
        payout.signal("p-7", "approve", True)
        await runtime.run_until_idle_async()  # the transfer's reply, the saga; the nap is armed
        runtime.clock.advance(NAP)
        await runtime.run_until_idle_async()
        value: Paid = payout.value("p-7")
        return value

    assert asyncio.run(scenario()).reply == "TransferSent"
    assert runtime.state("account", "bob").balance == Decimal(30)
    assert sorted(seen) == [1, 1, 2, 2, 3]  # bob's two, ann's three: each once
