"""The shop example (examples/shop/app.py) through a real worker process, as the README shows it.

The example's App is named "shop", so its topics and consumer group are the same in every
test: instance ids carry a fresh suffix instead, and each test stops its worker cleanly
(SIGTERM) so the next one's worker need not wait for the group to drop it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from examples.shop.app import ENRICH_NAP, Enriched, app, approve, enrich
from tidings import Finished, WorkflowStatus
from tidings.codec import avro
from tidings.core.workflow.journal import Ended, JournalRecord, Started, StepCompleted, StepStarted, record_type_name
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.errors import WorkflowEnded
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.processes import WorkerProcess
from tidings.testing.topics import read_topic
from tests.workflow_workers import ROOT
from tests.kafka_clients import kafka

#: The approval window the tests give the worker ($SHOP_APPROVAL_WINDOW), in seconds: the README
#: round trip's `tidings signal` is a new process, which took more than 2 s to start and reach
#: the worker on a loaded 2-core machine (the window closed first and the run answered False).
WINDOW_S = 8
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.fixture
def shop(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The shop's topics applied; its handles talk to the session's broker."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield
    for handle in app.workflows:
        handle.close()


@pytest.fixture
def score_log(tmp_path: Path) -> Path:
    """Where the worker's scoring service notes its calls ($SHOP_SCORE_LOG)."""
    return tmp_path / "score-calls.log"


@pytest.fixture
def shop_worker(shop: None, kafka_bootstrap: str, tmp_path: Path, score_log: Path) -> Iterator[WorkerProcess]:
    """``tidings worker examples.shop.app:app`` from the repository root, stopped at the end."""
    worker = WorkerProcess(
        "examples.shop.app:app",
        bootstrap=kafka_bootstrap,
        data_dir=tmp_path / "worker",
        log_path=tmp_path / "worker.log",
        env={"SHOP_SCORE_LOG": str(score_log), "SHOP_APPROVAL_WINDOW": str(WINDOW_S)},
        cwd=ROOT,
    )
    worker.start()
    yield worker
    worker.stop()


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def journal_of(bootstrap: str, topic: str, instance_id: str) -> list[JournalRecord]:
    entries = (avro.decode(stored.value or b"") for stored in read_topic(bootstrap, topic))
    return [e.record for e in entries if isinstance(e, WorkflowJournalEntry) and e.instance_id == instance_id]


def test_enrich_scores_the_order_once_naps_and_returns_its_points_with_the_stored_time(
    kafka_bootstrap: str, shop_worker: WorkerProcess, score_log: Path
) -> None:
    order = fresh("order")

    async def scenario() -> Any:
        await enrich.start(order, "ABC")
        await enrich.start(order, "XYZ")  # a second start stores nothing
        return await enrich.result(order, 60)

    outcome = asyncio.run(scenario())
    assert isinstance(outcome, Finished), shop_worker.log_tail()
    assert isinstance(outcome.value, Enriched) and outcome.value.points == 30
    assert score_log.read_text().splitlines() == [f"enrich/{order}/1 1 ABC"]

    journal = journal_of(kafka_bootstrap, enrich.topics.journal, order)
    assert [record_type_name(r) for r in journal] == [
        "started", "step_started", "step_completed", "step_started", "step_completed",
        "step_started", "step_completed", "ended",
    ]
    started, score, scored, nap, _, now, stored_now, ended = journal
    assert isinstance(started, Started) and started.input == '"ABC"'
    assert isinstance(score, StepStarted) and (score.path, score.kind, score.name) == ("1", "activity", "score")
    assert isinstance(scored, StepCompleted) and scored.result == "30"
    assert isinstance(nap, StepStarted) and (nap.path, nap.kind) == ("2", "timer")
    assert nap.due is not None and nap.due - nap.at == ENRICH_NAP // timedelta(milliseconds=1)
    assert isinstance(now, StepStarted) and (now.path, now.kind) == ("3", "now")
    assert isinstance(stored_now, StepCompleted)
    # The value at is the stored now(), which came after the nap's due time.
    assert outcome.value.at == EPOCH + timedelta(milliseconds=int(stored_now.result))
    assert int(stored_now.result) >= nap.due
    assert isinstance(ended, Ended) and ended.outcome == "finished"
    assert Enriched.model_validate_json(ended.result or "") == outcome.value


def test_approve_gives_the_signalled_answer_or_false_when_its_window_closes(
    kafka_bootstrap: str, shop_worker: WorkerProcess
) -> None:
    yes, late = fresh("yes"), fresh("late")

    async def scenario() -> tuple[Any, Any, Any]:
        await approve.start(yes, "ABC")
        await approve.start(late)
        await approve.signal(yes, "approval", True)
        return await approve.value(yes, 60), await approve.value(late, 60), await approve.status(late)

    assert asyncio.run(scenario()) == (True, False, WorkflowStatus.FINISHED), shop_worker.log_tail()
    with pytest.raises(WorkflowEnded):
        asyncio.run(approve.signal(late, "approval", True))
    journal = journal_of(kafka_bootstrap, approve.topics.journal, late)
    assert [record_type_name(r) for r in journal] == ["started", "step_started", "step_completed", "ended"]
    _, wait, timed_out, ended = journal
    assert isinstance(wait, StepStarted) and (wait.path, wait.kind, wait.name) == ("1", "signal", "approval")
    assert wait.due is not None and wait.due - wait.at == WINDOW_S * 1000
    assert isinstance(timed_out, StepCompleted) and (timed_out.result, timed_out.signal) == ("null", None)
    assert isinstance(ended, Ended) and (ended.outcome, ended.result) == ("finished", "false")
    assert ended.at >= wait.due


def test_the_readme_round_trip_on_the_command_line(shop_worker: WorkerProcess, kafka_bootstrap: str) -> None:
    order, approval = fresh("order-17"), fresh("order-19")
    env = {**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap}

    def tidings(*args: str) -> tuple[int, list[Any]]:
        done = subprocess.run([sys.executable, "-m", "tidings.cli.main", *args],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]

    shop_app = "examples.shop.app:app"
    assert tidings("start", shop_app, "enrich", order, '"ABC"') == (0, [{"started": order, "workflow": "enrich"}])
    code, [result] = tidings("result", shop_app, "enrich", order)
    assert (code, result["outcome"], result["value"]["points"]) == (0, "finished", 30), shop_worker.log_tail()
    at = datetime.fromisoformat(result["value"]["at"])
    assert at.tzinfo is not None and abs(datetime.now(UTC) - at) < timedelta(minutes=1)
    code, printed = tidings("outcomes", shop_app, "enrich")
    assert code == 0 and {"instance_id": order, **result} in printed
    code, journal = tidings("journal", shop_app, "enrich", order, "--json")
    assert (code, journal[0]["type"], journal[0]["input"], journal[-1]["type"]) == (0, "started", '"ABC"', "ended")
    assert json.loads(journal[-1]["result"])["points"] == 30

    assert tidings("start", shop_app, "approve", approval) == (0, [{"started": approval, "workflow": "approve"}])
    assert tidings("signal", shop_app, "approve", approval, "approval", "true") == (
        0, [{"signalled": approval, "signal": "approval"}])
    assert tidings("result", shop_app, "approve", approval) == (0, [{"outcome": "finished", "value": True}])
    assert tidings("status", shop_app, "approve", approval) == (0, [{"status": "FINISHED"}])

    # The cart takes updates (README, docs/workflows.md "Updates").
    cart = fresh("cart-7")
    assert tidings("update", shop_app, "cart", cart, "add_item", '{"sku": "A-1", "qty": 2}', "--start", '"ann"') == (
        0, [{"updated": cart, "update": "add_item", "workflow": "cart", "answer": "completed", "result": 1}])
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "update", shop_app, "cart", cart, "add_item",
                           '{"sku": "B-2", "qty": 0}'], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 1 and "must be positive" in done.stderr and "nothing was stored" in done.stderr
    # Its query reads what it holds (README, docs/workflows.md "Queries").
    assert tidings("query", shop_app, "cart", cart, "items") == (
        0, [{"queried": cart, "query": "items", "workflow": "cart", "result": [{"sku": "A-1", "qty": 2}]}])
    assert tidings("update", shop_app, "cart", cart, "checkout") == (
        0, [{"updated": cart, "update": "checkout", "workflow": "cart", "answer": "completed",
             "result": [{"sku": "A-1", "qty": 2}]}])
    assert tidings("result", shop_app, "cart", cart) == (0, [{"outcome": "finished", "value": [{"sku": "A-1", "qty": 2}]}])
