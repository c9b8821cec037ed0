"""Broker restarts under load with static group membership (issue 16, item 1).

One worker runs as a static member (``TIDINGS_INSTANCE_ID``, as the Helm chart and the demo
run it) while callers keep sending ``Add`` commands to a few tallies through one ``Client``
that lives through every restart. Each round stops the broker process and starts it again on
the same data and port, then waits until the callers are answered again. The test is the
supervisor: a worker that exits 70 is started again on the same data dir and instance id;
any other exit status fails the test; a worker that stays alive but answers nothing fails it
too (no reply for 90 s).

Afterwards every command a caller sent was answered, and its event is stored exactly once.

Three rounds by default; ``--long`` runs the ten-round variant (``long`` marker).
This module starts its own broker (never the shared one) and stops it by PID at the end.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tidings.broker import LocalBroker
from tidings.shell.client.client import Client
from tidings.shell.runtime.requester import OutcomeWatcher
from tidings.shell.runtime.topics import apply_topics, spec_for
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tests.broker_outages import assert_every_command_stored_once, caller, own_broker_fixture
from tests.integration.apps import build
from tests.workers import Workers, both_guarantees
from tests.kafka_clients import kafka

TALLIES = [f"tally-{n}" for n in range(8)]
CALLERS = 4
EXIT_FAILED = 70


own_broker = own_broker_fixture("restart-broker")


class _Supervisor:
    """Restarts a worker that exited 70, as the chart's StatefulSet would; records the rest."""

    def __init__(self, worker: WorkerProcess) -> None:
        self.worker = worker
        self.restarts = 0
        self.other_exits: list[int] = []

    def check(self) -> None:
        if self.worker.running:
            return
        code = self.worker.wait(0)
        if code == EXIT_FAILED:
            self.restarts += 1
            self.worker.start()
        elif code is not None:
            self.other_exits.append(code)
            raise AssertionError(f"the worker exited {code}, not 70:\n{self.worker.log_tail(40)}")


async def _answered_again(answered: dict[str, int], supervisor: _Supervisor, timeout: float) -> float:
    """Wait until a few more commands are answered; return how long it took."""
    began = time.monotonic()
    seen = len(answered)
    while len(answered) < seen + 5:
        supervisor.check()
        if time.monotonic() - began > timeout:
            raise AssertionError(f"no reply for {timeout} s after the broker restart; worker log:\n"
                                 f"{supervisor.worker.log_tail(60)}")
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def _restart_rounds(broker: LocalBroker, app_id: str, tmp_path: Path, guarantee: str,
                    rounds: int) -> None:
    bootstrap = broker.status().bootstrap
    assert bootstrap is not None
    app = build(app_id)
    apply_topics(kafka(bootstrap), app.topic_specs(), out=lambda line: None)
    # A deaf worker exits 70 after 30 s instead of 120 s (liveness.py), so the test, as its
    # supervisor, restarts it within its 90 s wait for replies.
    workers = Workers(bootstrap, app_id, tmp_path, guarantee=guarantee,
                      env={"TIDINGS_STALL_TIMEOUT": "30"})
    supervisor = _Supervisor(workers.start("w1", instance_id=f"{app_id}-w1"))
    threads_before = _native_threads()
    client = Client(bootstrap, app=app)
    sent: dict[str, int] = {}
    answered: dict[str, int] = {}
    began = time.monotonic()
    try:
        async def scenario() -> list[float]:
            stop = asyncio.Event()
            callers = [asyncio.create_task(caller(client, n, TALLIES, stop, answered, sent, retry_s=0.2))
                       for n in range(CALLERS)]
            waits = [await _answered_again(answered, supervisor, 90)]
            for round_ in range(rounds):
                await asyncio.sleep(1.0)
                await asyncio.to_thread(broker.stop)
                # Every other outage outlasts the session timeout (6 s): the worker's session
                # expires, it rejoins, and librdkafka may report it fenced by its own id.
                await asyncio.sleep(7.0 if round_ % 2 else 0.5)
                await asyncio.to_thread(broker.start)
                waits.append(await _answered_again(answered, supervisor, 90))
            await asyncio.sleep(1.0)
            stop.set()
            done, _ = await asyncio.wait(callers, timeout=90)
            assert len(done) == CALLERS, f"callers still waiting for replies:\n{supervisor.worker.log_tail(60)}"
            for task in done:
                task.result()
            return waits

        waits = asyncio.run(scenario())
        supervisor.check()
        assert supervisor.worker.running, "the worker is not running at the end"
        assert_every_command_stored_once(bootstrap, f"{app.name}.aggregate.tally.events", sent, answered)
        print(f"\n{guarantee}: {rounds} broker restarts, {len(sent)} commands, "
              f"{supervisor.restarts} worker restarts after exit 70, "
              f"waits for replies {[round(w, 1) for w in waits]} s, "
              f"{time.monotonic() - began:.0f} s")
        assert len(sent) >= 30 * rounds, "too few commands to say anything"
        # A closed client leaves nothing running: its librdkafka producer and consumers
        # (each a handful of native threads) are destroyed, not left reconnecting.
        during = _native_threads()
        client.close()
        assert_eventually(lambda: _native_threads() <= threads_before, timeout=15,
                          message=f"threads: {threads_before} before the client, {during} with it, "
                          f"{_native_threads()} after close")
    except BaseException:
        print(workers.log_tail(80))
        raise
    finally:
        client.close()
        workers.kill_all()


@both_guarantees
def test_a_static_member_keeps_answering_through_three_broker_restarts(
    own_broker: LocalBroker, app_id: str, tmp_path: Path, guarantee: str
) -> None:
    _restart_rounds(own_broker, app_id, tmp_path, guarantee, rounds=3)


@pytest.mark.long
@both_guarantees
def test_a_static_member_keeps_answering_through_ten_broker_restarts(
    own_broker: LocalBroker, app_id: str, tmp_path: Path, guarantee: str
) -> None:
    _restart_rounds(own_broker, app_id, tmp_path, guarantee, rounds=10)


def _native_threads() -> int:
    """This process's OS threads (librdkafka's are not Python threads)."""
    return len(os.listdir("/proc/self/task"))


def test_a_clients_outcome_watcher_reads_outcomes_written_after_a_broker_restart(
    own_broker: LocalBroker, app_id: str
) -> None:
    """A ``Client`` waiting for a workflow outcome across a broker restart still gets it: its
    outcome watcher (one consumer for every waiter) reads on, or starts a new consumer where
    the old one was (``requester.OutcomeWatcher``)."""
    bootstrap = own_broker.status().bootstrap
    assert bootstrap is not None
    topic = f"{app_id}.workflow.w.outcomes"
    apply_topics(kafka(bootstrap), [spec_for("outcomes", topic, partitions=2)], out=lambda line: None)
    producer = kafka(bootstrap).producer()
    watcher = OutcomeWatcher(kafka(bootstrap))

    async def scenario() -> None:
        before = await watcher.watch(topic, 1, "before", bytes)
        producer.produce(topic, b"v1", b"before", partition=1)
        producer.flush(10)
        assert await asyncio.wait_for(before.future, 30) == b"v1"
        after = await watcher.watch(topic, 1, "after", bytes)
        await asyncio.to_thread(own_broker.stop)
        await asyncio.sleep(7.0)  # past a session timeout: what a consumer notices
        await asyncio.to_thread(own_broker.start)
        producer.produce(topic, b"v2", b"after", partition=1)
        assert producer.flush(60) == 0
        assert await asyncio.wait_for(after.future, 60) == b"v2"

    try:
        asyncio.run(scenario())
    finally:
        watcher.close()
