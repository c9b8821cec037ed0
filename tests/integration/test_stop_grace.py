"""Stopping within a grace period (issue 19 item 5, docs/operations.md "Stopping").

A worker told to stop (SIGTERM) while an activity attempt outlasts its grace exits within
the grace and abandons the attempt; its journal shows the step started and not ended, so
the restarted worker runs it again and the workflow ends once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.core.workflow import Finished
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.grace_apps import SLOW_S, build
from tests.integration.workflow_apps import Calls
from tests.kafka_clients import kafka
from tests.workers import Workers

#: The grace the tests' workers get (TIDINGS_STOP_GRACE): attempts may run for half of it.
GRACE_S = 8.0
#: Between the worker's exit and this process seeing it.
MARGIN_S = 1.0


@pytest.fixture
def calls(tmp_path: Path) -> Calls:
    return Calls(tmp_path / "calls")


@pytest.fixture
def grace_app(kafka_bootstrap: str, app_id: str, calls: Calls, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = build(app_id, calls.directory)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


@pytest.fixture
def workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, calls: Calls) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.grace_apps:app",
                      env={"TEST_CALLS_DIR": str(calls.directory), "TIDINGS_STOP_GRACE": str(GRACE_S)})
    yield started
    started.kill_all()


def _begun(calls: Calls, activity: str) -> int:
    return sum(line.endswith(" begin") for line in calls.lines(activity))


@pytest.mark.parametrize("workflow, activity", [("blocks", "blocking"), ("times", "blocking"), ("waits", "waiting")],
                         ids=["sync", "sync-timeout", "async"])
def test_a_stop_abandons_an_attempt_past_its_grace_and_the_restart_runs_it_again(
    grace_app: App, workers: Workers, calls: Calls, kafka_bootstrap: str, workflow: str, activity: str
) -> None:
    handle = grace_app.workflow_handle(workflow)
    worker = workers.start("w1", instance_id=f"{grace_app.name}-w1")
    asyncio.run(handle.start("o-1", "ABC"))
    assert_eventually(lambda: _begun(calls, activity) == 1, timeout=60,
                      message=f"the first attempt never began\n{worker.log_tail()}")

    began = time.monotonic()
    assert worker.pid is not None
    os.killpg(worker.pid, signal.SIGTERM)
    code = worker.wait(GRACE_S + MARGIN_S)
    took = time.monotonic() - began
    assert code is not None, f"still running {took:.1f} s after SIGTERM\n{worker.log_tail()}"
    assert code == 0, worker.log_tail()
    assert took < min(GRACE_S + MARGIN_S, SLOW_S), worker.log_tail()
    log = worker.log_path.read_text(errors="replace")
    assert f"abandoned 1 unfinished: activity {workflow}/o-1/" in log, worker.log_tail()
    assert "grace ran out" not in log, worker.log_tail()  # the hard stop was not needed

    worker.start()  # the same data dir and instance id: a restarted pod
    outcome = asyncio.run(handle.result("o-1", timeout=60))
    assert isinstance(outcome, Finished), worker.log_tail()
    lines = calls.lines(activity)
    assert _begun(calls, activity) == 2, lines
    assert [line.split(" ", 2)[2] for line in lines][-1] == "end", lines
    if activity == "waiting":  # the task was cancelled, its attempt's cancellation set
        assert lines[1].endswith("cancelled flag=True"), lines
    else:  # the thread could not be stopped: its end was never reached nor reported
        assert sum(line.endswith(" end") for line in lines) == 1, lines
    assert len(calls.lines("quick")) == 1  # the step that ended before the stop did not run again
    outcomes = read_topic(kafka_bootstrap, f"{grace_app.name}.workflow.{workflow}.outcomes")
    assert [record.key for record in outcomes] == [b"o-1"]
    worker.stop()

