"""Workflow recovery on the real broker: a race keeps its journaled winner across SIGKILL,
changed code parks an instance and restored code resumes it, ``version`` gives 1 to an
instance that had passed the point, a 10,000-step loop recovers mid-way, a body that catches
its cancellation ends Finished, and ``Retry.forever``'s deadline counts from the stored start
across a restart."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tidings import App
from tidings.codec import avro
from tidings.core.workflow import Ended, ErrorKind, Faulted, Finished, Started, WorkflowStatus
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.workflow_apps import Calls
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def journal(bootstrap: str, handle_: Any, instance_id: str) -> list[Any]:
    """The journal records of one instance, as stored in its journal topic."""
    entries = [avro.decode_as(r.value, WorkflowJournalEntry) for r in read_topic(bootstrap, handle_.topics.journal)]
    return [e.record for e in entries if e.instance_id == instance_id]  # type: ignore[attr-defined]


def test_a_race_replays_its_journaled_winner_after_sigkill(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    worker = workflow_workers.start()
    racer = workflow_app.workflow_handle("racer")

    async def start() -> None:
        await racer.start("r-sleep", 0.5)  # no "go" before the kill: the sleep wins
        await racer.start("r-signal", 3.0)
        await racer.signal("r-signal", "go", 7, timeout=60)  # stored before the sleep is due

    run(start())
    winners = assert_eventually(
        lambda: {line.split(" ", 2)[0].split("/")[1]: line.split(" ", 2)[2] for line in calls.lines("winner")}
        if len(calls.lines("winner")) >= 2 else None,
        timeout=60, message=workflow_workers.log_tail())
    assert winners == {"r-sleep": "sleep", "r-signal": "signal 7"}
    worker.kill()
    time.sleep(3.0)  # the r-signal sleep is due while no worker runs

    async def finish() -> list[Any]:
        # Sent while no worker runs: on restart "go" is stored after the journaled winner.
        await racer.start("r-late", 60.0)  # a third instance, to show a live race still works
        sends = asyncio.ensure_future(asyncio.gather(
            racer.signal("r-sleep", "go", 1, timeout=90),
            racer.signal("r-sleep", "finish", True, timeout=90),
            racer.signal("r-signal", "finish", True, timeout=90),
        ))
        await asyncio.sleep(0.5)
        workflow_workers.start("w1-restarted", data_dir=worker.data_dir)
        await sends
        await racer.signal("r-late", "go", 3, timeout=90)
        await racer.signal("r-late", "finish", True, timeout=90)
        return await asyncio.gather(*(racer.value(i, 90) for i in ("r-sleep", "r-signal", "r-late")))

    assert run(finish()) == ["sleep", "signal 7", "signal 3"], workflow_workers.log_tail()
    noted = [line.split(" ", 2)[2] for line in calls.lines("winner")]
    # A winner noted again after the restart (its result not yet journaled) is the same winner.
    assert set(noted) == {"sleep", "signal 7", "signal 3"}


def test_an_inserted_step_parks_the_instance_restored_code_resumes_it_and_version_gives_1_to_it(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    evolving = workflow_app.workflow_handle("evolving")
    monkeypatch.setenv("WORKFLOW_VARIANT", "original")
    worker = workflow_workers.start()
    run(evolving.start("old"))
    # Started, the activity's start and result, the signal wait's start: waiting at position 2.
    assert_eventually(lambda: len(journal(kafka_bootstrap, evolving, "old")) >= 4,
                      timeout=60, message=workflow_workers.log_tail())
    worker.kill()

    monkeypatch.setenv("WORKFLOW_VARIANT", "inserted")
    inserted = workflow_workers.start("w-inserted", data_dir=worker.data_dir)
    assert run(evolving.status("old", timeout=90)) is WorkflowStatus.PARKED, workflow_workers.log_tail()
    run(evolving.signal("old", "next", 5, timeout=60))  # a parked instance still stores signals
    inserted.kill()

    monkeypatch.setenv("WORKFLOW_VARIANT", "original")
    restored = workflow_workers.start("w-restored", data_dir=worker.data_dir)
    # Resumed: it takes the signal stored while parked and finishes.
    assert run(evolving.value("old", 90)) == [1, 1, 5], workflow_workers.log_tail()
    run(evolving.start("old-2"))
    assert_eventually(lambda: len(journal(kafka_bootstrap, evolving, "old-2")) >= 4,
                      timeout=60, message=workflow_workers.log_tail())
    restored.kill()

    monkeypatch.setenv("WORKFLOW_VARIANT", "versioned")
    workflow_workers.start("w-versioned", data_dir=worker.data_dir)

    async def versioned() -> list[Any]:
        await evolving.start("new")
        await evolving.signal("new", "next", 8, timeout=90)
        await evolving.signal("old-2", "next", 6, timeout=90)
        return [await evolving.value("old-2", 90), await evolving.value("new", 90)]

    # old-2 had passed the point of the change: version 1, no extra step. A new one gets 2.
    assert run(versioned()) == [[1, 1, 6], [2, 1, 8]], workflow_workers.log_tail()
    assert [line.split(" ")[0] for line in calls.lines("extra")] == ["evolving/new/2"]
    assert run(evolving.status("old-2")) is WorkflowStatus.FINISHED


def test_a_10000_step_loop_recovers_after_sigkill_mid_way(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    worker = workflow_workers.start()
    loop = workflow_app.workflow_handle("long-loop")
    steps = 10_000
    run(loop.start("loop-1", steps))
    assert_eventually(lambda: len(calls.lines("tick")) >= 40, timeout=60, message=workflow_workers.log_tail())
    worker.kill()
    before = len(calls.lines("tick"))
    assert before < steps // 100, "the loop ended before the kill"
    restarted_at = time.monotonic()
    workflow_workers.start("w1-restarted", data_dir=worker.data_dir)
    assert_eventually(lambda: len(calls.lines("tick")) > before, timeout=60, message=workflow_workers.log_tail())
    resumed = time.monotonic() - restarted_at
    outcome = run(loop.result("loop-1", 90))
    finished = time.monotonic() - restarted_at
    print(f"\n10,000-step loop killed after {before} of 100 activities: first activity "
          f"{resumed:.2f} s after the restart (process start included), finished after {finished:.2f} s")
    assert outcome == Finished([steps, sum(range(99, steps, 100))]), workflow_workers.log_tail()
    keys = calls.keys("tick")
    # At most the activity running at the kill is called twice; every other exactly once.
    assert len(set(keys)) == steps // 100 and len(keys) <= steps // 100 + 1


def test_a_body_that_catches_its_cancellation_and_returns_ends_finished(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    forgiving = workflow_app.workflow_handle("forgiving")

    async def scenario() -> tuple[Any, Any]:
        await forgiving.start("fg-1")
        await forgiving.cancel("fg-1", timeout=60)
        return await forgiving.result("fg-1", 60), await forgiving.status("fg-1")

    assert run(scenario()) == (Finished("cleaned up"), WorkflowStatus.FINISHED), workflow_workers.log_tail()
    assert calls.keys("cleanup") == ["forgiving/fg-1/2"]


def test_retry_forever_stops_at_the_deadline_from_the_stored_start_across_a_restart(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    worker = workflow_workers.start()
    stubborn = workflow_app.workflow_handle("stubborn")
    # Long enough that the restarted worker (process start and recovery take several seconds on a
    # loaded machine) is up well before the deadline and makes attempts of its own.
    deadline = 12.0
    run(stubborn.start("st-1", deadline))
    assert_eventually(lambda: len(calls.lines("failing")) >= 3, timeout=60, message=workflow_workers.log_tail())
    worker.kill()
    time.sleep(3.0)
    workflow_workers.start("w1-restarted", data_dir=worker.data_dir)
    restarted = time.time()
    outcome = run(stubborn.result("st-1", 90))
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.DEADLINE_EXCEEDED, outcome

    records = journal(kafka_bootstrap, stubborn, "st-1")
    started = next(r for r in records if isinstance(r, Started)).at / 1000
    ended = next(r for r in records if isinstance(r, Ended)).at / 1000
    attempts = [(int(line.split()[1]), float(line.split()[2])) for line in calls.lines("failing")]
    print(f"\nRetry.forever({deadline} s) across a SIGKILL: ended {ended - started:.2f} s after the stored start, "
          f"restart at +{restarted - started:.2f} s, {len(attempts)} attempts")
    # Measured from the restart it could not end before restart + deadline.
    assert restarted - started > 3.0
    assert deadline - 1.0 <= ended - started <= deadline + 3.0, workflow_workers.log_tail()
    # Every attempt was scheduled before the deadline; one may begin a little late on a busy
    # machine (an attempt deadline-anchored to the restart would run until about +16 s).
    assert all(at - started < deadline + 1.0 for _, at in attempts), attempts
    assert any(number == 1 for number, at in attempts if at > restarted - 1)  # counting began again


def test_an_activity_whose_deadline_passed_while_the_worker_was_down_fails_without_another_attempt(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    worker = workflow_workers.start()
    stubborn = workflow_app.workflow_handle("stubborn")
    deadline = 3.0
    run(stubborn.start("st-down", deadline))
    assert_eventually(lambda: len(calls.lines("failing")) >= 2, timeout=60, message=workflow_workers.log_tail())
    worker.kill()
    killed = time.time()
    started = next(r for r in journal(kafka_bootstrap, stubborn, "st-down") if isinstance(r, Started)).at / 1000
    time.sleep(max(0.0, started + deadline + 1.0 - time.time()))  # down until the deadline is past
    workflow_workers.start("w1-restarted", data_dir=worker.data_dir)
    outcome = run(stubborn.result("st-down", 90))
    assert isinstance(outcome, Faulted) and outcome.error.kind is ErrorKind.DEADLINE_EXCEEDED, outcome
    attempts = [float(line.split()[2]) for line in calls.lines("failing")]
    assert attempts and all(at < killed for at in attempts), (attempts, killed)
