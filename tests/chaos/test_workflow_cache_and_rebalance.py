"""Workflow instances leave a worker's memory and come back intact: evicted from a bounded
cache they are rebuilt by replay on their next input, and moved to another worker by a
rebalance (or by a SIGKILL) they are rebuilt there from the journal. Either way no completed
activity runs again, and every instance ends with the value its journal and inputs give.

The bodies note each entry with the worker's pid (see ``_cache_and_rebalance_workflows`` in
``tests/integration/workflow_apps.py``): a body runs again from its top only when its instance
is rebuilt by replay, so these notes show where and how often that happened.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any


from tidings import App
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.workflow import StepCompleted, StepStarted
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import group_assignment, read_topic
from tests.integration.workflow_apps import EVICTED_CACHE, PARTITIONS, Calls
from tests.prometheus import free_port, scrape
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401

#: The paths of the steps of "evicted" and "moved": first activity, signal wait, (nap,) second.
FIRST, WAIT = "1", "2"
EVICTED_SECOND, MOVED_SECOND = "3", "4"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def journals(bootstrap: str, handle_: Any) -> dict[str, list[Any]]:
    """Every instance's journal records, as stored in the journal topic now."""
    found: dict[str, list[Any]] = {}
    for stored in read_topic(bootstrap, handle_.topics.journal):
        entry = avro.decode_as(stored.value, WorkflowJournalEntry)
        found.setdefault(entry.instance_id, []).append(entry.record)  # type: ignore[attr-defined]
    return found


def reached(records: Iterable[Any], kind: type, path: str) -> bool:
    """Whether ``records`` hold a record of ``kind`` for the step at ``path``."""
    return any(isinstance(r, kind) and r.path == path for r in records)


def all_waiting(bootstrap: str, handle_: Any, ids: Iterable[str]) -> bool:
    """Assert that every instance's journal shows it waiting for signal "go" (its first activity done)."""
    found = journals(bootstrap, handle_)
    behind = sorted(i for i in ids if not reached(found.get(i, []), StepStarted, WAIT))
    assert not behind, f"not waiting for the signal: {behind}"
    return True


def entries(calls: Calls, workflow: str) -> list[tuple[int, int]]:
    """``(n, pid)`` for every time a body of ``workflow`` was entered: its start, then each replay."""
    path = calls.directory / f"{workflow}-entered.log"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [(int(n), int(pid)) for n, pid in (line.split() for line in lines)]


def calls_by(calls: Calls, activity: str, key: str) -> list[tuple[int, str]]:
    """``(pid, what)`` of every call of ``activity`` for idempotency key ``key``, in call order."""
    found = []
    for line in calls.lines(activity):
        parts = line.split()
        if parts[0] == key:
            found.append((int(parts[2]), " ".join(parts[3:])))
    return found


def test_instances_evicted_from_a_small_cache_are_rebuilt_by_replay_without_running_activities_again(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    """40 instances wait for a signal on a worker that keeps 5 in memory; signalled, all finish.

    The first activity's result comes back from the journal (the second activity adds the
    signal to it) without the activity running again, and at least 35 bodies were entered a
    second time: those instances had been evicted and were rebuilt by replay.
    """
    port = free_port()
    worker = workflow_workers.start(env={"TIDINGS_METRICS_PORT": str(port)})
    evicted = workflow_app.workflow_handle("evicted")
    count = 40
    ids = {n: f"e-{n}" for n in range(count)}

    async def start() -> None:
        await asyncio.gather(*(evicted.start(instance_id, n) for n, instance_id in ids.items()))

    run(start())
    assert_eventually(lambda: len(calls.lines("evicted-first")) >= count, timeout=60, interval=0.2,
                      message=workflow_workers.log_tail())
    # Each result is journaled within a second or so of its call; far longer means it was lost.
    assert_eventually(lambda: all_waiting(kafka_bootstrap, evicted, ids.values()),
                      timeout=30, interval=0.5, message="every instance waits for its signal")
    # Started once each, not rebuilt yet: nothing is evicted while an activity runs.
    assert sorted(entries(calls, "evicted")) == [(n, worker.pid) for n in range(count)], workflow_workers.log_tail()
    # The journal shows a step's records once they are produced; the instance leaves memory
    # only once they are durable (acknowledged, their statuses sent, RocksDB written). A
    # signal sooner finds it still there, so wait until the worker says the cache is bounded.
    cached = ("tidings_instances", frozenset({"kind": "workflow", "name": "evicted", "state": "cached"}.items()))
    assert_eventually(lambda: scrape(port).get(cached, EVICTED_CACHE + 1) <= EVICTED_CACHE, timeout=30,
                      interval=0.2, message=f"at most {EVICTED_CACHE} instances in memory")

    async def signal_then_values() -> list[Any]:
        await asyncio.gather(*(evicted.signal(instance_id, "go", n + 1, timeout=60) for n, instance_id in ids.items()))
        return list(await asyncio.gather(*(evicted.value(instance_id, 60) for instance_id in ids.values())))

    values = run(signal_then_values())
    assert values == [[100 * n, n + 1, 101 * n + 1] for n in range(count)], workflow_workers.log_tail()
    assert Counter(calls.keys("evicted-first")) == {f"evicted/{i}/{FIRST}": 1 for i in ids.values()}
    assert Counter(calls.keys("evicted-second")) == {f"evicted/{i}/{EVICTED_SECOND}": 1 for i in ids.values()}

    entered = Counter(n for n, _ in entries(calls, "evicted"))
    rebuilt = sorted(n for n in range(count) if entered[n] == 2)
    print(f"\n{count} instances with a cache of {EVICTED_CACHE}: {len(rebuilt)} rebuilt by replay on their signal")
    # Once at the start, at most once more on the signal (an instance in use is never evicted).
    assert set(entered) == set(range(count)) and set(entered.values()) <= {1, 2}, entered
    # After the last of them had started waiting only EVICTED_CACHE stayed in memory.
    assert len(rebuilt) >= count - EVICTED_CACHE, entered


def test_instances_moved_to_a_second_worker_are_rebuilt_there_and_move_back_when_it_is_killed(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    """30 instances wait on w1; w2 joins the group and takes part of the partitions.

    w2 rebuilds the instances of its partitions from the journal topic (its RocksDB is
    empty) and runs their second activity after the signal and the nap, without running
    their first again. w2 is then SIGKILLed while its slow second activities run: w1 takes
    the partitions back, catching up with what w2 journaled, runs the interrupted activities
    again (at least once, as documented) and never those whose completion was journaled.
    """
    w1 = workflow_workers.start("w1")
    moved = workflow_app.workflow_handle("moved")
    count = 30
    ids = {n: f"m-{n}" for n in range(count)}
    slow = {n for n in range(count) if n % 3 == 1}
    partition = {n: partition_for(instance_id, PARTITIONS) for n, instance_id in ids.items()}
    # Every partition holds slow and quick instances, wherever it moves.
    assert all({n in slow for n in ids if partition[n] == p} == {True, False} for p in range(PARTITIONS))

    async def start() -> None:
        await asyncio.gather(*(moved.start(instance_id, n) for n, instance_id in ids.items()))

    run(start())
    assert_eventually(lambda: all_waiting(kafka_bootstrap, moved, ids.values()),
                      timeout=60, interval=0.5, message="every instance waits for its signal")

    w2 = workflow_workers.start("w2")

    def split_between_two() -> dict[str, set[int]]:
        assignment = group_assignment(kafka_bootstrap, workflow_app.name, moved.topics.inbox)
        assert len(assignment) == 2 and all(assignment.values()), assignment
        return assignment

    assignment = assert_eventually(split_between_two, timeout=60, interval=0.5)
    assert set().union(*assignment.values()) == set(range(PARTITIONS)), assignment

    async def signal_all() -> None:
        await asyncio.gather(*(moved.signal(instance_id, "go", n + 1, timeout=60) for n, instance_id in ids.items()))

    run(signal_all())
    signalled = time.monotonic()
    # Which partitions w2 took: those whose instances it rebuilt (entered their bodies).
    w2_partitions = {partition[n] for n, pid in entries(calls, "moved") if pid == w2.pid}
    assignment = assert_eventually(split_between_two, timeout=60, interval=0.5)
    assert w2_partitions in list(assignment.values()), (w2_partitions, assignment)
    on_w2 = {n for n in ids if partition[n] in w2_partitions}

    def second(n: int) -> list[tuple[int, str]]:
        return calls_by(calls, "moved-second", f"moved/{ids[n]}/{MOVED_SECOND}")

    def w2_busy() -> dict[str, list[Any]] | None:
        # Every quick second activity of w2 journaled as completed, every slow one begun on w2.
        found = journals(kafka_bootstrap, moved)
        quick_done = all(reached(found.get(ids[n], []), StepCompleted, MOVED_SECOND) for n in on_w2 - slow)
        slow_begun = all((w2.pid, "begin") in second(n) for n in on_w2 & slow)
        return found if quick_done and slow_begun else None

    before_kill = assert_eventually(w2_busy, timeout=60, interval=0.2, message=workflow_workers.log_tail())
    w2.kill()
    killed_after = time.monotonic() - signalled
    completed = {n for n in ids if reached(before_kill.get(ids[n], []), StepCompleted, MOVED_SECOND)}
    interrupted = {n for n in on_w2 & slow if (w2.pid, "end") not in second(n)}
    print(f"\nw2 took partitions {sorted(w2_partitions)} ({len(on_w2)} instances); killed {killed_after:.2f} s "
          f"after the signals were stored, interrupting {len(interrupted)} slow activities")
    assert interrupted == on_w2 & slow, "the kill came after a slow activity of w2 had ended: make it slower"

    async def values() -> list[Any]:
        return list(await asyncio.gather(*(moved.value(instance_id, 90) for instance_id in ids.values())))

    assert run(values()) == [[100 * n, n + 1, 101 * n + 1] for n in range(count)], workflow_workers.log_tail()

    # The first activity ran once per instance, on w1, before w2 existed: never again.
    for n, instance_id in ids.items():
        assert calls_by(calls, "moved-first", f"moved/{instance_id}/{FIRST}") == [(w1.pid, "")], n
    # w2 rebuilt exactly the instances of its partitions, and ran their second activity.
    assert {n for n, pid in entries(calls, "moved") if pid == w2.pid} == on_w2
    assert all((w2.pid, "begin") in second(n) for n in on_w2)
    # A second activity journaled as completed before the kill never ran again, on any worker.
    assert on_w2 - slow <= completed
    for n in completed:
        assert [what for _, what in second(n)] == ["begin", "end"], (n, second(n))
    # The ones the kill interrupted were rebuilt on w1 and run again there, to their end.
    entered_on_w1 = Counter(n for n, pid in entries(calls, "moved") if pid == w1.pid)
    for n in interrupted:
        assert entered_on_w1[n] >= 2, (n, entries(calls, "moved"))  # its start, and the take-over
        assert (w1.pid, "begin") in second(n) and (w1.pid, "end") in second(n), (n, second(n))
    for n in ids:
        assert any(what == "end" for _, what in second(n)), (n, second(n))
