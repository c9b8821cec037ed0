"""One requester per Client: one producer and one reply reader for commands and every workflow
handle; ``result`` wakes on the outcomes topic, also across a worker's SIGKILL and restart."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings import App, ReplyTimeout, WorkflowNotFound
from tidings.codec import avro
from tidings.core.workflow import WorkflowStatus
from tidings.core.workflow_records import WorkflowOutcomeRecord
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually_async
from tidings.testing.topics import read_topic
from tests.integration import requester_apps
from tests.integration.apps import Add, Added
from tests.integration.workflow_apps import Calls
from tests.workers import Workers
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


def tidings_threads(excluding: set[int | None]) -> Counter[str]:
    """The tidings threads alive now that are not in ``excluding`` (idents), by name."""
    return Counter(t.name for t in threading.enumerate() if t.name.startswith("tidings-") and t.ident not in excluding)


@pytest.fixture
def mixed_app(kafka_bootstrap: str, app_id: str, calls: Calls, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The aggregate-and-workflows App named for this test, its topics applied; handles use the broker."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = requester_apps.build(app_id, calls.directory)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for client in list(app._clients.values()):
        client.close()


def test_a_client_sends_commands_and_serves_every_workflow_handle_with_one_producer_and_one_reply_reader(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, calls: Calls, mixed_app: App
) -> None:
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.requester_apps:app",
                      env={"TEST_CALLS_DIR": str(calls.directory)})
    workers.start()
    before = {t.ident for t in threading.enumerate()}
    client = mixed_app.client(kafka_bootstrap)
    one, approve, booking = (mixed_app.workflow_handle(name) for name in ("one-activity", "approve", "booking"))

    async def scenario() -> tuple[list[Any], Counter[str]]:
        got: list[Any] = [await client.send("tally", "t-1", Add(amount=2))]
        await one.start("o-1", 1)
        await client.start("approve", "a-1")
        await booking.start("bk-1")
        await approve.signal("a-1", "approval", True)
        while await client.workflow("booking").status("bk-1") is None:
            await asyncio.sleep(0.05)
        await booking.cancel("bk-1")
        got += [
            await one.value("o-1", 60),
            await client.value(approve, "a-1", 60),
            await booking.status("bk-1"),
            await client.send("tally", "t-1", Add(amount=3)),
        ]
        return got, tidings_threads(before)

    try:
        got, threads = asyncio.run(scenario())
        assert got == [Added(amount=2), 2, True, WorkflowStatus.CANCELLED, Added(amount=3)], workers.log_tail()
        # Every handle went through the app's client for this bootstrap: one producer (its
        # delivery thread), one reply reader, one outcome watcher, whatever was called.
        assert threads == Counter({"tidings-producer": 1, "tidings-replies": 1, "tidings-outcomes": 1})
        assert {h.client(kafka_bootstrap) for h in (one, approve, booking)} == {client}
    finally:
        client.close()
        workers.kill_all()
    assert tidings_threads(before) == Counter(), "close() stops the requester's threads"


def test_result_waiting_across_a_sigkill_returns_as_soon_as_the_restarted_worker_writes_the_outcome(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    # A static member with the same data directory takes its partitions back at once.
    worker = workflow_workers.start("w1", instance_id="w-static")
    steps = workflow_app.workflow_handle("steps")
    ids = ["r-0", "r-1", "r-2"]
    returned: dict[str, float] = {}
    timeline: dict[str, float] = {}

    async def value(key: str, instance_id: str) -> Any:
        result = await steps.value(instance_id, 120)
        returned[key] = time.time()
        return result

    def slow_steps_begun() -> int:
        return len([line for line in calls.lines("slow") if line.endswith("begin")])

    async def scenario() -> list[Any]:
        for instance_id in ids:
            await steps.start(instance_id, 4.0)
        await assert_eventually_async(lambda: slow_steps_begun() >= len(ids), timeout=60,
                                      message=workflow_workers.log_tail())
        # Asked while the first worker runs them: it answers "running", then it dies.
        # Spread over a second, so no common phase could make an every-5-s re-ask look fast.
        waiting = []
        for instance_id in ids:
            waiting.append(asyncio.ensure_future(value(instance_id, instance_id)))
            await asyncio.sleep(0.4)
        worker.kill()
        timeline["killed"] = time.time()
        # Asked while no worker runs: no answer comes until the restart.
        waiting.append(asyncio.ensure_future(value("late r-0", "r-0")))
        await asyncio.sleep(0.5)
        timeline["restarted"] = time.time()
        workflow_workers.start("w1-restarted", data_dir=worker.data_dir, instance_id="w-static")
        return await asyncio.gather(*waiting)

    values = asyncio.run(scenario())
    assert values == [["1", "done", "1"]] * 4, workflow_workers.log_tail()
    written: dict[str, float] = {}
    for record in read_topic(kafka_bootstrap, steps.topics.outcomes):
        outcome = avro.decode_as(record.value or b"", WorkflowOutcomeRecord)
        written[outcome.instance_id] = min(written.get(outcome.instance_id, float("inf")), outcome.at / 1000)
    for key, at in returned.items():
        instance_id = key.removeprefix("late ")
        # The restarted worker wrote it (the first died inside the slow step) ...
        assert written[instance_id] > timeline["restarted"], (key, written, timeline)
        # ... and the caller had it at once: an every-5-s re-ask would take up to 5 s.
        assert at - written[instance_id] < 1.0, (key, at - written[instance_id])
    print(f"\nresult back after the outcome was written: "
          + ", ".join(f"{k} {returned[k] - written[k.removeprefix('late ')]:.3f} s" for k in sorted(returned)))


def test_result_of_an_id_never_started_raises_not_found_at_once(
    workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    approve = workflow_app.workflow_handle("approve")

    async def scenario() -> float:
        await approve.start("a-1")  # the worker is up and answering before the question
        assert await approve.status("a-1", 60) is WorkflowStatus.RUNNING
        began = time.monotonic()
        with pytest.raises(WorkflowNotFound, match="nobody"):
            await approve.result("nobody", 60)
        return time.monotonic() - began

    took = asyncio.run(scenario())
    assert took < 5.0, f"{took:.2f} s: it should be the worker's answer, not a wait for an outcome"


def test_with_no_worker_every_call_times_out_with_a_reply_timeout_that_says_what_to_check(
    workflow_app: App,
) -> None:
    approve = workflow_app.workflow_handle("approve")

    async def scenario() -> list[BaseException]:
        await approve.start("a-1")  # durable in the inbox; nothing reads it
        errors = []
        for call in (lambda: approve.result("a-1", 1), lambda: approve.status("a-1", 1),
                     lambda: approve.signal("a-1", "approval", True, timeout=1),
                     lambda: approve.cancel("a-1", timeout=1)):
            try:
                await call()
            except ReplyTimeout as exc:
                errors.append(exc)
        return errors

    errors = asyncio.run(scenario())
    assert len(errors) == 4 and all(isinstance(e, TimeoutError) for e in errors)
    assert all("is a worker running?" in str(e) for e in errors), errors
