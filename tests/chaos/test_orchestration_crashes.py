"""Hosted orchestrations SIGKILLed between events neither repeat nor miss an action."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tidings import App
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tests.integration.orchestration_apps import Happen
from tests.integration.test_orchestrations import assert_acted_once
from tests.orchestration_workers import (  # noqa: F401 - fixtures
    Executor,
    OrchestrationWorkers,
    orchestration_app,
    orchestration_workers,
)
from tests.workers import EXACTLY_ONCE, assert_each_key_once_when_committed, both_guarantees

ORDERS = [f"c-{n:02d}" for n in range(40)]


@both_guarantees
def test_an_orchestration_killed_between_events_acts_once_per_position_and_finishes_once(
    kafka_bootstrap: str, orchestration_app: App, orchestration_workers: OrchestrationWorkers, guarantee: str
) -> None:
    worker = orchestration_workers.start()
    client = orchestration_app.client(kafka_bootstrap)
    executor = Executor(orchestration_app, kafka_bootstrap)

    async def restart(name: str, data_dir: Path | None) -> WorkerProcess:
        started = orchestration_workers.start(name, data_dir=data_dir)
        # Wait until it runs, so that the next kill hits a worker at work.
        await asyncio.to_thread(
            assert_eventually, lambda: "Worker ready" in started.log_tail(400), timeout=60
        )
        return started

    async def scenario() -> None:
        nonlocal worker
        await asyncio.gather(*(
            client.send("ledger", f"order-{o}", Happen(order=o, step="placed")) for o in ORDERS
        ))
        kills = 0
        deadline = time.monotonic() + 240
        while True:
            sends = await executor.plan()
            round_ = asyncio.gather(*sends)
            if sends and kills < 3:
                # Kill while this round's events are stored, routed and orchestrated.
                await asyncio.sleep(0.05 + 0.15 * kills)
                await asyncio.to_thread(worker.kill)
                kills += 1
                # The third restart also loses RocksDB: everything is rebuilt from Kafka.
                worker = await restart(f"w{kills + 1}", None if kills == 3 else worker.data_dir)
            await round_
            finished = {o.instance for o in await asyncio.to_thread(executor.outcomes)}
            if finished >= set(ORDERS):
                break
            assert time.monotonic() < deadline, f"unfinished: {sorted(set(ORDERS) - finished)}"
            await asyncio.sleep(0.3)
        assert kills == 3

    try:
        asyncio.run(scenario())
    except BaseException:
        print(worker.log_tail())
        raise
    assert_acted_once(executor, ORDERS)
    if guarantee == EXACTLY_ONCE:
        assert_each_key_once_when_committed(kafka_bootstrap, f"{orchestration_app.name}.orchestration.fulfil.journal")
