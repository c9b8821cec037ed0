"""A projection signals workflows on the real broker: a waiting workflow finishes with the
payload, an event handled again stores no second signal, and an ended workflow raises
``WorkflowEnded`` in the handler, which catches it while the projection goes on."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App, Cancelled, Finished
from tidings.core.partitioning import partition_for
from tidings.core.workflow import SignalReceived
from tidings.shell.runtime.topics import apply_topics, deadletter_topic
from tidings.testing.eventually import assert_eventually_async
from tidings.testing.topics import read_topic
from tests.integration import projection_signal_apps
from tests.integration.projection_signal_apps import Finish, Nudge, handler_log
from tests.workers import Workers
from tests.kafka_clients import kafka

APP_SPEC = "tests.integration.projection_signal_apps:app"


@pytest.fixture
def calls_dir(tmp_path: Path) -> Path:
    return tmp_path / "calls"


@pytest.fixture
def signal_app(kafka_bootstrap: str, app_id: str, calls_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The App named for this test, its topics applied; its handles use the broker."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = projection_signal_apps.build(app_id, calls_dir)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for client in list(app._clients.values()):
        client.close()
    for handle in app.workflows:
        handle.close()


@pytest.fixture
def workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, calls_dir: Path) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec=APP_SPEC, env={"TEST_CALLS_DIR": str(calls_dir)})
    yield started
    started.kill_all()


def runs(calls_dir: Path) -> list[str]:
    """Every run of the projection's handler so far: ``{outcome} {aggregate_id}@{version}``."""
    path = handler_log(calls_dir)
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_a_projection_signals_a_waiting_workflow_and_an_event_handled_again_stores_no_second_signal(
    kafka_bootstrap: str, signal_app: App, workers: Workers, calls_dir: Path, tmp_path: Path
) -> None:
    worker = workers.start("w1", instance_id="w-static")
    client = signal_app.client(kafka_bootstrap)
    waiting = signal_app.workflow_handle("transfer_and_wait")

    async def journal_signals(instance_id: str) -> list[SignalReceived]:
        return [r for r in await waiting.journal(instance_id) if isinstance(r, SignalReceived)]

    async def first_pass() -> list[object]:
        await waiting.start("t-1", "finish")
        await waiting.start("t-2", "linger")
        # The aggregate's id is the workflow's id, so the handler knows whom to signal.
        await client.send("transfer", "t-1", Finish(delivered=True))
        await client.send("transfer", "t-2", Finish(delivered=True))
        outcome = await waiting.result("t-1", 60)
        await assert_eventually_async(lambda: "signalled t-2@1" in runs(calls_dir), timeout=60,
                                      message=workers.log_tail())
        return [outcome, await journal_signals("t-2")]

    outcome, stored = asyncio.run(first_pass())
    assert outcome == Finished(True), workers.log_tail()
    assert len(stored) == 1 and stored[0].name == "transfer-finished"
    signal_id = stored[0].signal_id
    assert signal_id is not None and "t-2@1" in signal_id and signal_id.startswith("notify/transfer/")

    # The projection handles every event again: its view is rebuilt from the start of the
    # events topic (the worker's other stores are kept, so the workflow lives on).
    worker.stop()
    notify = next(p for p in signal_app.projections if p.name == "notify")
    shutil.rmtree(notify.view_path(tmp_path / "w1"))
    workers.start("w1", data_dir=tmp_path / "w1", instance_id="w-static")

    async def second_pass() -> list[object]:
        # A source partition is caught up at its first record: a new event on t-2's
        # partition makes the projection read (and hand its handler) t-2's first event again.
        await client.send("transfer", "t-2", Nudge())
        await assert_eventually_async(lambda: runs(calls_dir).count("signalled t-2@1") == 2, timeout=60,
                                      message=workers.log_tail())
        again = await journal_signals("t-2")
        await waiting.signal("t-2", "close")
        return [again, await waiting.result("t-2", 60)]

    try:
        again, outcome = asyncio.run(second_pass())
    finally:
        client.close()
    # The handler ran twice on t-2's event; the instance stored the signal once.
    assert [(r.name, r.signal_id) for r in again] == [("transfer-finished", signal_id)]
    assert outcome == Finished(True)


def same_partition(instance_id: str, prefix: str) -> str:
    """An id with ``prefix`` whose records share ``instance_id``'s partition (handled after it)."""
    home = partition_for(instance_id, projection_signal_apps.PARTITIONS)
    return next(f"{prefix}-{n}" for n in range(1000) if partition_for(f"{prefix}-{n}", projection_signal_apps.PARTITIONS) == home)


def test_signalling_an_ended_workflow_raises_workflow_ended_in_the_handler_and_the_projection_goes_on(
    kafka_bootstrap: str, signal_app: App, workers: Workers, calls_dir: Path
) -> None:
    workers.start("w1")
    client = signal_app.client(kafka_bootstrap)
    waiting = signal_app.workflow_handle("transfer_and_wait")
    # One partition of the events topic, so the projection handles them in this order.
    never, after = same_partition("t-ended", "t-never"), same_partition("t-ended", "t-after")

    async def scenario() -> list[object]:
        await waiting.start("t-ended", "finish")
        await waiting.cancel("t-ended", timeout=60)
        cancelled = await waiting.result("t-ended", 60)
        await waiting.start(after, "finish")
        await client.send("transfer", "t-ended", Finish(delivered=True))
        await client.send("transfer", never, Finish(delivered=False))  # no such workflow
        await client.send("transfer", after, Finish(delivered=False))
        outcome = await waiting.result(after, 60)
        await assert_eventually_async(lambda: len(runs(calls_dir)) == 3, timeout=60, message=workers.log_tail())
        return [cancelled, outcome]

    try:
        cancelled, outcome = asyncio.run(scenario())
    finally:
        client.close()
    assert cancelled == Cancelled(), workers.log_tail()
    # The handler caught both errors and went on: the next event's workflow got its signal.
    assert outcome == Finished(False), workers.log_tail()
    assert runs(calls_dir) == ["ended t-ended@1", f"not_found {never}@1", f"signalled {after}@1"]
    deadletters = read_topic(kafka_bootstrap, deadletter_topic(signal_app.name), timeout=10)
    assert deadletters == [], "a caught WorkflowEnded is no handler failure"
