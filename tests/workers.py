"""Fixtures for tests that run tidings workers as child processes against the real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.shell.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from .integration.apps import build

ROOT = Path(__file__).resolve().parent.parent

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def test_app(kafka_bootstrap: str, app_id: str) -> Iterator[App]:
    """The test App (account + tally) named for this test, its topics applied."""
    app = build(app_id)
    apply_topics(kafka_bootstrap, app.topic_specs(), out=lambda line: None)
    yield app
    for client in list(app._clients.values()):
        client.close()


@pytest.fixture
def start_worker(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> Iterator[StartWorker]:
    """Start worker processes of the test App; every one is killed at the end of the test."""
    workers: list[WorkerProcess] = []

    def start(name: str = "w1", *, data_dir: Path | None = None) -> WorkerProcess:
        worker = WorkerProcess(
            "tests.integration.apps:app",
            bootstrap=kafka_bootstrap,
            data_dir=data_dir or tmp_path / name,
            log_path=tmp_path / f"{name}.log",
            env={"TEST_APP_ID": app_id},
            cwd=ROOT,
        )
        workers.append(worker)
        return worker.start()

    yield start
    for worker in workers:
        worker.kill()


def run(coroutine):  # noqa: ANN001, ANN201 - a tiny sync bridge for tests
    """Run ``coroutine`` to completion in a fresh event loop."""
    return asyncio.run(coroutine)
