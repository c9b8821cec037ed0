"""A deaf worker exits 70 (issue 16, item 2): its intake takes nothing while commands wait
and the broker answers (a ``decide`` stuck in a blocking call freezes the event loop), and
past ``TIDINGS_STALL_TIMEOUT`` the liveness watch ends the process so its supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tidings.errors import ReplyTimeout
from tidings.shell.client.client import Client
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually
from tests.integration.deaf_apps import Freeze, Tick, build
from tests.workers import Workers
from tests.kafka_clients import kafka


def test_a_worker_whose_intake_takes_nothing_while_the_broker_answers_exits_70(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> None:
    app = build(app_id)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.deaf_apps:app",
                      env={"TIDINGS_STALL_TIMEOUT": "5"})
    worker = workers.start("w1")
    client = Client(kafka_bootstrap, app=app)
    try:
        async def scenario() -> float:
            assert (await client.send("clock", "c1", Tick(), 60)) is not None  # it works
            for n in range(5):  # freeze it, with work waiting behind
                asyncio.ensure_future(client.send("clock", f"c{n}", Freeze(), 2))
            frozen = time.monotonic()
            for n in range(20):
                try:
                    await client.send("clock", f"c{n}", Tick(), 0.2)
                except ReplyTimeout:
                    pass
            return frozen

        frozen = asyncio.run(scenario())
        code = worker.wait(90)
        took = time.monotonic() - frozen
        print(f"\nthe frozen worker exited {code} after {took:.0f} s")
        assert code == 70, worker.log_tail(40)
        log = worker.log_path.read_text(errors="replace")
        assert "the intake has made no progress" in log
        assert "deaf: no progress for" in log
        assert took >= 5
    finally:
        client.close()
        workers.kill_all()
