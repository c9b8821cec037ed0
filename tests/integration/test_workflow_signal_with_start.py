"""Signal-with-start on a real broker and worker process: 50 callers racing on one id start
one instance that stores all 50 signals once, also with the worker SIGKILLed mid-race; an
ended instance stores nothing; the CLI (``tidings signal --start``) and the JSON envelope."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from tidings import App, Client
from tidings.core.workflow import SignalReceived, Started
from tidings.errors import ReplyTimeout, WorkflowEnded
from tidings.testing.eventually import assert_eventually
from tests.integration.workflow_apps import Calls
from tests.workers import both_guarantees
from tests.workflow_workers import ROOT, WorkflowWorkers, calls, workflow_app, workflow_cli, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka

CALLERS = 50


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def race(client: Client, instance_id: str, *, stagger: float = 0.0, timeout: float = 60.0,
               answered: asyncio.Queue[int] | None = None) -> list[str]:
    """``CALLERS`` concurrent signal-with-starts of collector ``instance_id`` (it waits for
    CALLERS + 1 items), each with its own signal id; a caller without an answer in time
    sends the same request again, as a program that retries does. Returns each first answer."""

    async def caller(i: int) -> str:
        await asyncio.sleep(i * stagger)
        answers = []
        for _ in range(20):
            try:
                answers.append(await client.signal_with_start(
                    "collector", instance_id, CALLERS + 1, "item", i, signal_id=f"item-{i}", timeout=timeout))
                break
            except ReplyTimeout:
                answers.append("timeout")
        if answered is not None:
            answered.put_nowait(i)
        assert answers[-1] in ("started", "signalled"), answers
        return answers[0]

    return list(await asyncio.gather(*(caller(i) for i in range(CALLERS))))


def assert_one_instance_with_every_signal_once(client: Client, instance_id: str) -> None:
    collector = client.app.workflow_handle("collector")

    def journaled() -> list[Any]:
        records = run(collector.journal(instance_id))
        assert len([r for r in records if isinstance(r, SignalReceived)]) >= CALLERS, records
        return records

    records = assert_eventually(journaled, timeout=60, message="every signal journaled")
    assert [type(r) for r in records].count(Started) == 1
    ids = Counter(r.signal_id for r in records if isinstance(r, SignalReceived))
    assert ids == Counter({f"item-{i}": 1 for i in range(CALLERS)})
    # The last item ends it: the body took every signal, each once.
    run(client.signal("collector", instance_id, "item", -1))
    value = run(client.value("collector", instance_id, 60))
    assert value[-1] == -1 and sorted(value[:-1]) == list(range(CALLERS))


def test_fifty_racing_callers_start_one_instance_that_gets_all_fifty_signals(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    try:
        answers = run(race(client, "race-1"))
        assert Counter(answers) == Counter({"started": 1, "signalled": CALLERS - 1}), workflow_workers.log_tail()
        assert_one_instance_with_every_signal_once(client, "race-1")
    finally:
        client.close()


@both_guarantees
def test_a_worker_sigkilled_mid_race_and_restarted_still_gives_one_instance_with_each_signal_once(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    worker = workflow_workers.start("w1")
    client = Client(kafka_bootstrap, app=workflow_app)
    stored: list[int] = []  # signals journaled when the worker was killed

    async def scenario() -> list[str]:
        # Warm up: the worker is up and the client's reply reader is following.
        assert await client.signal_with_start("collector", "warm", 1, "item", 0) == "started"
        answered: asyncio.Queue[int] = asyncio.Queue()
        racing = asyncio.ensure_future(race(client, "race-2", stagger=0.04, timeout=8, answered=answered))
        for _ in range(10):
            await answered.get()  # a fifth of the callers are answered: the rest are in flight
        # On this thread, not in to_thread: a worker dies with the thread that started it
        # (PR_SET_PDEATHSIG), and asyncio.run ends its pool's threads.
        worker.kill()
        journaled = await workflow_app.workflow_handle("collector").journal("race-2")
        stored.append(len([r for r in journaled if isinstance(r, SignalReceived)]))
        workflow_workers.start("w1-again", data_dir=worker.data_dir)
        return await racing

    try:
        answers = run(scenario())
        # A caller whose first request was stored before the kill may have had no answer and
        # sent it again: then its answer says "signalled" (the id was stored), never twice.
        assert answers.count("started") <= 1, answers
        print(f"\nthe kill came with {stored[0]} of {CALLERS} signals stored; first answers: {Counter(answers)}")
        assert 0 < stored[0] < CALLERS, f"the kill came with {stored[0]} signals stored: not mid-race"
        assert_one_instance_with_every_signal_once(client, "race-2")
    finally:
        client.close()


def test_an_ended_instance_answers_ended_and_stores_nothing_and_a_repeat_stores_nothing(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    collector = workflow_app.workflow_handle("collector")
    try:
        async def scenario() -> tuple[str, str, str, list[int]]:
            first = await client.signal_with_start("collector", "end-1", 2, "item", 10, signal_id="a")
            repeat = await client.signal_with_start("collector", "end-1", 2, "item", 99, signal_id="a")
            second = await collector.signal_with_start("end-1", 2, "item", 20)  # the handle, a new id
            return first, repeat, second, await client.value("collector", "end-1", 60)

        assert run(scenario()) == ("started", "signalled", "signalled", [10, 20])
        journal = run(collector.journal("end-1"))
        with pytest.raises(WorkflowEnded, match="has ended"):
            run(client.signal_with_start("collector", "end-1", 2, "item", 30, signal_id="b"))
        assert run(collector.journal("end-1")) == journal  # nothing stored
        assert len([r for r in journal if isinstance(r, SignalReceived)]) == 2
    finally:
        client.close()


def test_the_cli_and_a_json_envelope_signal_with_start(
    kafka_bootstrap: str, app_id: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    tidings = workflow_cli(kafka_bootstrap, app_id, calls)

    def sws(instance: str, payload: str, *more: str) -> tuple[int, Any]:
        return tidings("signal", "collector", instance, "item", payload, "--start", "2", "--timeout", "60", *more)

    assert sws("cli-1", "1", "--signal-id", "one") == (
        0, {"signalled": "cli-1", "signal": "item", "answer": "started", "workflow": "collector"})
    assert sws("cli-1", "1", "--signal-id", "one")[1]["answer"] == "signalled"  # a repeat: stored once
    assert sws("cli-1", "2")[1]["answer"] == "signalled"
    assert tidings("result", "collector", "cli-1", "--timeout", "60") == (
        0, {"outcome": "finished", "value": [1, 2]})
    code, error = sws("cli-1", "3")
    assert code == 1 and "has ended" in error
    code, error = tidings("signal", "collector", "cli-2", "item", "1", "--start", "{nope")
    assert code != 0 and "the --start input is not JSON" in error
    code, error = tidings("signal", "collector", "cli-2", "item", "1", "--signal-id", "x")
    assert code != 0 and "--signal-id goes with --start" in error
    code, error = tidings("signal", "collector", "cli-2", "item", '"not an int"', "--start", '"nope"')
    assert code != 0 and "input" in error  # the input type (int) is checked before sending
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "signal", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and "--start INPUT" in done.stdout and "signal-with-start" in done.stdout

    # A JSON producer: one signal_with_start starts it, the next signals it.
    collector = workflow_app.workflow_handle("collector")
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    for n in (5, 6):
        producer.produce(collector.topics.inbox, json.dumps({
            "kind": "signal_with_start", "instance_id": "json-1", "input": 2, "signal": "item", "payload": n,
            "signal_id": f"json-{n}"}).encode(), b"json-1", headers=[("content-type", b"application/json")])
    producer.flush(10)
    assert run(collector.value("json-1", 60)) == [5, 6]
