"""Fixtures for the child-workflow tests: the App of ``tests/integration/child_apps.py`` and its workers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings import App
from tidings.core.partitioning import partition_for
from tidings.core.workflow import JournalRecord, StepStarted
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually

from .integration.child_apps import PARTITIONS, build
from .integration.workflow_apps import Calls
from .workers import Workers
from tests.kafka_clients import kafka


@pytest.fixture
def calls(tmp_path: Path) -> Calls:
    """Where the child's activity records its calls."""
    return Calls(tmp_path / "calls")


@pytest.fixture
def children_app(kafka_bootstrap: str, app_id: str, calls: Calls, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The child-workflow App named for this test, every topic applied; handles use the broker."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = build(app_id, calls.directory)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


class ChildrenWorkers(Workers):
    """Workers of the child-workflow App; ``start(..., host_children=False)`` hosts only the parents."""

    def __init__(self, bootstrap: str, app_id: str, tmp_path: Path, calls: Calls) -> None:
        super().__init__(bootstrap, app_id, tmp_path, app_spec="tests.integration.child_apps:app",
                         env={"TEST_CALLS_DIR": str(calls.directory)})

    def start_parents_only(self, name: str) -> Any:
        """Start a worker whose App does not host the child workflow: child starts stay unanswered."""
        return self._start_with(name, TEST_HOST_CHILDREN="0")

    def start_children_only(self, name: str) -> Any:
        """Start a worker whose App hosts only the child workflow."""
        return self._start_with(name, TEST_HOST_PARENTS="0")

    def start_changed(self, name: str, data_dir: Path) -> Any:
        """Restart a worker on ``data_dir`` with the changed body of "awaiting" (its instances park)."""
        return self._start_with(name, data_dir, TEST_PARENT_VARIANT="changed")

    def _start_with(self, name: str, data_dir: Path | None = None, **env: str) -> Any:
        saved = dict(self._env)
        self._env.update(env)
        try:
            return self.start(name, data_dir=data_dir)
        finally:
            self._env = saved


@pytest.fixture
def children_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, calls: Calls) -> Iterator[ChildrenWorkers]:
    """Start worker processes of the child-workflow App; all are killed at the end of the test."""
    started = ChildrenWorkers(kafka_bootstrap, app_id, tmp_path, calls)
    yield started
    started.kill_all()


def apart(prefix: str, *paths: str) -> str:
    """An instance id whose children at ``paths`` all live on partitions other than its own."""
    for n in range(1000):
        candidate = f"{prefix}-{n}"
        home = partition_for(candidate, PARTITIONS)
        if all(partition_for(f"{candidate}:{path}", PARTITIONS) != home for path in paths):
            return candidate
    raise AssertionError("no such id")


def journal(app: App, workflow: str, instance_id: str) -> list[JournalRecord]:
    """The instance's journal as the topic holds it now."""
    return asyncio.run(app.workflow_handle(workflow).journal(instance_id))


def wait_for_child_start(app: App, workflow: str, instance_id: str, log: Any) -> None:
    """Wait until the instance has journaled the start of a child step."""
    assert_eventually(
        lambda: any(isinstance(r, StepStarted) and r.kind == "child_start" for r in journal(app, workflow, instance_id)),
        timeout=60, message=log,
    )
