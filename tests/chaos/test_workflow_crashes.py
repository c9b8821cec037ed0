"""Workflows survive SIGKILL: completed steps never run again, sleeps keep their due time,
no signal is lost or applied twice."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from tidings import App
from tidings.core.workflow import WorkflowStatus
from tidings.testing.eventually import assert_eventually
from tests.integration.workflow_apps import Calls
from tests.workers import EXACTLY_ONCE, assert_each_key_once_when_committed, both_guarantees
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401


@both_guarantees
def test_sigkill_while_an_activity_runs_never_calls_a_completed_activity_again(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls, kafka_bootstrap: str, guarantee: str
) -> None:
    worker = workflow_workers.start()
    steps = workflow_app.workflow_handle("steps")
    ids = [f"s-{n}" for n in range(5)]

    async def start() -> None:
        for instance_id in ids:
            await steps.start(instance_id, 6.0)

    asyncio.run(start())
    # Every instance has finished step 1 and is inside the slow step 2.
    assert_eventually(lambda: len([l for l in calls.lines("slow") if l.endswith("begin")]) >= len(ids),
                      timeout=60, message=workflow_workers.log_tail())
    worker.kill()
    assert not any(line.endswith("end") for line in calls.lines("slow"))
    workflow_workers.start("w1-restarted", data_dir=worker.data_dir)

    async def results() -> list[Any]:
        return await asyncio.gather(*(steps.value(i, 90) for i in ids))

    assert asyncio.run(results()) == [["1", "done", "1"]] * len(ids)
    quick = calls.keys("quick")
    for instance_id in ids:
        assert quick.count(f"steps/{instance_id}/1") == 1, quick  # completed before the kill
        assert quick.count(f"steps/{instance_id}/3") == 1, quick
        slow_begun = [l for l in calls.lines("slow") if l.startswith(f"steps/{instance_id}/2 ") and l.endswith("begin")]
        assert len(slow_begun) == 2  # the interrupted call ran again, at least once, as documented
    if guarantee == EXACTLY_ONCE:
        assert_each_key_once_when_committed(kafka_bootstrap, steps.topics.journal)


@both_guarantees
def test_sigkill_during_a_sleep_does_not_postpone_its_due_time(
    workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    worker = workflow_workers.start()
    napper = workflow_app.workflow_handle("napper")
    nap = 8.0

    async def start() -> None:
        await napper.start("n-1", nap)
        while await napper.status("n-1") is not WorkflowStatus.RUNNING:
            await asyncio.sleep(0.05)

    asyncio.run(start())
    time.sleep(1.0)
    worker.kill()
    workflow_workers.start("w1-restarted", data_dir=worker.data_dir)
    before, after = asyncio.run(napper.value("n-1", 90))
    # From the stored start of the sleep to the moment its result is back here.
    finished = time.time() - datetime.fromisoformat(before).timestamp()
    slept = (datetime.fromisoformat(after) - datetime.fromisoformat(before)).total_seconds()
    print(f"\nsleep of {nap} s across a SIGKILL: woke {slept:.2f} s after its start, "
          f"result back {finished:.2f} s after its start")
    assert slept >= nap
    # Postponed would mean a new full sleep after the restart: 1 s + restart + 8 s.
    assert finished < nap + 4.0, workflow_workers.log_tail()


@both_guarantees
def test_sigkill_while_waiting_on_signals_loses_and_duplicates_no_signal(
    workflow_app: App, workflow_workers: WorkflowWorkers, kafka_bootstrap: str, guarantee: str
) -> None:
    worker = workflow_workers.start()
    collector = workflow_app.workflow_handle("collector")
    count = 40

    async def scenario() -> Any:
        await collector.start("c-1", count)
        for n in range(count):
            if n == 15:
                await asyncio.to_thread(worker.kill)
                # Signals sent while no worker runs wait in the inbox.
                sends = [collector.signal("c-1", "item", m, timeout=90) for m in (15, 16, 17)]
                pending = asyncio.ensure_future(_in_order(sends))
                await asyncio.sleep(1.0)
                workflow_workers.start("w1-restarted", data_dir=worker.data_dir)
                await pending
            if n in (15, 16, 17):
                continue
            await collector.signal("c-1", "item", n, timeout=90)
        return await collector.value("c-1", 90)

    assert asyncio.run(scenario()) == list(range(count)), workflow_workers.log_tail()
    if guarantee == EXACTLY_ONCE:
        assert_each_key_once_when_committed(kafka_bootstrap, collector.topics.journal)


async def _in_order(sends: list[Any]) -> None:
    for send in sends:
        await send
