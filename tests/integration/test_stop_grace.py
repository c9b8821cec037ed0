"""Stopping within a grace period (issue 19 item 5, docs/operations.md "Stopping").

A worker told to stop (SIGTERM) while an activity attempt outlasts its grace exits within
the grace and abandons the attempt; its journal shows the step started and not ended, so
the restarted worker runs it again and the workflow ends once.
"""

from __future__ import annotations

import asyncio
import os
import re
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
from tests.integration.grace_apps import ACTIVITIES, build
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


def test_a_stop_abandons_the_attempts_past_its_grace_and_the_restart_runs_them_again(
    grace_app: App, workers: Workers, calls: Calls, kafka_bootstrap: str
) -> None:
    handle = grace_app.workflow_handle("slow")
    worker = workers.start("w1", instance_id=f"{grace_app.name}-w1")
    asyncio.run(handle.start("o-1", None))
    assert_eventually(lambda: all(_begun(calls, activity) == 1 for activity in ACTIVITIES), timeout=60,
                      message=f"the first attempts never began\n{worker.log_tail()}")

    began = time.monotonic()
    assert worker.pid is not None
    os.killpg(worker.pid, signal.SIGTERM)
    code = worker.wait(GRACE_S + MARGIN_S)
    took = time.monotonic() - began
    assert code is not None, f"still running {took:.1f} s after SIGTERM\n{worker.log_tail()}"
    assert code == 0, worker.log_tail()
    log = worker.log_path.read_text(errors="replace")
    abandoned = re.search(r"abandoned 3 unfinished: (.*); each runs again after the restart", log)
    assert abandoned is not None, worker.log_tail()
    assert all(re.fullmatch(r"activity slow/o-1/2\.[123]\.1 \(attempt 1\)", what)
               for what in abandoned[1].split(", ")), abandoned[1]
    assert "grace ran out" not in log, worker.log_tail()  # the hard stop was not needed
    assert calls.lines("waiting")[1].endswith("cancelled flag=True")  # set before the task's cancel
    for activity in ("blocking", "timed"):  # a thread cannot be stopped: it never reached its end
        assert [line.split(" ", 2)[2] for line in calls.lines(activity)] == ["begin"]

    worker.start()  # the same data dir and instance id: a restarted pod
    outcome = asyncio.run(handle.result("o-1", timeout=60))
    assert outcome == Finished([1, "blocking", "timed", "waiting"]), worker.log_tail()
    for activity in ACTIVITIES:
        lines = calls.lines(activity)
        assert _begun(calls, activity) == 2 and lines[-1].endswith(" end"), lines
    assert len(calls.lines("quick")) == 1  # the step that ended before the stop did not run again
    outcomes = read_topic(kafka_bootstrap, f"{grace_app.name}.workflow.slow.outcomes")
    assert [record.key for record in outcomes] == [b"o-1"]

    # An attempt waiting out a retry's backoff has not begun: the stop holds it at once
    # instead of waiting for it, and spends nothing of the attempts' part of the grace.
    retrying = grace_app.workflow_handle("retrying")
    asyncio.run(retrying.start("r-1", None))
    assert_eventually(lambda: len(calls.lines("flaky")) == 1, timeout=60, message=worker.log_tail())
    time.sleep(0.5)  # the failure decided: attempt 2 waits its minute
    began = time.monotonic()
    assert worker.pid is not None
    os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait(GRACE_S) == 0, worker.log_tail()
    assert time.monotonic() - began < GRACE_S / 2 + 0.5, worker.log_tail()
    assert "abandoned 1 unfinished: activity retrying/r-1/1 (not started)" in worker.log_tail(), worker.log_tail()
