"""Worker processes and an action executor for the hosted-orchestration tests.

Workers run ``tests.integration.orchestration_apps:app`` (named by ``TEST_APP_ID``); the
executor plays the part of the services the actions are meant for: it reads the actions
topic and stores the ledger event each action asks for, so instances move on by causality
alone (an event is only sent once the action that waits for it was written).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tidings import App
from tidings.codec import avro
from tidings.core.orchestration_records import OrchestrationActions, OrchestrationOutcome
from tidings.testing.topics import read_topic

from .integration.orchestration_apps import REPLIES, Happen, build
from .workers import Workers, applied


class OrchestrationWorkers(Workers):
    """Worker processes of one test's orchestration App; every one is killed when the test ends."""

    def __init__(self, bootstrap: str, app_id: str, tmp_path: Path, guarantee: str | None = None) -> None:
        super().__init__(bootstrap, app_id, tmp_path, app_spec="tests.integration.orchestration_apps:app",
                         guarantee=guarantee)


@pytest.fixture
def orchestration_app(kafka_bootstrap: str, app_id: str) -> Iterator[App]:
    """The orchestration test App named for this test, its topics applied."""
    yield from applied(kafka_bootstrap, build(app_id))


@pytest.fixture
def orchestration_workers(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, guarantee: str
) -> Iterator[OrchestrationWorkers]:
    """Start worker processes of the orchestration App under ``guarantee``; all are killed at the end."""
    started = OrchestrationWorkers(kafka_bootstrap, app_id, tmp_path, guarantee)
    yield started
    started.kill_all()


@dataclass
class Executor:
    """Runs the actions written to the actions topic by storing the ledger events they ask for.

    Each action is executed once per (instance, position, action type), as a consumer that
    dedupes by record key would; ``seen`` keeps every record read, duplicates included.
    """

    app: App
    bootstrap: str
    seen: list[OrchestrationActions] = field(default_factory=list)
    done: set[tuple[str, int, str]] = field(default_factory=set)

    @property
    def actions_topic(self) -> str:
        return f"{self.app.name}.orchestration.fulfil.actions"

    @property
    def outcomes_topic(self) -> str:
        return f"{self.app.name}.orchestration.fulfil.outcomes"

    async def run_once(self) -> int:
        """Read the actions topic, execute what is new; return how many were executed."""
        sends = await self.plan()
        await asyncio.gather(*sends)
        return len(sends)

    async def plan(self) -> list[Awaitable[object]]:
        """Read the actions topic; return the sends that execute what is new (not awaited)."""
        records = await asyncio.to_thread(read_topic, self.bootstrap, self.actions_topic)
        self.seen = [avro.decode_as(r.value, OrchestrationActions) for r in records]
        client = self.app.client(self.bootstrap)
        sends = []
        for written in self.seen:
            for action in written.actions:
                key = (written.instance, written.position, action.type)
                if key in self.done:
                    continue
                self.done.add(key)
                order = json.loads(action.payload)["order"]
                # A different ledger instance per step: the orchestration's events come
                # from several source partitions.
                sends.append(client.send(
                    "ledger", f"{action.type.lower()}-{order}",
                    Happen(order=order, step=REPLIES[action.type]),
                ))
        return sends

    def outcomes(self) -> list[OrchestrationOutcome]:
        records = read_topic(self.bootstrap, self.outcomes_topic)
        return [avro.decode_as(r.value, OrchestrationOutcome) for r in records]
