"""Saga expectations on the real broker: resends on the interval, ExpectationExhausted at the
deadline, and a deadline anchored to the stored entry time across a SIGKILL."""

from __future__ import annotations

import asyncio
import time

from tidings import App
from tidings.core.saga import saga_command_id
from tidings.testing.eventually import assert_eventually
from tests.integration.saga_apps import Pay
from tests.saga_workers import (  # noqa: F401 - fixtures
    commands_sent,
    journal_topic,
    saga_app,
    saga_workers,
)
from tests.workers import Workers


def _ended(bootstrap: str, app: App, saga_id: str) -> list:  # type: ignore[type-arg]
    journal = journal_topic(bootstrap, app, saga_id)
    return journal if journal and journal[-1].ended else []


def test_an_expectation_resends_two_to_six_times_then_handle_gets_expectation_exhausted(
    kafka_bootstrap: str, saga_app: App, saga_workers: Workers
) -> None:
    worker = saga_workers.start()
    client = saga_app.client(kafka_bootstrap)
    saga_id = "t-deaf"
    asyncio.run(client.send("wallet", "alice", Pay(transfer=saga_id, target="deaf-vault", amount=7),
                            correlation_id=saga_id))
    try:
        journal = assert_eventually(lambda: _ended(kafka_bootstrap, saga_app, saga_id), timeout=90, interval=0.3,
                                    message="the saga to end")
    except BaseException:
        print(worker.log_tail(200))
        raise
    assert [r.transition for r in journal] == ["start", "expectation", "handle", "stop"]
    started, exhausted = journal[0], journal[1]
    assert exhausted.cause == f"expectation:{saga_command_id('transfer', saga_id, 1, 0)}"
    waited = exhausted.entered_at_ms - started.entered_at_ms
    assert 1300 <= waited < 1300 + 1500, waited
    assert exhausted.state is not None and b'"timed_out":true' in exhausted.state
    # One send and its resends, every 0.3 s until 1.3 s: all with the one command id.
    copies = commands_sent(kafka_bootstrap, saga_app, "vault", saga_command_id("transfer", saga_id, 1, 0))
    assert 2 <= len(copies) - 1 <= 6, len(copies)
    assert {c.correlation_id for c in copies} == {saga_id}


def test_a_worker_killed_mid_wait_keeps_the_stored_deadline(
    kafka_bootstrap: str, saga_app: App, saga_workers: Workers
) -> None:
    worker = saga_workers.start()
    client = saga_app.client(kafka_bootstrap)
    saga_id = "t-deaf-long"
    take_id = saga_command_id("transfer", saga_id, 1, 0)
    asyncio.run(client.send("wallet", "alice", Pay(transfer=saga_id, target="deaf-long-vault", amount=3),
                            correlation_id=saga_id))
    try:
        first = assert_eventually(lambda: journal_topic(kafka_bootstrap, saga_app, saga_id), timeout=60,
                                  interval=0.1, message="the saga to start")[0]
        entered = first.entered_at_ms
        # Mid-wait: some resends out (every 0.5 s), the 12 s deadline far ahead.
        time.sleep(max(0.0, (entered + 2000) / 1000 - time.time()))
        before = len(commands_sent(kafka_bootstrap, saga_app, "vault", take_id))
        worker.kill()
        restarted_ms = int(time.time() * 1000)
        # Its own log (w2.log): the first worker's says "Worker ready" already.
        worker = saga_workers.start("w2", data_dir=worker.data_dir)
        assert_eventually(lambda: "Worker ready" in worker.log_tail(400), timeout=60, interval=0.1)
        ready_ms = int(time.time() * 1000)
        journal = assert_eventually(lambda: _ended(kafka_bootstrap, saga_app, saga_id), timeout=90,
                                    interval=0.3, message="the saga to end")
    except BaseException:
        print(worker.log_tail(200))
        raise
    assert [r.transition for r in journal] == ["start", "expectation", "handle", "stop"]
    exhausted_ms = journal[1].entered_at_ms
    assert exhausted_ms - entered >= 12000
    # The restarted worker was ready before the deadline: it armed the timer with what remained.
    assert ready_ms < entered + 12000, "the restart took too long to tell the two apart"
    assert exhausted_ms - entered < 12000 + 1500
    # Counted from the stored entry time: not from the restart (which would be >= restart + 12 s).
    assert restarted_ms - entered < 4000, "the kill came too late to tell the two apart"
    assert exhausted_ms <= max(entered + 12000, ready_ms) + 2000, (exhausted_ms - entered, ready_ms - entered)
    assert exhausted_ms < restarted_ms + 12000
    after = len(commands_sent(kafka_bootstrap, saga_app, "vault", take_id))
    assert before >= 2 and after > before  # resent before the kill, and again after the restart
