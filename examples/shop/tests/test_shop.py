"""A user's own tests of the shop (examples/shop/app.py) with the tidings pytest plugin.

Run with ``pytest -p tidings.testing.pytest_plugin examples/shop/tests`` (the plugin also
loads by itself wherever tidings is installed). The first tests run the workflows in
memory on a fake clock (``tidings_runtime``): no Kafka, and the sleeps and windows take no
time. The last one runs them on a real broker (``tidings_bootstrap``), in a worker process
(``tidings_workers``) of an App built for the test alone (``tidings_app``), whose topics are
deleted afterwards. docs/testing.md walks through them.
"""

from __future__ import annotations

import asyncio

import pytest

from examples.shop.app import APPROVAL_WINDOW, ENRICH_NAP, Enriched, build
from tidings import App, Finished, WorkflowStatus
from tidings.core.workflow.journal import StepStarted
from tidings.errors import WorkflowEnded
from tidings.testing import FakeClock, WorkflowTestRuntime
from tidings.testing.pytest_plugin import Workers

# ------------------------------------------------------------------ in memory, no Kafka


def test_enrich_scores_the_order_then_naps_before_it_reads_the_time(
    tidings_runtime: WorkflowTestRuntime, tidings_clock: FakeClock
) -> None:
    enrich = tidings_runtime.register(build().workflow_handle("enrich").definition)
    enrich.start("order-17", "ABC")
    tidings_runtime.run_until_idle()  # the score activity runs; the nap is armed
    assert enrich.status("order-17") is WorkflowStatus.RUNNING
    woke_at = tidings_clock.now() + ENRICH_NAP
    tidings_runtime.advance(ENRICH_NAP)
    assert enrich.value("order-17") == Enriched(points=30, at=woke_at)


def test_approve_answers_the_signal_or_false_when_nobody_answers_in_time(tidings_runtime: WorkflowTestRuntime) -> None:
    approve = tidings_runtime.register(build().workflow_handle("approve").definition)
    approve.start("order-18", "ABC")
    approve.signal("order-18", "approval", True)
    approve.start("order-19", "XYZ")
    tidings_runtime.advance(APPROVAL_WINDOW)  # a minute of fake time, none of real time
    assert (approve.value("order-18"), approve.value("order-19")) == (True, False)
    with pytest.raises(WorkflowEnded):
        approve.signal("order-19", "approval", True)


def test_a_crash_during_the_nap_neither_scores_again_nor_postpones_it(
    tidings_runtime: WorkflowTestRuntime, tidings_clock: FakeClock
) -> None:
    enrich = tidings_runtime.register(build().workflow_handle("enrich").definition)
    enrich.start("order-17", "ABC")
    tidings_runtime.run_until_idle()
    started = tidings_clock.now()
    tidings_runtime.advance(ENRICH_NAP / 2)
    tidings_runtime.restart()  # everything not journaled is lost; the journal is replayed
    tidings_runtime.advance(ENRICH_NAP / 2)
    outcome = enrich.outcome("order-17")
    assert isinstance(outcome, Finished) and outcome.value == Enriched(points=30, at=started + ENRICH_NAP)
    scored = [r for r in enrich.journal("order-17") if isinstance(r, StepStarted) and r.kind == "activity"]
    assert [r.name for r in scored] == ["score"]


# ------------------------------------------------------------- on a real broker


def test_a_worker_enriches_an_order_and_takes_the_approval_signal(tidings_app: App, tidings_workers: Workers) -> None:
    # One worker of the test's own App; it imports the shop with a three-second window.
    worker = tidings_workers.start(env={"SHOP_APPROVAL_WINDOW": "3"})
    enrich, approve = tidings_app.workflow_handle("enrich"), tidings_app.workflow_handle("approve")
    assert enrich.topics.journal.startswith(f"{tidings_app.name}.")  # the test's own topics

    async def scenario() -> tuple[object, ...]:
        await enrich.start("order-17", "ABC")
        await enrich.start("order-17", "XYZ")  # a second start stores nothing
        await approve.start("order-18")
        await approve.start("order-19")
        await approve.signal("order-18", "approval", True)
        return (await enrich.result("order-17", 60), await enrich.status("order-17"),
                await approve.value("order-18", 60), await approve.value("order-19", 60))

    outcome, status, approved, unanswered = asyncio.run(scenario())
    assert isinstance(outcome, Finished) and isinstance(outcome.value, Enriched), worker.log_tail()
    assert (outcome.value.points, status) == (30, WorkflowStatus.FINISHED)
    assert (approved, unanswered) == (True, False)  # order-19's window closed unanswered
    with pytest.raises(WorkflowEnded):
        asyncio.run(approve.signal("order-19", "approval", True))
