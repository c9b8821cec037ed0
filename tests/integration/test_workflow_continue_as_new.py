"""Continue-as-new on a real broker and worker process (issue 21 item 5, "Must show").

``looper`` (tests/integration/workflow_apps.py) runs one activity per run and continues as new
1,000 times, then takes the "add" signals sent to it at any time. The worker is SIGKILLed in
the middle of the loop, so with a run's continue in flight (between its ContinuedAsNew and
Started, their tombstones and the store write), and restarted on its RocksDB: its recovery
reads one run's records, not 1,000 runs' (counted by ``tidings_workflow_replayed_records``);
every signal, sent before, during and after the kill, reaches the last run once; every run's
activity ran at least once and only the runs around the kill ran it twice; the result is the
last run's. A worker on a fresh store rebuilds the instance from the journal topic, whose old
runs are tombstoned, and replays one run too. An input that does not fit faults, clearly.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from tidings import App, Faulted
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.workflow import ContinuedAsNew, SignalReceived, Started, WorkflowStatus
from tidings.core.workflow_records import WorkflowJournalEntry
from tests.integration.workflow_apps import PARTITIONS, Calls
from tests.kafka_clients import kafka
from tests.prometheus import free_port, metric
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401

RUNS = 1_000
SIGNALS = 30
# One run's records: Started, the carried signals, the activity's start and end, ContinuedAsNew.
ONE_RUN = 5 + SIGNALS


def test_a_loop_that_continued_1000_times_recovers_from_a_sigkill_by_replaying_one_run(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    looper = workflow_app.workflow_handle("looper")
    first_port, second_port = free_port(), free_port()
    worker = workflow_workers.start("w1", env={"TIDINGS_METRICS_PORT": str(first_port)})

    async def add(n: int) -> str:
        return await looper.signal_with_start("loop-1", [0, RUNS, SIGNALS], "add", n, signal_id=f"add-{n}",
                                              timeout=120)

    async def scenario() -> Any:
        await looper.start("loop-1", [0, RUNS, SIGNALS])
        sent = 0
        deadline = time.monotonic() + 120
        while len(calls.lines("tick")) < RUNS // 2 and time.monotonic() < deadline:
            if sent < SIGNALS // 3:  # a third while it loops
                assert await add(sent) == "signalled"
                sent += 1
            await asyncio.sleep(0.05)
        assert len(calls.lines("tick")) >= RUNS // 2, workflow_workers.log_tail()
        continued = metric(first_port, "tidings_workflow_runs_continued_total", workflow="looper")
        assert continued >= RUNS // 2 - 1
        worker.kill()  # SIGKILL mid-loop: a continue is in flight
        # A third while no worker runs: stored in the inbox, taken after the restart.
        while_down = [asyncio.ensure_future(add(n)) for n in range(sent, 2 * SIGNALS // 3)]
        await asyncio.sleep(1)
        workflow_workers.start("w1-again", data_dir=worker.data_dir, env={"TIDINGS_METRICS_PORT": str(second_port)})
        assert set(await asyncio.gather(*while_down)) == {"signalled"}
        # The rest while it loops again (or, if it is already done looping, while it waits for them).
        for n in range(2 * SIGNALS // 3, SIGNALS):
            assert await add(n) == "signalled"
        return await looper.value("loop-1", timeout=240)

    value = asyncio.run(scenario())
    assert value[0] == RUNS
    assert sorted(value[1:]) == list(range(SIGNALS))  # every signal reached the last run, once
    # The restarted worker rebuilt the instance from one run's records, not from 1,000 runs'.
    replayed = metric(second_port, "tidings_workflow_replayed_records_total", workflow="looper")
    assert 1 <= replayed <= ONE_RUN, workflow_workers.log_tail()
    assert metric(second_port, "tidings_workflow_runs_continued_total", workflow="looper") >= 1
    # At least once, and twice only around the kill.
    ticks = Counter(int(line.rsplit(" ", 1)[1]) for line in calls.lines("tick"))
    assert set(ticks) == set(range(RUNS))
    assert sum(count - 1 for count in ticks.values()) <= 2
    # The journal topic holds the last run only once tombstones are read (compaction drops the
    # old records later): a Started of run RUNS + 1 and no record of an earlier run.
    records = asyncio.run(looper.journal("loop-1"))
    started = records[0]
    assert isinstance(started, Started) and started.run == RUNS + 1
    assert all(r.seq >= started.seq for r in records)
    assert not any(isinstance(r, ContinuedAsNew) for r in records)
    assert sorted(r.signal_id or "" for r in records if isinstance(r, SignalReceived)) == sorted(
        f"add-{n}" for n in range(SIGNALS))

    # A worker on a fresh store rebuilds the instance from the topic: the tombstones there
    # drop the old runs, so it replays one run too (the instance has ended: its outcome).
    workflow_workers.kill_all()
    third_port = free_port()
    workflow_workers.start("w2-fresh", env={"TIDINGS_METRICS_PORT": str(third_port)})
    assert asyncio.run(looper.value("loop-1", timeout=120)) == value


def test_a_continue_with_an_input_that_does_not_fit_faults_and_the_worker_goes_on(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start("w1")
    bad = workflow_app.workflow_handle("bad-continue")
    looper = workflow_app.workflow_handle("looper")

    async def scenario() -> tuple[Any, Any]:
        await bad.start("b-1", 1)
        outcome = await bad.result("b-1", timeout=60)
        await looper.start("l-1", [0, 3, 0])
        return outcome, await looper.value("l-1", timeout=60)

    outcome, value = asyncio.run(scenario())
    assert isinstance(outcome, Faulted)
    assert "continue_as_new: the new input does not fit the workflow's input type" in outcome.error.message
    assert value == [3]  # the worker goes on: another instance loops and ends
    records = asyncio.run(bad.journal("b-1"))
    assert not any(isinstance(r, ContinuedAsNew) for r in records)


def test_a_forged_start_on_the_journal_parks_the_instance_instead_of_skipping_runs(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    # Someone who may write the journal appends a Started claiming run 500 with another input.
    workflow_workers.start("w1")
    looper = workflow_app.workflow_handle("looper")

    async def started() -> list[Any]:
        await looper.start("f-1", [0, 2, 1])  # two runs, then it waits for one signal
        await looper.start("f-2", [0, 2, 1])  # untouched: goes on
        await assert_eventually_async(lambda: looper.journal("f-1"), lambda r: bool(r) and isinstance(r[0], Started)
                                      and r[0].run == 3 and len(r) >= 2)
        return await looper.journal("f-1")

    before = asyncio.run(started())
    forged = Started(before[-1].seq + 1, "[500,500,0]", before[-1].at, run=500)
    partition = partition_for("f-1", PARTITIONS)
    producer = kafka(kafka_bootstrap).producer()
    producer.produce(looper.topics.journal, avro.encode(WorkflowJournalEntry("f-1", forged)),
                     f"f-1/{forged.seq}".encode(), partition=partition)
    assert producer.flush(10) == 0
    # The next worker rebuilds f-1 from the journal topic: a start that follows no continue.
    workflow_workers.kill_all()
    workflow_workers.start("w2")

    async def after() -> tuple[Any, Any, Any]:
        status = await assert_eventually_async(lambda: looper.status("f-1", timeout=30),
                                               lambda s: s is WorkflowStatus.PARKED)
        await looper.signal("f-2", "add", 4)
        return status, await looper.value("f-2", timeout=60), await looper.journal("f-1")

    status, value, records = asyncio.run(after())
    assert status is WorkflowStatus.PARKED
    assert value == [2, 4]  # the worker goes on
    # Nothing was dropped: run 3 is still the instance's history, the forged run never began.
    assert records == [*before, forged]


async def assert_eventually_async(read: Any, ok: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if ok(value) or time.monotonic() > deadline:
            assert ok(value), value
            return value
        await asyncio.sleep(0.2)
