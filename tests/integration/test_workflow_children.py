"""Child workflows on the real broker: a parent of one definition, children of another, on
other partitions and other workers; results, faults, and the seed's cancellation rules."""

from __future__ import annotations

import asyncio
import time

from tidings import App
from tidings.core.partitioning import partition_for
from tidings.core.workflow import Cancelled, Finished, Started, WorkflowStatus
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import group_assignment, read_topic
from tests.children_workers import (  # noqa: F401 - fixtures
    ChildrenWorkers,
    apart,
    calls,
    children_app,
    children_workers,
    journal,
    wait_for_child_start,
)
from tests.integration.child_apps import PARTITIONS
from tests.integration.workflow_apps import Calls


def test_a_parent_runs_children_of_another_workflow_on_other_partitions_and_other_workers(
    children_app: App, children_workers: ChildrenWorkers, kafka_bootstrap: str, calls: Calls
) -> None:
    children_workers.start("w1")
    children_workers.start("w2")
    parent, points = children_app.workflow_handle("parent"), children_app.workflow_handle("points")
    inbox, child_inbox = parent.topics.inbox, points.topics.inbox

    def split() -> dict[int, str] | None:
        # Both workers hold partitions of both inboxes: who owns what, per topic.
        owners: dict[tuple[str, int], str] = {}
        for topic in (inbox, child_inbox):
            for member, held in group_assignment(kafka_bootstrap, children_app.name, topic).items():
                owners.update({(topic, p): member for p in held})
        members = set(owners.values())
        return owners if len(owners) == 2 * PARTITIONS and len(members) == 2 else None  # type: ignore[return-value]

    owners: dict[tuple[str, int], str] = assert_eventually(split, timeout=90, message=children_workers.log_tail())  # type: ignore[assignment]
    # A parent whose awaited child (step 2) lives on a partition another worker owns.
    order = next(
        candidate for n in range(1000)
        if (candidate := apart(f"o{n}", "1", "2"))
        and owners[(inbox, partition_for(candidate, PARTITIONS))]
        != owners[(child_inbox, partition_for(f"{candidate}:2", PARTITIONS))]
    )

    async def run() -> list[object]:
        await parent.start(order, order)
        return await parent.value(order, 90)  # type: ignore[no-any-return]

    assert asyncio.run(run()) == [f"{order}:1", len(f"{order}-again")]
    # The detached child runs on after its parent ended; it was started once.
    assert asyncio.run(points.status(f"{order}:1")) is WorkflowStatus.RUNNING
    asyncio.run(points.signal(f"{order}:1", "go"))
    assert asyncio.run(points.value(f"{order}:1", 60)) == len(f"wait-{order}")
    assert sorted(calls.keys("points")) == [f"points/{order}:1/1", f"points/{order}:2/1"]
    started = [r for r in journal(children_app, "points", f"{order}:2") if isinstance(r, Started)]
    assert [(s.parent_workflow, s.parent_id, s.parent_path) for s in started] == [("parent", order, "2")]
    # The detached child's late report to its ended parent is ignored, not dead-lettered.
    time.sleep(1.0)
    dead = read_topic(kafka_bootstrap, f"{children_app.name}.deadletter", timeout=10)
    assert dead == [], children_workers.log_tail()


def test_a_child_started_now_and_awaited_later_gives_its_result(
    children_app: App, children_workers: ChildrenWorkers
) -> None:
    children_workers.start()
    later = children_app.workflow_handle("later")
    order = apart("later", "1")

    async def run() -> object:
        await later.start(order, "abcd")
        return await later.value(order, 90)

    assert asyncio.run(run()) == 4


def test_a_faulted_child_fails_the_await_child_faulted(children_app: App, children_workers: ChildrenWorkers) -> None:
    children_workers.start()
    careful = children_app.workflow_handle("careful")

    async def run() -> object:
        await careful.start("c-1", "x")
        return await careful.value("c-1", 90)

    message = asyncio.run(run())
    assert isinstance(message, str)
    assert message.startswith("child_faulted: child workflow points 'c-1:1' faulted")
    assert "no points for boom-x" in message


def test_cancelling_a_parent_cancels_the_child_it_awaits(children_app: App, children_workers: ChildrenWorkers) -> None:
    children_workers.start()
    awaiting, points = children_app.workflow_handle("awaiting"), children_app.workflow_handle("points")
    order = apart("a", "1")

    async def run() -> tuple[object, object]:
        await awaiting.start(order, order)
        while await points.status(f"{order}:1") is not WorkflowStatus.RUNNING:
            await asyncio.sleep(0.05)
        await awaiting.cancel(order)
        return await awaiting.result(order, 60), await points.result(f"{order}:1", 60)

    assert asyncio.run(run()) == (Cancelled(), Cancelled())


def test_a_started_child_that_is_not_awaited_runs_on_when_its_parent_is_cancelled(
    children_app: App, children_workers: ChildrenWorkers
) -> None:
    children_workers.start()
    detached, points = children_app.workflow_handle("detached"), children_app.workflow_handle("points")
    order = apart("d", "1")

    async def run() -> tuple[object, object, object]:
        await detached.start(order, order)
        while await points.status(f"{order}:1") is not WorkflowStatus.RUNNING:
            await asyncio.sleep(0.05)
        await detached.cancel(order)
        cancelled = await detached.result(order, 60)
        await asyncio.sleep(1.0)  # a cancel sent to the child would have arrived by now
        running = await points.status(f"{order}:1")
        await points.signal(f"{order}:1", "go")
        return cancelled, running, await points.result(f"{order}:1", 60)

    assert asyncio.run(run()) == (Cancelled(), WorkflowStatus.RUNNING, Finished(len(f"wait-{order}")))


def test_a_child_whose_start_was_in_flight_when_the_parent_was_cancelled_is_cancelled_too(
    children_app: App, children_workers: ChildrenWorkers
) -> None:
    # Nobody hosts the child yet: its start is produced and unanswered (in flight).
    parents_only = children_workers.start_parents_only("parents")
    awaiting, points = children_app.workflow_handle("awaiting"), children_app.workflow_handle("points")
    order = apart("f", "1")
    asyncio.run(awaiting.start(order, order))
    wait_for_child_start(children_app, "awaiting", order, children_workers.log_tail())
    asyncio.run(awaiting.cancel(order))
    assert asyncio.run(awaiting.result(order, 60)) == Cancelled()
    parents_only.kill()
    children_workers.start("full")
    # The child takes its start, then the parent's cancel, in that order.
    assert asyncio.run(points.result(f"{order}:1", 90)) == Cancelled()


def test_a_parked_parent_that_is_cancelled_cancels_no_child(
    children_app: App, children_workers: ChildrenWorkers
) -> None:
    worker = children_workers.start()
    awaiting, points = children_app.workflow_handle("awaiting"), children_app.workflow_handle("points")
    order = apart("p", "1")

    async def started() -> None:
        await awaiting.start(order, order)
        while await points.status(f"{order}:1") is not WorkflowStatus.RUNNING:
            await asyncio.sleep(0.05)

    asyncio.run(started())
    worker.kill()
    children_workers.start_changed("changed", worker.data_dir)

    async def cancelled() -> tuple[object, object, object]:
        while await awaiting.status(order) is not WorkflowStatus.PARKED:
            await asyncio.sleep(0.05)
        await awaiting.cancel(order)
        outcome = await awaiting.result(order, 60)
        await asyncio.sleep(1.0)  # a cancel sent to the child would have arrived by now
        running = await points.status(f"{order}:1")
        await points.signal(f"{order}:1", "go")
        return outcome, running, await points.result(f"{order}:1", 60)

    assert asyncio.run(cancelled()) == (Cancelled(), WorkflowStatus.RUNNING, Finished(len(f"wait-{order}")))
