"""Fixtures for tests that run workflow workers as child processes against the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings import App
from tidings.shell.runtime.topics import apply_topics

from .integration.workflow_apps import Calls, build
from .workers import ROOT, Workers  # noqa: F401 - ROOT is re-exported to the tests
from tests.kafka_clients import kafka


@pytest.fixture
def calls(tmp_path: Path) -> Calls:
    """Where the workers' activities record their calls."""
    return Calls(tmp_path / "calls")


@pytest.fixture
def workflow_app(
    kafka_bootstrap: str, app_id: str, calls: Calls, monkeypatch: pytest.MonkeyPatch
) -> Iterator[App]:
    """The workflow test App named for this test, its topics applied; handles use the broker."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = build(app_id, calls.directory)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


class WorkflowWorkers(Workers):
    """Worker processes of one test's workflow App; every one is killed when the test ends."""

    def __init__(
        self, bootstrap: str, app_id: str, tmp_path: Path, calls: Calls, guarantee: str | None = None
    ) -> None:
        super().__init__(bootstrap, app_id, tmp_path, app_spec="tests.integration.workflow_apps:app",
                         env={"TEST_CALLS_DIR": str(calls.directory)}, guarantee=guarantee)


@pytest.fixture
def workflow_workers(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, calls: Calls, guarantee: str
) -> Iterator[WorkflowWorkers]:
    """Start worker processes of the workflow test App under ``guarantee``; all are killed at the end."""
    started = WorkflowWorkers(kafka_bootstrap, app_id, tmp_path, calls, guarantee)
    yield started
    started.kill_all()


def workflow_cli(bootstrap: str, app_id: str, calls: Calls) -> Callable[..., tuple[int, Any]]:
    """``tidings COMMAND tests.integration.workflow_apps:app ARGS...`` as a child process:
    its exit status and its stdout as JSON (its stderr when stdout is empty)."""
    env = {**os.environ, "TIDINGS_BOOTSTRAP": bootstrap, "TEST_APP_ID": app_id,
           "TEST_CALLS_DIR": str(calls.directory)}

    def tidings(*args: str) -> tuple[int, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "tidings.cli.main", args[0], "tests.integration.workflow_apps:app", *args[1:]],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
        )
        return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr

    return tidings
