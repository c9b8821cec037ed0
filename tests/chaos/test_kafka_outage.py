"""A worker through a 60 s Kafka outage: it warns, keeps trying, resumes (issue 17, item 5).

One worker runs as a static member while callers keep sending ``Add`` commands through one
``Client``. The broker (this module's own, never the shared one) is stopped for 60 s with
work in flight and started again on the same data and port. The worker goes on by itself:
the same process, no exit (no 70: a broker outage is not deafness, even with a stall timeout
of 30 s, half the outage), and its log says little
about the outage (at most 20 lines from the stop to the end). Afterwards every command a
caller sent was answered, and its event is stored exactly once.

About 90 s; the longer variant (``long`` marker, ``--long``) keeps the broker away 5 minutes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tidings.broker import LocalBroker
from tidings.shell.client.client import Client
from tidings.shell.runtime.topics import apply_topics
from tests.broker_outages import assert_every_command_stored_once, caller, own_broker_fixture
from tests.integration.apps import build
from tests.kafka_clients import kafka
from tests.workers import Workers

TALLIES = [f"tally-{n}" for n in range(4)]
CALLERS = 3
#: Lines the worker may log from the broker's stop to the end of the test, for 60 s away;
#: a longer outage adds a reminder every 30 s.
OUTAGE_LINES = 20


own_broker = own_broker_fixture("outage-broker")


async def _answered_again(answered: dict[str, int], timeout: float, log_tail: str = "") -> float:
    began = time.monotonic()
    seen = len(answered)
    while len(answered) < seen + 5:
        if time.monotonic() - began > timeout:
            raise AssertionError(f"no reply for {timeout} s{log_tail}")
        await asyncio.sleep(0.05)
    return time.monotonic() - began


def _outage(broker: LocalBroker, app_id: str, tmp_path: Path, outage_s: float) -> None:
    bootstrap = broker.status().bootstrap
    assert bootstrap is not None
    app = build(app_id)
    apply_topics(kafka(bootstrap), app.topic_specs(), out=lambda line: None)
    # A stall timeout shorter than the outage: were the liveness clock to run while no broker
    # answers, the worker would exit 70 halfway through it.
    workers = Workers(bootstrap, app_id, tmp_path, env={"TIDINGS_STALL_TIMEOUT": "30"})
    worker = workers.start("w1", instance_id=f"{app_id}-w1")
    client = Client(bootstrap, app=app)
    sent: dict[str, int] = {}
    answered: dict[str, int] = {}
    outage_log: list[str] = []
    try:
        async def scenario() -> float:
            stop = asyncio.Event()
            callers = [asyncio.create_task(caller(client, n, TALLIES, stop, answered, sent,
                                                      retry_s=0.5, pause_s=0.05))
                       for n in range(CALLERS)]
            await _answered_again(answered, 90)
            pid = worker.pid
            logged = worker.log_path.stat().st_size
            await asyncio.to_thread(broker.stop)  # callers' commands in flight
            await asyncio.sleep(outage_s)
            assert worker.running, f"the worker exited during the outage:\n{worker.log_tail(60)}"
            await asyncio.to_thread(broker.start)
            back = await _answered_again(answered, 120, f"; worker log:\n{worker.log_tail(60)}")
            await asyncio.sleep(5.0)  # what the worker says once it is back counts too
            stop.set()
            done, _ = await asyncio.wait(callers, timeout=90)
            assert len(done) == CALLERS, f"callers still waiting for replies:\n{worker.log_tail(60)}"
            for task in done:
                task.result()
            assert worker.running and worker.pid == pid, "the worker did not go on by itself"
            with open(worker.log_path, "rb") as log:
                log.seek(logged)
                outage_log.extend(log.read().decode(errors="replace").splitlines())
            return back

        back = asyncio.run(scenario())
        print(f"\nthe worker's log from the broker's stop ({outage_s:.0f} s away) to the end:\n"
              + "\n".join(outage_log))
        allowed = OUTAGE_LINES + max(0, int((outage_s - 60) // 30))
        assert len(outage_log) <= allowed, f"{len(outage_log)} lines about the outage"
        assert any("unreachable" in line for line in outage_log), "the outage was not reported"
        assert_every_command_stored_once(bootstrap, f"{app.name}.aggregate.tally.events", sent, answered)
        print(f"{len(sent)} commands, answered again {back:.1f} s after the broker came back")
        assert len(sent) >= 20, "too few commands to say anything"
    except BaseException:
        print(workers.log_tail(80))
        raise
    finally:
        client.close()
        workers.kill_all()


def test_a_worker_goes_on_by_itself_through_a_60_s_kafka_outage(
    own_broker: LocalBroker, app_id: str, tmp_path: Path
) -> None:
    _outage(own_broker, app_id, tmp_path, outage_s=60.0)


@pytest.mark.long
def test_a_worker_goes_on_by_itself_through_a_5_minute_kafka_outage(
    own_broker: LocalBroker, app_id: str, tmp_path: Path
) -> None:
    _outage(own_broker, app_id, tmp_path, outage_s=300.0)
