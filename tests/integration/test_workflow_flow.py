"""WorkflowFlow on the real broker: a stream of elements through a hosted workflow in a worker process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings import App, Cancelled, Faulted, Finished, WorkflowFlow, WorkflowHandle
from tidings.core.workflow import Outcome
from tidings.shell.runtime.topics import apply_topics
from tests.integration.flow_apps import build, faults, waits
from tests.workers import Workers
from tests.kafka_clients import kafka


@pytest.fixture
def calls_dir(tmp_path: Path) -> Path:
    return tmp_path / "calls"


@pytest.fixture
def flow_app(kafka_bootstrap: str, app_id: str, calls_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = build(app_id, calls_dir)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


@pytest.fixture
def flow_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, calls_dir: Path) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.flow_apps:app",
                      env={"TEST_CALLS_DIR": str(calls_dir)})
    yield started
    started.kill_all()


class Watched:
    """The real handle, counting elements between their start and their yielded outcome.

    Cancels each ``waits`` element once its start is stored, so it ends Cancelled.
    """

    def __init__(self, handle: WorkflowHandle) -> None:
        self.handle = handle
        self.in_flight = 0
        self.most_in_flight = 0
        self.starts: list[str] = []
        self._cancels: list[asyncio.Future[None]] = []

    async def start(self, instance_id: str, input: Any = None) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.starts.append(instance_id)
        await self.handle.start(instance_id, input)
        if waits(input):
            self._cancels.append(asyncio.ensure_future(self.handle.cancel(instance_id, timeout=60)))

    async def result(self, instance_id: str, timeout: float | None = None) -> Outcome:
        return await self.handle.result(instance_id, timeout)

    def yielded(self) -> None:
        self.in_flight -= 1


async def numbers(count: int) -> AsyncIterator[int]:
    for n in range(count):
        yield n


def most_at_once(lines: list[str]) -> int:
    """The most ``score`` calls between their begin and end lines at one time."""
    events = sorted((float(line.split()[3]), 1 if line.startswith("begin") else -1) for line in lines)
    running = most = 0
    for _, step in sorted(events, key=lambda event: (event[0], event[1])):
        running += step
        most = max(most, running)
    return most


def test_fifty_elements_through_a_workflow_with_parallelism_8_come_out_in_order(
    flow_app: App, flow_workers: Workers, calls_dir: Path
) -> None:
    flow_workers.start()
    watched = Watched(flow_app.workflow_handle("flow-score"))
    stage = WorkflowFlow.run(watched, lambda n: f"score-{n}", 8, timeout=60)

    async def scenario() -> list[tuple[str, Outcome]]:
        got = []
        async for pair in stage(numbers(50)):
            watched.yielded()
            got.append(pair)
        await asyncio.gather(*watched._cancels)
        return got

    got = asyncio.run(scenario())
    log = flow_workers.log_tail()
    assert [instance_id for instance_id, _ in got] == [f"score-{n}" for n in range(50)], log
    for n, (_, outcome) in enumerate(got):
        if waits(n):
            assert outcome == Cancelled(), (n, outcome)
        elif faults(n):
            assert isinstance(outcome, Faulted) and f"element {n} cannot be scored" in outcome.error.message, (n, outcome)
        else:
            assert outcome == Finished(n * n), (n, outcome)
    assert watched.starts == [f"score-{n}" for n in range(50)]
    assert watched.most_in_flight == 8
    lines = (calls_dir / "score.log").read_text().splitlines()
    begun = sorted(int(line.split()[2]) for line in lines if line.startswith("begin"))
    assert begun == [n for n in range(50) if not waits(n)]  # once each; a cancelled one never scored
    # Observed 8 here; at least 2 shows the elements really ran side by side, at most 8 the bound.
    assert 2 <= most_at_once(lines) <= 8


def test_a_workflow_that_does_not_end_within_the_timeout_fails_the_stage_and_later_finishes(
    flow_app: App, flow_workers: Workers
) -> None:
    flow_workers.start()
    handle = flow_app.workflow_handle("flow-score")
    stage = WorkflowFlow.run(handle, lambda n: f"slow-{n}", 4, timeout=1)

    async def scenario() -> tuple[list[str], Outcome]:
        got: list[str] = []
        # Warm the worker up first, so the 1 s below is the workflow's, not the worker's start.
        await handle.start("warm", 0)
        await handle.result("warm", 60)
        with pytest.raises(TimeoutError, match="'slow-3' did not end within 1.0 s"):
            async for instance_id, _ in stage(numbers(6)):  # 3 waits for its signal
                got.append(instance_id)
        await handle.signal("slow-3", "go", 1)
        return got, await handle.result("slow-3", 60)

    got, later = asyncio.run(scenario())
    assert got == ["slow-0", "slow-1", "slow-2"], flow_workers.log_tail()
    assert later == Finished(9)
