"""Fixtures for tests that run tidings workers as child processes against the real broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.shell.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from .integration.apps import build

ROOT = Path(__file__).resolve().parent.parent

@pytest.fixture
def test_app(kafka_bootstrap: str, app_id: str) -> Iterator[App]:
    """The test App (account + tally) named for this test, its topics applied."""
    app = build(app_id)
    apply_topics(kafka_bootstrap, app.topic_specs(), out=lambda line: None)
    yield app
    for client in list(app._clients.values()):
        client.close()


class Workers:
    """Worker processes of one test's App; every one is killed when the test ends.

    Args:
        bootstrap: The broker.
        app_id: The App's name (``TEST_APP_ID`` in the worker).
        tmp_path: Where each worker keeps its data directory and log.
        app_spec: The ``MODULE:APP`` the workers run.
        env: More environment for the workers.
    """

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        tmp_path: Path,
        *,
        app_spec: str = "tests.integration.apps:app",
        env: dict[str, str] | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._tmp_path = tmp_path
        self._app_spec = app_spec
        self._env = {"TEST_APP_ID": app_id, **(env or {})}
        self.started: list[WorkerProcess] = []

    def start(
        self, name: str = "w1", *, data_dir: Path | None = None, instance_id: str | None = None
    ) -> WorkerProcess:
        """Start a worker; ``data_dir`` reuses another's RocksDB (a restart)."""
        env = dict(self._env)
        if instance_id:
            env["TIDINGS_INSTANCE_ID"] = instance_id
        worker = WorkerProcess(
            self._app_spec,
            bootstrap=self._bootstrap,
            data_dir=data_dir or self._tmp_path / name,
            log_path=self._tmp_path / f"{name}.log",
            env=env,
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
def workers(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[Workers]:
    """Start worker processes of the test App; every one is killed at the end of the test."""
    started = Workers(kafka_bootstrap, app_id, tmp_path)
    yield started
    started.kill_all()
