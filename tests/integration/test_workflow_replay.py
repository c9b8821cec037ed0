"""The replay checker on a journal topic a real worker wrote (issue 21 item 8's "must show").

A worker runs ``tests.replay_apps:app`` and leaves five ``checkout`` instances waiting for
their ``ship`` signal (one more ends). ``tidings replay`` with the same code finds nothing;
with the first two steps swapped (``:reordered``) it finds each running instance, from the
topic and from the file ``tidings journal --export`` wrote; with the ``ctx.version`` it
suggests (``:versioned``) it passes. Then the real workers agree: one running the
reordered code parks exactly those instances, and one running the versioned code resumes
them on the old order and runs new ones on the new.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tidings.core.workflow import Finished, WorkflowStatus
from tidings.core.workflow.journal import Ended, StepStarted
from tidings.shell.runtime.topics import apply_topics
from tidings.testing import replay
from tidings.testing.eventually import assert_eventually

from tests import replay_apps
from tests.kafka_clients import kafka
from tests.workers import ROOT, Workers


def _tidings(bootstrap: str, app_id: str, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "TIDINGS_BOOTSTRAP": bootstrap, "TEST_APP_ID": app_id}
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_the_checker_finds_the_reordered_steps_and_the_suggested_version_passes(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = replay_apps.build(app_id)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    handle = app.workflow_handle("checkout")
    ids = [f"order-{n}" for n in range(6)]
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.replay_apps:app")
    versioned_workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.replay_apps:versioned")
    reordered_workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.replay_apps:reordered")
    try:
        workers.start()

        async def start_all() -> None:
            for instance_id in ids:
                await handle.start(instance_id, instance_id)

        asyncio.run(start_all())

        def waiting(instance_id: str) -> bool:
            records = asyncio.run(handle.journal(instance_id))
            return any(isinstance(r, StepStarted) and r.name == "ship" and r.kind == "signal" for r in records)

        assert_eventually(lambda: all(waiting(i) for i in ids), timeout=90, message=workers.log_tail())
        asyncio.run(handle.signal("order-0", "ship"))
        assert asyncio.run(handle.result("order-0", timeout=60)) == Finished(["reserve", "charge", "ship"])
        assert_eventually(lambda: isinstance(asyncio.run(handle.journal("order-0"))[-1], Ended), timeout=30)
        running = ids[1:]

        # The same code: nothing would park.
        code, out, err = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:app", "checkout", "--json")
        report = json.loads(out)
        assert code == 0, err
        assert (report["ok"], report["checked"], report["ended"], report["findings"]) == (True, 5, 1, [])

        # The steps swapped: every running instance would park, at step 1, with the fix.
        code, out, err = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:reordered", "checkout",
                                  "--from-topic", "--json")
        assert code == 1, err
        report = json.loads(out)
        assert [f["instance_id"] for f in report["findings"]] == running
        for finding in report["findings"]:
            assert (finding["verdict"], finding["path"], finding["expected"], finding["found"]) == (
                "parks", "1", "activity 'reserve'", "activity 'charge'")
            assert "if await ctx.version('charge-at-1', 2) >= 2:" in finding["suggestion"]
        code, text, _ = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:reordered", "checkout")
        assert code == 1 and "5 instances would park at step 1" in text

        # The same from an export file.
        export = tmp_path / "checkout.jsonl"
        code, _, err = _tidings(kafka_bootstrap, app_id, "journal", "tests.replay_apps:app", "checkout",
                                "--export", str(export))
        assert code == 0 and "exported 41 records of 6 instances" in err, err
        code, out, _ = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:reordered", "checkout",
                                "--file", str(export), "--json")
        assert code == 1 and [f["instance_id"] for f in json.loads(out)["findings"]] == running
        code, out, _ = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:reordered", "checkout",
                                "--file", str(export), "--limit", "2", "--json")
        assert code == 1 and json.loads(out)["checked"] == 2

        # The suggested ctx.version: it passes, from the topic, the file and the test kit.
        for source in (["--from-topic"], ["--file", str(export)]):
            code, out, err = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:versioned", "checkout",
                                      *source)
            assert code == 0 and "none would park" in out, out + err
        assert replay(replay_apps.build(app_id, "versioned"), "checkout", bootstrap=kafka_bootstrap).ok
        assert not replay(replay_apps.build(app_id, "reordered"), "checkout", bootstrap=kafka_bootstrap).ok

        # What the checker foresaw: a worker running the reordered code parks each of them.
        workers.stop_all()
        reordered_workers.start("w-reordered")

        def parked() -> bool:
            return all(asyncio.run(handle.status(i)) is WorkflowStatus.PARKED for i in running)

        assert_eventually(parked, timeout=90, message=reordered_workers.log_tail())
        assert asyncio.run(handle.status("order-0")) is WorkflowStatus.FINISHED
        reordered_workers.stop_all()

        # And a worker running the versioned code resumes them on the old order, new ones on the new.
        versioned_workers.start("w2")
        asyncio.run(handle.start("order-new", "order-new"))
        for instance_id in [*running, "order-new"]:
            asyncio.run(handle.signal(instance_id, "ship"))
        for instance_id in running:
            outcome = asyncio.run(handle.result(instance_id, timeout=60))
            assert outcome == Finished(["reserve", "charge", "ship"]), versioned_workers.log_tail()
        assert asyncio.run(handle.result("order-new", timeout=60)) == Finished(["charge", "reserve", "ship"])
    finally:
        workers.kill_all()
        reordered_workers.kill_all()
        versioned_workers.kill_all()
        handle.close()


def test_replay_from_the_topic_refuses_an_unknown_workflow_and_reports_foreign_records(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> None:
    app = replay_apps.build(app_id)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    topic = app.workflow_handle("checkout").topics.journal
    producer = kafka(kafka_bootstrap).producer()
    producer.produce(topic, b"\x00garbage", b"order-9/1")  # anyone the ACLs let in may write
    producer.produce(topic, b"x", b"no-seq")
    producer.flush(10)
    code, _, err = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:app", "nope")
    assert code == 2 and "nope" in err
    code, out, err = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:app", "checkout", "--json")
    report = json.loads(out)
    assert code == 1 and report["checked"] == 0 and len(report["errors"]) == 3, report
    assert any("cannot be read" in e for e in report["errors"])
    assert any("is not INSTANCE_ID/SEQ" in e for e in report["errors"])
    assert "order-9: not checked" in report["errors"][-1]
    code, _, err = _tidings(kafka_bootstrap, app_id, "journal", "tests.replay_apps:app", "checkout",
                            "--export", str(tmp_path / "missing" / "f.jsonl"))
    assert code == 2 and err.strip().splitlines()[-1].startswith("tidings: cannot write"), err
    assert "is not INSTANCE_ID/SEQ" in err  # each unreadable record of the topic, one line on stderr
    code, _, err = _tidings(kafka_bootstrap, app_id, "replay", "tests.replay_apps:app", "checkout", "--limit", "x")
    assert code == 2 and "--limit takes a whole number" in err
