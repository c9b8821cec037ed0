"""``tidings.Client``'s workflow calls and ``outcomes``, and ``tidings outcomes``, on a real worker."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import aclosing
from datetime import datetime
from typing import Any

import pytest

from tidings import App, Cancelled, Client, Faulted, Finished, WorkflowStatus
from tidings.core.workflow import Outcome
from tidings.errors import LimitError, ReplyTimeout, WorkflowCancelled, WorkflowFaulted, WorkflowNotFound
from tidings.testing.eventually import assert_eventually, assert_eventually_async
from tidings.testing.topics import read_topic
from tests.integration.workflow_apps import Calls
from tests.workflow_workers import ROOT, WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def follower_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tidings-follow")]


async def end_three_ways(client: Client) -> dict[str, Outcome]:
    """Finish o-1 and o-2, fault f-1, cancel bk-1; leave c-1 running. Return the outcomes by id."""
    await client.start("one-activity", "o-1", 1)
    await client.start("one-activity", "o-2", 5)
    await client.start("faulty", "f-1", "boom")
    await client.start("booking", "bk-1")
    await client.start("collector", "c-1", 1)
    while await client.status("booking", "bk-1") is None:
        await asyncio.sleep(0.05)
    await client.cancel("booking", "bk-1")
    return {
        "o-1": await client.result("one-activity", "o-1", 60),
        "o-2": await client.result("one-activity", "o-2", 60),
        "f-1": await client.result("faulty", "f-1", 60),
        "bk-1": await client.result("booking", "bk-1", 60),
    }


async def collect(client: Client, workflow: str) -> list[tuple[str, Outcome]]:
    async def read() -> list[tuple[str, Outcome]]:
        return [item async for item in client.outcomes(workflow, follow=False)]

    return await asyncio.wait_for(read(), 60)  # without follow it must end by itself


def test_the_client_starts_signals_cancels_and_waits_by_workflow_name_or_handle(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    one = workflow_app.workflow_handle("one-activity")

    async def scenario() -> list[Any]:
        await client.start(one, "o-1", 1)
        await client.start("approve", "a-1")
        await client.start("booking", "bk-1")
        await client.signal("approve", "a-1", "approval", True)
        while await client.status("booking", "bk-1") is None:
            await asyncio.sleep(0.05)
        await client.cancel("booking", "bk-1")
        return [
            await client.result("one-activity", "o-1", 60),
            await client.value(one, "o-1", 60),
            await client.status("one-activity", "o-1"),
            await client.value("approve", "a-1", 60),
            await client.result("booking", "bk-1", 60),
            await client.status("booking", "bk-1"),
        ]

    try:
        assert run(scenario()) == [Finished(2), 2, WorkflowStatus.FINISHED, True, Cancelled(),
                                   WorkflowStatus.CANCELLED], workflow_workers.log_tail()
        with pytest.raises(WorkflowCancelled):
            run(client.value("booking", "bk-1", 10))
        run(client.start("faulty", "f-1", "boom"))
        with pytest.raises(WorkflowFaulted, match="boom"):
            run(client.value("faulty", "f-1", 60))
        with pytest.raises(WorkflowNotFound):
            run(client.result("approve", "nobody", 30))
        with pytest.raises(WorkflowNotFound):
            run(client.signal("approve", "nobody", "approval", True))
        with pytest.raises(WorkflowNotFound):
            run(client.cancel("approve", "nobody"))
        assert run(client.status("approve", "nobody")) is None
        with pytest.raises(LookupError, match=r"has no workflow 'nope'; known: .*one-activity"):
            run(client.start("nope", "x-1"))
    finally:
        client.close()
    # close() closed the workflow clients it opened (a later call would make new ones).
    assert kafka_bootstrap not in one._clients


def test_outcomes_without_follow_gives_each_ended_instance_once_though_a_restarted_worker_republished_it(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tidings.shell.client.client")
    first = workflow_workers.start("w1")
    client = Client(kafka_bootstrap, app=workflow_app)
    try:
        expected = run(end_three_ways(client))
        assert isinstance(expected["f-1"], Faulted) and "boom" in expected["f-1"].error.message
        # A worker with an empty store recovers every instance from the journal and
        # publishes each outcome it finds there again.
        first.stop()
        workflow_workers.start("w2")
        topics = {name: workflow_app.workflow_handle(name).topics.outcomes
                  for name in ("one-activity", "faulty", "booking")}

        def republished() -> Counter[bytes]:
            keys = Counter(r.key for topic in topics.values() for r in read_topic(kafka_bootstrap, topic))
            assert set(keys) == {b"o-1", b"o-2", b"f-1", b"bk-1"} and min(keys.values()) >= 2, keys
            return keys

        assert_eventually(republished, timeout=60, message="every outcome published again")
        producer = kafka(kafka_bootstrap).producer()
        producer.produce(topics["one-activity"], b"not avro", b"junk")
        producer.produce(topics["one-activity"], None, b"o-1")  # a tombstone: skipped silently
        producer.flush(10)

        async def read_all() -> dict[str, list[tuple[str, Outcome]]]:
            return {name: sorted(await collect(client, name)) for name in
                    ("one-activity", "faulty", "booking", "collector")}

        assert run(read_all()) == {
            "one-activity": [("o-1", Finished(2)), ("o-2", Finished(6))],
            "faulty": [("f-1", expected["f-1"])],
            "booking": [("bk-1", Cancelled())],
            "collector": [],  # c-1 is still running: no outcome
        }
        assert follower_threads() == []
        assert [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.name == "tidings.shell.client.client"] == [
            "not an Avro single-object record: no C3 01 magic"]
    finally:
        client.close()


def test_outcomes_with_follow_yields_instances_that_end_later_and_stops_its_thread_when_closed(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)

    async def scenario() -> tuple[list[Any], list[Any], list[str], list[str]]:
        await client.start("enrich", "e-0", "A")
        before = await client.result("enrich", "e-0", 60)
        got = []
        async with aclosing(client.outcomes("enrich")) as outcomes:
            got.append(await asyncio.wait_for(anext(outcomes), 60))
            await client.start("enrich", "e-1", "B")
            got.append(await asyncio.wait_for(anext(outcomes), 60))
            running = follower_threads()
        expected = [("e-0", before), ("e-1", await client.result("enrich", "e-1", 60))]
        # An iterator dropped without closing is closed when it is garbage.
        dropped = client.outcomes("enrich")
        await asyncio.wait_for(anext(dropped), 60)
        del dropped
        gc.collect()
        await assert_eventually_async(lambda: follower_threads() == [], timeout=10,
                                      message="the dropped iterator's thread stopped")
        return got, expected, running, follower_threads()

    try:
        got, expected, running, after_gc = run(scenario())
    finally:
        client.close()
    assert got == expected
    points, at = got[1][1].value
    assert points == 42 and isinstance(at, datetime)  # read as the declared tuple[int, datetime]
    assert len(running) == 1
    assert after_gc == [] and follower_threads() == []


def test_the_cli_prints_outcomes_as_json_lines_and_follows_until_ctrl_c(
    kafka_bootstrap: str, app_id: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    env = {**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap, "TEST_APP_ID": app_id,
           "TEST_CALLS_DIR": str(calls.directory)}
    command = [sys.executable, "-m", "tidings.cli.main", "outcomes", "tests.integration.workflow_apps:app"]

    def tidings(*args: str) -> tuple[int, list[Any]]:
        done = subprocess.run([*command, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert "Traceback" not in done.stderr and "tidings:" not in done.stderr, done.stderr
        # One line per instance; instances on different partitions come in either order.
        printed = sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda o: o["instance_id"])
        return done.returncode, printed

    try:
        expected = run(end_three_ways(client))
        error = expected["f-1"].error.to_json()  # type: ignore[union-attr]
        assert tidings("one-activity") == (0, [{"instance_id": "o-1", "outcome": "finished", "value": 2},
                                               {"instance_id": "o-2", "outcome": "finished", "value": 6}])
        assert tidings("faulty") == (0, [{"instance_id": "f-1", "outcome": "faulted", "error": error}])
        assert tidings("booking") == (0, [{"instance_id": "bk-1", "outcome": "cancelled"}])

        follower = subprocess.Popen([*command, "faulty", "--follow"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in follower.stdout], daemon=True).start()  # type: ignore[union-attr]
        try:
            assert json.loads(lines.get(timeout=60)) == {"instance_id": "f-1", "outcome": "faulted", "error": error}
            run(client.start("faulty", "f-2", "late"))
            late = run(client.result("faulty", "f-2", 60))
            assert json.loads(lines.get(timeout=60)) == {
                "instance_id": "f-2", "outcome": "faulted", "error": late.error.to_json()}
            follower.send_signal(signal.SIGINT)
            assert follower.wait(30) == 0
            assert "Traceback" not in follower.stderr.read()  # type: ignore[union-attr]
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait(10)
    finally:
        client.close()


def _inbox_kinds(bootstrap: str, app: App, workflow: str, instance_id: str) -> list[str]:
    """The kinds of the inbox records of ``instance_id`` (start, query, signal, ...)."""
    from tidings.codec import avro
    from tidings.core.workflow_records import WorkflowInbox

    topic = f"{app.name}.workflow.{workflow}.inbox"
    return [avro.decode_as(r.value, WorkflowInbox).kind for r in read_topic(bootstrap, topic)  # type: ignore[type-var]
            if r.key == instance_id.encode()]


def test_execute_starts_and_waits_with_one_inbox_record_and_asks_only_about_an_instance_that_existed(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    one = workflow_app.workflow_handle("one-activity")
    try:
        # The worker may still be joining: the first run waits for it, however long that takes.
        assert run(client.execute("one-activity", "warm", 0, 60)) == 1, workflow_workers.log_tail()
        assert _inbox_kinds(kafka_bootstrap, workflow_app, "one-activity", "warm") == ["start"]
        assert run(one.execute("x-1", 1, 60, bootstrap=kafka_bootstrap)) == 2
        assert run(one.execute("x-2", 5, 60, bootstrap=kafka_bootstrap)) == 6
        # A new instance's outcome came by itself: the worker was asked nothing.
        assert _inbox_kinds(kafka_bootstrap, workflow_app, "one-activity", "x-1") == ["start"]
        assert _inbox_kinds(kafka_bootstrap, workflow_app, "one-activity", "x-2") == ["start"]

        # Executed again, the start stores nothing and no outcome is written: the worker
        # answers that start, is asked at once, and answers with the stored outcome (the
        # input is not used again), long before half the timeout.
        began = time.monotonic()
        assert run(one.execute("x-1", 100, 60, bootstrap=kafka_bootstrap)) == 2
        assert time.monotonic() - began < 10
        assert _inbox_kinds(kafka_bootstrap, workflow_app, "one-activity", "x-1") == ["start", "start", "query"]

        # A run that takes seconds is not asked about either (a question after a fixed
        # second was a second inbox record for every run under load).
        async def approved_after(seconds: float) -> bool:
            running = asyncio.ensure_future(client.execute("approve", "xa-2", None, 60))
            await asyncio.sleep(seconds)
            await client.signal("approve", "xa-2", "approval", True, timeout=30)
            return bool(await running)

        assert run(approved_after(3.0)) is True
        assert _inbox_kinds(kafka_bootstrap, workflow_app, "approve", "xa-2") == ["start", "signal"]

        with pytest.raises(WorkflowFaulted, match="boom"):
            run(client.execute("faulty", "xf-1", "boom", 60))
        # Still running when the timeout ends the wait: asked once, then the timeout.
        with pytest.raises(ReplyTimeout):
            run(client.execute("approve", "xa-1", None, 3))
        assert _inbox_kinds(kafka_bootstrap, workflow_app, "approve", "xa-1") == ["start", "query"]
        with pytest.raises(LimitError):
            run(client.execute("one-activity", "", 1, 10))  # refused before anything is produced
    finally:
        client.close()
