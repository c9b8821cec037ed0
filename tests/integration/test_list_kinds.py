"""``tidings list`` and ``describe`` for every kind, on a real broker, as an operator runs them.

- a workflow's failed attempts (``StepAttemptFailed``, workflowjournal.v5): journaled while
  it retries, still there after the worker is SIGKILLed mid-retry, counted on after the
  restart (from attempt 1 again: said, not hidden), and in ``tidings journal``; the start
  and end time filters and ``--type`` on the same instances;
- an orchestration's instances (RUNNING, FINISHED) from its journal keys and outcomes;
- schedules (ACTIVE, PAUSED) and one described with its rule, next due time and last runs;
- a flow's elements in flight (RUNNING, WAITING) from the source after the committed offsets;
- an aggregate described: its version, last events and folded state.

Every command is a ``tidings`` child process; hostile arguments get one line and exit 2.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tidings import App, Finished
from tidings.testing.eventually import assert_eventually
from tests.integration.apps import Add, Added
from tests.integration.flow_stage_apps import source_topic
from tests.integration.list_apps import build as build_lists
from tests.integration.orchestration_apps import Happen
from tests.integration.test_workflow_flow_stage import make_source, produce, stage_workers
from tests.integration.flow_stage_apps import build as build_stage
from tests.console_support import ConsoleProcess
from tests.kafka_clients import kafka
from tests.orchestration_workers import (  # noqa: F401 - fixtures
    Executor,
    OrchestrationWorkers,
    orchestration_app,
    orchestration_workers,
)
from tests.workers import ROOT, Workers, applied, test_app, workers  # noqa: F401 - fixtures
from tidings.shell.runtime.topics import apply_topics

LISTS = "tests.integration.list_apps:app"


def tidings(bootstrap: str, app_id: str, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "TIDINGS_BOOTSTRAP": bootstrap, "TEST_APP_ID": app_id, **(env or {})}
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=environment)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    return done.stdout


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(done).splitlines()]


def refused(done: subprocess.CompletedProcess[str], says: str) -> None:
    assert done.returncode == 2, (done.args, done.stdout, done.stderr)
    assert done.stdout == "" and says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


@pytest.fixture
def list_app(kafka_bootstrap: str, app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)  # for the handles
    yield from applied(kafka_bootstrap, build_lists(app_id, tmp_path / "calls"))


def test_attempts_journaled_before_a_sigkill_mid_retry_are_described_after_the_restart(
    kafka_bootstrap: str, app_id: str, list_app: App, tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    env = {"TEST_CALLS_DIR": str(calls)}
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec=LISTS, env=env)
    retrier = list_app.workflow_handle("retrier")
    before_start = int(time.time() * 1000)
    try:
        workers.start("w1")
        asyncio.run(retrier.start("r-1", None))

        def described() -> dict[str, Any]:
            (one,) = lines(tidings(kafka_bootstrap, app_id, "describe", LISTS, "workflow", "retrier", "r-1",
                                   "--json", env=env))
            return one

        def failed_at_least(n: int) -> dict[str, Any]:
            one = described()
            assert one["waiting"] and one["waiting"][0]["failed_attempts"] >= n, one
            return one

        assert_eventually(lambda: failed_at_least(3), timeout=60, interval=0.5)
        workers.kill_all()  # SIGKILL mid-retry: the next attempt was due a second later
        killed = described()
        (wait,) = killed["waiting"]
        journaled = wait["failed_attempts"]
        assert journaled >= 3 and wait["restarts"] == 0
        assert wait["last_failure"]["attempt"] == journaled
        assert wait["last_failure"]["type"] == "ConnectionError"
        assert f"(attempt {journaled})" in wait["last_failure"]["message"]
        assert wait["next_attempt"]["attempt"] == journaled + 1
        text = ok(tidings(kafka_bootstrap, app_id, "describe", LISTS, "workflow", "retrier", "r-1", env=env))
        assert f"{journaled} failed attempts journaled" in text, text
        assert f"last failure: attempt {journaled} at " in text and "ConnectionError: the service is down" in text
        assert f"next attempt: {journaled + 1} due " in text, text

        # The restarted worker replays the journal (the attempt records change nothing) and
        # begins the step at attempt 1 again: describe says a worker began again.
        workers.start("w1")
        after = assert_eventually(lambda: failed_at_least(journaled + 2), timeout=60, interval=0.5)
        (again,) = after["waiting"]
        assert again["restarts"] == 1 and again["last_failure"]["attempt"] < again["failed_attempts"]
        (calls / "succeed").write_text("yes")
        assert isinstance(asyncio.run(retrier.result("r-1", timeout=60)), Finished)
        ended_ms = int(time.time() * 1000)
    finally:
        workers.kill_all()

    journal = ok(tidings(kafka_bootstrap, app_id, "journal", LISTS, "retrier", "r-1", env=env))
    assert journal.splitlines()[0].startswith("retrier r-1: finished after "), journal
    assert "step 1 attempt 1 failed, ConnectionError: the service is down (attempt 1); next attempt at " in journal
    assert journal.count("step 1 attempt 1 failed") == 2, journal  # before the kill and after the restart
    assert "failed attempts journaled before)" in journal, journal
    records = lines(tidings(kafka_bootstrap, app_id, "journal", LISTS, "retrier", "r-1", "--json", env=env))
    attempts = [r for r in records if r["type"] == "step_attempt_failed"]
    assert len(attempts) >= journaled + 2 and all(r["retry_at"] - r["at"] == 1000 for r in attempts)

    # The start and end filters read the status topic's started_at (workflowstatus.v2).
    def listed(*args: str) -> list[dict[str, Any]]:
        return lines(tidings(kafka_bootstrap, app_id, "list", LISTS, "workflow", "--json", *args, env=env))

    (row,) = listed("--type", "retrier", "--started-after", iso(before_start - 1000))
    assert row["status"] == "FINISHED" and before_start - 1000 <= row["started_at_ms"] <= ended_ms
    assert listed("--started-before", iso(before_start - 1000)) == []
    assert [r["id"] for r in listed("--ended-after", iso(before_start), "--ended-before", "2999-01-01")] == ["r-1"]
    assert listed("--ended-before", iso(before_start)) == []
    counted = ok(tidings(kafka_bootstrap, app_id, "list", LISTS, "workflow", "--count", "--ended-after", "1h",
                         env=env))
    assert counted.strip() == "1 instance: FINISHED 1"

    for argv, says in [
        (["list", LISTS, "workflow", "--started-after", "2026-13-01"], "--started-after '2026-13-01' is neither"),
        (["list", LISTS, "workflow", "--ended-before", "yesterday"], "--ended-before 'yesterday' is neither"),
        (["list", LISTS, "workflow", "--type", "nope"], "declares no workflow 'nope'"),
        (["list", LISTS, "workflow", "--limit", "-1"], "--limit '-1'"),
        (["list", LISTS, "kitchen-sink"], "unknown kind 'kitchen-sink'"),
        (["list", LISTS, "schedule"], "declares no schedules"),
        (["list", LISTS, "orchestration", "nope"], "declares no orchestration 'nope'"),
        (["list", LISTS, "flow", "--status", "DONE"], "unknown status 'DONE'"),
        (["list", LISTS, "deadletters", "--started-after", "1h"], "no start or end time"),
        (["describe", LISTS, "workflow", "retrier"], "needs NAME and ID"),
        (["describe", LISTS, "aggregate", "nope", "x"], "declares no aggregate 'nope'"),
        (["describe", LISTS, "schedule", "x"], "declares no schedules"),
        (["describe", LISTS, "workflow", "retrier", "x" * 300], "bytes"),
    ]:
        refused(tidings(kafka_bootstrap, app_id, *argv, env=env), says)


def test_list_shows_orchestration_instances_running_and_finished(
    kafka_bootstrap: str, orchestration_app: App, orchestration_workers: OrchestrationWorkers, tmp_path: Path
) -> None:
    orchestration_workers.start()
    client = orchestration_app.client(kafka_bootstrap)
    executor = Executor(orchestration_app, kafka_bootstrap)
    spec = "tests.integration.orchestration_apps:app"

    async def scenario() -> None:
        await client.send("ledger", "order-done", Happen(order="done", step="placed"))
        deadline = time.monotonic() + 120
        while "done" not in {o.instance for o in await asyncio.to_thread(executor.outcomes)}:
            assert time.monotonic() < deadline, "no outcome for order done"
            await executor.run_once()
            await asyncio.sleep(0.3)
        # Placed, never acted on: it stays running at one event.
        await client.send("ledger", "order-open", Happen(order="open", step="placed"))

    asyncio.run(scenario())
    name = orchestration_app.name

    def both_listed() -> list[dict[str, Any]]:
        rows = lines(tidings(kafka_bootstrap, name, "list", spec, "orchestration", "--json"))
        assert {(r["id"], r["status"]) for r in rows} == {("done", "FINISHED"), ("open", "RUNNING")}, rows
        return rows

    rows = {r["id"]: r for r in assert_eventually(both_listed, timeout=60, interval=0.5)}
    assert rows["open"]["events"] == 1 and rows["done"]["events"] >= 5
    assert rows["done"]["outcome_type"] == "Shipped" and rows["done"]["ended_at"].endswith("Z")
    table = ok(tidings(kafka_bootstrap, name, "list", spec, "orchestrations", "fulfil", "--status", "running"))
    assert table.splitlines()[-1] == "1 instance: RUNNING 1" and "open" in table, table
    finished = lines(tidings(kafka_bootstrap, name, "list", spec, "orchestration", "--json", "--ended-after", "1h"))
    assert [r["id"] for r in finished] == ["done"]
    # The console counts and lists them from the same reader.
    _console_shows(kafka_bootstrap, name, tmp_path, spec, "orchestration", "fulfil", {"FINISHED": 1, "RUNNING": 1},
                   {"done", "open"})


SCHEDULES = "examples.reminder.app:app"


def test_list_and_describe_schedules_with_their_rule_next_due_time_and_last_runs(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> None:
    env = {"REMINDER_APP": app_id}
    ok(tidings(kafka_bootstrap, app_id, "topics", "apply", SCHEDULES, env=env))
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec=SCHEDULES, env=env)
    try:
        workers.start("w1")
        ok(tidings(kafka_bootstrap, app_id, "schedule", "create", SCHEDULES, "ada-often", "reminder",
                   "--input", '"Stretch"', "--every", "1s", env=env))
        ok(tidings(kafka_bootstrap, app_id, "schedule", "create", SCHEDULES, "bob-daily", "reminder",
                   "--input", '"Water"', "--daily", "09:00", "--zone", "Europe/Oslo", env=env))
        ok(tidings(kafka_bootstrap, app_id, "schedule", "pause", SCHEDULES, "bob-daily", env=env))

        def ran_twice() -> dict[str, Any]:
            (one,) = lines(tidings(kafka_bootstrap, app_id, "describe", SCHEDULES, "schedule", "ada-often",
                                   "--json", env=env))
            assert sum(1 for run in one["runs"] if run["started_at"]) >= 2, one
            return one

        described = assert_eventually(ran_twice, timeout=60, interval=0.5)
    finally:
        workers.kill_all()
    assert (described["status"], described["paused"], described["workflow"]) == ("active", False, "reminder")
    assert described["rule_text"].startswith("every 1s") and described["next_due"] is not None
    assert all(run["run_id"].startswith("ada-often@") and run["workflow"] == "reminder" for run in described["runs"])
    text = ok(tidings(kafka_bootstrap, app_id, "describe", SCHEDULES, "schedule", "ada-often", env=env))
    assert "status     active" in text and "next due   " in text and "last runs" in text, text
    assert "start reported " in text, text
    paused = ok(tidings(kafka_bootstrap, app_id, "describe", SCHEDULES, "schedule", "bob-daily", env=env))
    assert "status     paused" in paused and "last runs  none decided yet" in paused, paused

    rows = {r["id"]: r for r in lines(tidings(kafka_bootstrap, app_id, "list", SCHEDULES, "schedule", "--json",
                                              env=env))}
    assert (rows["ada-often"]["status"], rows["bob-daily"]["status"]) == ("ACTIVE", "PAUSED")
    assert rows["ada-often"]["name"] == "reminder" and rows["ada-often"]["next_due"] is not None
    counted = ok(tidings(kafka_bootstrap, app_id, "list", SCHEDULES, "schedules", "--count", env=env))
    assert counted.strip() == "2 schedules: ACTIVE 1, PAUSED 1"
    (only,) = lines(tidings(kafka_bootstrap, app_id, "list", SCHEDULES, "schedule", "reminder", "--status", "paused",
                            "--json", env=env))
    assert only["id"] == "bob-daily"
    refused(tidings(kafka_bootstrap, app_id, "describe", SCHEDULES, "schedule", "nobody", env=env),
            "no schedule 'nobody' was created")
    refused(tidings(kafka_bootstrap, app_id, "list", SCHEDULES, "schedule", "--status", "RUNNING", env=env),
            "unknown status 'RUNNING'")


def test_list_flow_shows_the_elements_in_flight_after_the_committed_offsets(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    calls = tmp_path / "calls"
    make_source(kafka_bootstrap, source_topic(app_id))
    app = build_stage(app_id, calls)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    env = {"TEST_CALLS_DIR": str(calls)}
    spec = "tests.integration.flow_stage_apps:app"
    workers = stage_workers(kafka_bootstrap, app_id, tmp_path, calls, 600.0)
    source = source_topic(app_id)
    try:
        workers.start()
        # Elements that end: once their outcomes are written and their offsets committed,
        # nothing is in flight.
        produce(kafka_bootstrap, source, [(json.dumps(n).encode(), 0) for n in (0, 1, 2)])

        def none_in_flight() -> bool:
            rows = lines(tidings(kafka_bootstrap, app_id, "list", spec, "flow", "--json", env=env))
            assert rows == [], rows
            return True

        # Before the first commit every element is listed (WAITING, RUNNING or WRITTEN).
        assert_eventually(none_in_flight, timeout=90, interval=1.0)
        # 3 waits for a signal (flow_apps.waits): it stays in flight.
        produce(kafka_bootstrap, source, [(b"3", 0)])

        def running_three() -> list[dict[str, Any]]:
            rows = lines(tidings(kafka_bootstrap, app_id, "list", spec, "flow", "--json", env=env))
            assert [(r["workflow_id"], r["status"]) for r in rows] == [("score-3", "RUNNING")], rows
            return rows

        (row,) = assert_eventually(running_three, timeout=90, interval=1.0)
        assert row["id"] == f"{source}/0@3" and row["name"] == "numbers" and row["workflow"] == "flow-score"
    finally:
        workers.kill_all()
    # With no worker, a new element waits; score-3 is still in flight ahead of it.
    produce(kafka_bootstrap, source, [(b"4", 0)])
    rows = lines(tidings(kafka_bootstrap, app_id, "list", spec, "flow", "numbers", "--json", env=env))
    assert [(r["workflow_id"], r["status"]) for r in rows] == [("score-4", "WAITING"), ("score-3", "RUNNING")]
    counted = ok(tidings(kafka_bootstrap, app_id, "list", spec, "flows", "--count", env=env))
    assert counted.strip() == "2 elements: WAITING 1, RUNNING 1"
    _console_shows(kafka_bootstrap, app_id, tmp_path, spec, "flow", "numbers", {"WAITING": 1, "RUNNING": 1},
                   {f"{source}/0@3", f"{source}/0@4"}, env=env)


def _console_shows(bootstrap: str, app_id: str, tmp_path: Path, spec: str, kind: str, name: str,
                   counts: dict[str, int], ids: set[str], env: dict[str, str] | None = None) -> None:
    """``tidings console`` on ``spec`` counts ``kind`` ``name`` as ``counts`` and lists ``ids``."""
    console = ConsoleProcess(bootstrap, app_id, tmp_path / "console", env=env, app_spec=spec)
    try:
        overview = console.get("/api/overview")
        assert overview.status == 200, overview
        (entry,) = [k for k in overview.json()["kinds"] if (k["kind"], k["name"]) == (kind, name)]
        assert entry["counts"] == counts and entry["total"] == sum(counts.values()), entry
        listed = console.get(f"/api/instances/{kind}?name={name}")
        assert listed.status == 200, listed
        assert {row["id"] for row in listed.json()["rows"]} == ids, listed
        wrong = console.get(f"/api/instances/{kind}?status=NOPE")
        assert wrong.status == 400 and "unknown status" in wrong.json()["error"], wrong
    finally:
        console.stop()


def test_describe_an_aggregate_shows_its_version_last_events_and_state(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    workers.start()
    client = test_app.client(kafka_bootstrap)

    async def send() -> None:
        for amount in (1, 2, 3):
            assert await client.send("tally", "t-1", Add(amount=amount)) == Added(amount=amount)

    asyncio.run(send())
    spec = "tests.integration.apps:app"
    (described,) = lines(tidings(kafka_bootstrap, test_app.name, "describe", spec, "aggregate", "tally", "t-1",
                                 "--json"))
    assert (described["version"], described["events"], described["state_version"]) == (3, 3, 3)
    assert [e["version"] for e in described["last_events"]] == [1, 2, 3]
    assert [json.loads(e["payload"])["amount"] for e in described["last_events"]] == [1, 2, 3]
    assert json.loads(described["state"]) == 6 and described["state_note"] is None
    text = ok(tidings(kafka_bootstrap, test_app.name, "describe", spec, "aggregate", "tally", "t-1"))
    assert text.startswith("tally t-1: version 3, 3 events since ") and "  state           6" in text, text
    refused(tidings(kafka_bootstrap, test_app.name, "describe", spec, "aggregate", "tally", "t-none"),
            "no tally instance 't-none' stored an event")
