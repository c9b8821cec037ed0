"""A parent SIGKILLed mid-``start_child`` reaches one child, not two.

The window: the parent has produced the child's start, the child has stored it and sent
its acknowledgement, and the parent has not journaled that acknowledgement. The parent's
worker hosts only parents and is frozen (SIGSTOP) before a worker that hosts the child
starts, so the acknowledgement cannot be journaled before the SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal

from tidings import App
from tidings.core.workflow import Started, StepCompleted
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.children_workers import (  # noqa: F401 - fixtures
    ChildrenWorkers,
    apart,
    calls,
    children_app,
    children_workers,
    journal,
    wait_for_child_start,
)
from tests.integration.workflow_apps import Calls


def test_a_parent_sigkilled_between_the_childs_start_and_its_acknowledgement_reaches_one_child(
    children_app: App, children_workers: ChildrenWorkers, kafka_bootstrap: str, calls: Calls
) -> None:
    parent, points = children_app.workflow_handle("parent"), children_app.workflow_handle("points")
    order = apart("k", "1", "2")
    child = f"{order}:1"
    parents = children_workers.start_parents_only("parents")
    asyncio.run(parent.start(order, order))
    wait_for_child_start(children_app, "parent", order, children_workers.log_tail())

    def starts_of_child() -> list[object]:
        return [r for r in read_topic(kafka_bootstrap, points.topics.inbox) if r.key == child.encode()]

    assert_eventually(starts_of_child, timeout=30, message="the parent never produced the child's start")
    assert parents.pid is not None
    os.kill(parents.pid, signal.SIGSTOP)  # frozen: it journals nothing from here on
    children_workers.start_children_only("children")
    # The child stores its start and acknowledges it to the frozen parent.
    assert_eventually(lambda: any(isinstance(r, Started) for r in journal(children_app, "points", child)),
                      timeout=90, message=children_workers.log_tail())
    acks = assert_eventually(
        lambda: [r for r in read_topic(kafka_bootstrap, parent.topics.inbox) if r.key == order.encode()
                 and b"child_started" in (r.value or b"")],
        timeout=30, message=children_workers.log_tail(),
    )
    assert acks
    assert not [r for r in journal(children_app, "parent", order) if isinstance(r, StepCompleted)]
    parents.kill()
    children_workers.start("restarted", data_dir=parents.data_dir)

    result = asyncio.run(parent.value(order, 120))
    assert result == [child, len(f"{order}-again")], children_workers.log_tail()
    # The restarted parent sent the start again (it had no acknowledgement stored) ...
    assert len(starts_of_child()) >= 2
    # ... and reached the same child: one start stored, one call of its activity.
    assert len([r for r in journal(children_app, "points", child) if isinstance(r, Started)]) == 1
    assert calls.keys("points").count(f"points/{child}/1") == 1
    completed = [r.path for r in journal(children_app, "parent", order) if isinstance(r, StepCompleted)]
    assert completed.count("1") == 1
    # That child runs on (it waits for "go"); a second one was never started.
    asyncio.run(points.signal(child, "go"))
    assert asyncio.run(points.value(child, 60)) == len(f"wait-{order}")
