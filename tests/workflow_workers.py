"""Fixtures for tests that run workflow workers as child processes against the real broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.shell.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from .integration.workflow_apps import Calls, build

ROOT = Path(__file__).resolve().parent.parent


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
    apply_topics(kafka_bootstrap, app.topic_specs(), out=lambda line: None)
    yield app
    for hosted in app.hosted:
        hosted.close()  # type: ignore[attr-defined]


class WorkflowWorkers:
    """Worker processes of one test's workflow App; every one is killed when the test ends."""

    def __init__(self, bootstrap: str, app_id: str, tmp_path: Path, calls: Calls) -> None:
        self._bootstrap = bootstrap
        self._app_id = app_id
        self._tmp_path = tmp_path
        self._calls = calls
        self.started: list[WorkerProcess] = []

    def start(self, name: str = "w1", *, data_dir: Path | None = None) -> WorkerProcess:
        """Start a worker; ``data_dir`` reuses another's RocksDB (a restart)."""
        worker = WorkerProcess(
            "tests.integration.workflow_apps:app",
            bootstrap=self._bootstrap,
            data_dir=data_dir or self._tmp_path / name,
            log_path=self._tmp_path / f"{name}.log",
            env={"TEST_APP_ID": self._app_id, "TEST_CALLS_DIR": str(self._calls.directory)},
            cwd=ROOT,
        )
        self.started.append(worker)
        return worker.start()

    def stop_all(self) -> None:
        """Stop every worker cleanly (SIGTERM)."""
        for worker in self.started:
            worker.stop()

    def kill_all(self) -> None:
        """SIGKILL every worker."""
        for worker in self.started:
            worker.kill()

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of every worker's log, for assertion messages."""
        tails = []
        for worker in self.started:
            if worker.log_path.exists():
                text = worker.log_path.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"--- {worker.log_path.name}\n" + "\n".join(text))
        return "\n".join(tails)


@pytest.fixture
def workflow_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, calls: Calls) -> Iterator[WorkflowWorkers]:
    """Start worker processes of the workflow test App; all are killed at the end of the test."""
    started = WorkflowWorkers(kafka_bootstrap, app_id, tmp_path, calls)
    yield started
    started.kill_all()
