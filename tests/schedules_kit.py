"""Fixtures of the schedule tests on the broker: the app of ``schedule_apps.py``, its
workers, and readers of what ran (the ``remind`` activity's log) and what was decided (the
schedule journal)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tidings import App, ScheduleRule
from tidings.codec import avro
from tidings.core.records import EventEnvelope
from tidings.core.schedule import parse_run_id
from tidings.shell.kinds.schedule.handle import ScheduleHandle
from tidings.shell.runtime.topics import apply_topics
from tidings.testing import assert_eventually
from tidings.testing.topics import read_topic

from .integration.schedule_apps import build
from .workers import Workers
from tests.kafka_clients import kafka

SECOND = ScheduleRule.every(timedelta(seconds=1))


@dataclasses.dataclass
class Scheduled:
    app: App
    schedules: ScheduleHandle
    calls: Path
    bootstrap: str
    tmp_path: Path
    app_id: str

    def workers(self, **env: str) -> Workers:
        return Workers(self.bootstrap, self.app_id, self.tmp_path, app_spec="tests.integration.schedule_apps:app",
                       env={"TEST_CALLS_DIR": str(self.calls), **env})

    def runs(self) -> list[tuple[str, datetime, int, dict[str, Any] | str | None]]:
        """(schedule, due, worker pid, input) of every activity call, in call order."""
        path = self.calls / "remind.log"
        found = []
        for line in (path.read_text(encoding="utf-8").splitlines() if path.exists() else []):
            run, _attempt, pid, data = line.split(" ", 3)
            schedule, due = parse_run_id(run)
            found.append((schedule, due, int(pid), json.loads(data)))
        return found

    def dues(self, schedule: str) -> list[datetime]:
        return [due for s, due, _, _ in self.runs() if s == schedule]


@pytest.fixture
def scheduled(kafka_bootstrap: str, app_id: str, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[Scheduled]:
    yield from scheduled_on(kafka_bootstrap, app_id, tmp_path, monkeypatch)


def scheduled_on(bootstrap: str, app_id: str, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Scheduled]:
    """The schedule app on the broker at ``bootstrap`` (its other connection settings, e.g. a
    secured broker's, come from the environment's ``TIDINGS_KAFKA_*``, as a worker's do)."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", bootstrap)
    app, schedules = build(app_id)
    apply_topics(kafka(bootstrap), app.topic_specs(), out=lambda line: None)
    yield Scheduled(app, schedules, tmp_path / "calls", bootstrap, tmp_path, app_id)
    for client in list(app._clients.values()):
        client.close()


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def assert_once_each(dues: list[datetime]) -> None:
    """No due time ran twice, and none was skipped between the first and the last."""
    counts = Counter(dues)
    assert all(n == 1 for n in counts.values()), [d for d, n in counts.items() if n > 1]
    ordered = sorted(counts)
    gaps = [(a, b) for a, b in zip(ordered, ordered[1:]) if b - a != timedelta(seconds=1)]
    assert not gaps, gaps


def assert_one_run_each(scheduled: Scheduled, schedule: str, killed_pid: int | None = None, *,
                        consecutive: bool = True, settle: float = 30.0) -> None:
    """One workflow instance per due time, none skipped, each of whose activities ran.

    Checked until it holds, for up to ``settle`` seconds: a run whose workflow partition the
    restarted worker recovers last may call its activity after later due times have (a lost
    run never does, and a second run never goes away).
    """
    assert_eventually(lambda: _one_run_each(scheduled, schedule, killed_pid, consecutive) or True,
                      timeout=settle, interval=0.5, message=f"one run per due time of {schedule}")


def _one_run_each(scheduled: Scheduled, schedule: str, killed_pid: int | None,
                  consecutive: bool) -> None:
    """The check of :func:`assert_one_run_each`, once.

    The journal's decisions hold each due time once, with no gap between the first and the
    last (the run id is the due time, so that is one instance each). Every decided run but
    the newest few has its activity call (``consecutive=False``: gaps allowed, for policies that
    skip missed due times), and no call is for a due time never decided. An
    activity runs at least once: a due time's activity was called more than once only if all
    but the last calls were on the worker that was killed (they ran, and their result was not journaled).
    """
    dues = [due for runs in decided(scheduled, schedule) for due in runs]
    if consecutive:
        assert_once_each(dues)
    else:
        assert len(dues) == len(set(dues)), dues
    calls: dict[datetime, list[int]] = {}
    for name, due, pid, _ in scheduled.runs():
        if name == schedule:
            calls.setdefault(due, []).append(pid)
    assert set(calls) <= set(dues), sorted(set(calls) - set(dues))
    assert set(sorted(dues)[:-3]) <= set(calls), sorted(set(sorted(dues)[:-3]) - set(calls))
    repeated = {due: pids for due, pids in calls.items() if len(pids) > 1 and not _lost_then_redone(pids, killed_pid)}
    assert not repeated, repeated


def _lost_then_redone(pids: list[int], killed_pid: int | None) -> bool:
    """Whether the calls of one due time are the killed worker's (its results never
    journaled: one, or more if a transaction of its aborted and it redid the batch), then at
    most one by the worker that took its partitions over."""
    return killed_pid is not None and all(pid == killed_pid for pid in pids[:-1])


def decided(scheduled: Scheduled, schedule: str) -> list[list[datetime]]:
    """The runs of each ``RunsDecided`` of ``schedule`` in its journal, in order."""
    found = []
    for record in read_topic(scheduled.bootstrap, f"{scheduled.app.name}.aggregate.schedule.events"):
        event = avro.decode_as(record.value, EventEnvelope)
        if event.aggregate_id == schedule and event.type == "schedule.runs-decided":
            found.append([datetime.fromisoformat(due) for due in json.loads(event.payload)["runs"]])
    return found
