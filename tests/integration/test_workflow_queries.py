"""Queries on a real broker and worker process: answered during a run and after its end, from
replayed state after a SIGKILL and a restart, journaling nothing; hostile query requests
(malformed, unknown names, huge payloads, handlers that raise, loop or answer too much) get a
clear error and the worker goes on in order; the CLI and a JSON envelope."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from tidings import App, Client
from tidings.codec import avro
from tidings.core.records import DeadLetter
from tidings.core.workflow_records import WorkflowInbox
from tidings.errors import WorkflowNotFound, WorkflowQueryFailed, WorkflowQueryRejected
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.workflow_apps import Calls
from tests.workflow_workers import ROOT, WorkflowWorkers, calls, workflow_app, workflow_cli, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def eventually_entries(app: App, instance_id: str, expected: list[int]) -> None:
    ledger = app.workflow_handle("ledger")
    deadline = time.monotonic() + 60
    found = None
    while time.monotonic() < deadline:
        found = await ledger.query(instance_id, "entries", timeout=30)
        if found == expected:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{instance_id}: entries {found}, expected {expected}")


def journal_topic_records(bootstrap: str, app: App, instance_id: str) -> int:
    topic = app.workflow_handle("ledger").topics.journal
    return sum(1 for record in read_topic(bootstrap, topic) if record.key == instance_id.encode())


def test_queries_during_a_run_and_after_its_end_journal_nothing(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    ledger = workflow_app.workflow_handle("ledger")
    try:
        async def scenario() -> None:
            with pytest.raises(WorkflowNotFound):
                await client.query("ledger", "nobody", "balance", timeout=30)
            await ledger.start("q-1", 10)
            assert await client.query("ledger", "q-1", "balance", timeout=60) == 10
            await ledger.signal("q-1", "post", 5)
            await ledger.signal("q-1", "post", 7)
            await eventually_entries(workflow_app, "q-1", [5, 7])
            before = await ledger.journal("q-1")
            assert await ledger.query("q-1", "balance", timeout=30) == 22
            assert await ledger.query("q-1", "entry", [1], timeout=30) == 7
            with pytest.raises(WorkflowQueryRejected, match=r"has no query 'nope' \(registered: balance, broken"):
                await ledger.query("q-1", "nope", timeout=30)
            with pytest.raises(WorkflowQueryFailed, match="IndexError"):
                await ledger.query("q-1", "entry", [9], timeout=30)
            assert await ledger.journal("q-1") == before  # the queries journaled nothing
            await ledger.signal("q-1", "post", 0)
            assert (await ledger.result("q-1", timeout=60)).value == 22
            # Ended: the final state answers (its journal replayed through the end).
            assert await ledger.query("q-1", "balance", timeout=30) == 22
            assert await ledger.query("q-1", "entries", timeout=30) == [5, 7]

        run(scenario())
        count = journal_topic_records(kafka_bootstrap, workflow_app, "q-1")
        run(ledger.query("q-1", "entries", timeout=30))
        assert journal_topic_records(kafka_bootstrap, workflow_app, "q-1") == count
    finally:
        client.close()


def test_a_query_after_a_sigkill_and_a_restart_answers_from_the_replayed_state(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    worker = workflow_workers.start("w1")
    ledger = workflow_app.workflow_handle("ledger")

    async def before_kill() -> None:
        await ledger.start("k-1", 1)
        await ledger.start("k-2", 2)
        await ledger.signal("k-1", "post", 3)
        await ledger.signal("k-2", "post", 4)
        await eventually_entries(workflow_app, "k-1", [3])
        await eventually_entries(workflow_app, "k-2", [4])
        await ledger.signal("k-2", "post", 0)
        assert (await ledger.result("k-2", timeout=60)).value == 6

    run(before_kill())
    worker.kill()
    workflow_workers.start("w1-again", data_dir=worker.data_dir)

    async def after_restart() -> None:
        assert await ledger.query("k-1", "entries", timeout=90) == [3]  # running: replayed
        assert await ledger.query("k-1", "balance", timeout=30) == 4
        assert await ledger.query("k-2", "entries", timeout=30) == [4]  # ended: replayed through its end
        await ledger.signal("k-1", "post", 5)
        await eventually_entries(workflow_app, "k-1", [3, 5])

    run(after_restart())


def test_hostile_query_requests_get_a_clear_error_and_the_worker_goes_on_in_order(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    ledger = workflow_app.workflow_handle("ledger")
    requester = ledger.client().requester

    def raw(**fields: Any) -> WorkflowInbox:
        base: dict[str, Any] = {"query": "balance"}
        base.update(fields)
        return WorkflowInbox(uuid.uuid4().hex, "h-1", "query_handler", int(time.time() * 1000),
                             reply_to=requester.replies_topic, **base)

    async def ask(request: WorkflowInbox) -> Any:
        reply = await requester.ask(ledger.topics.inbox, request, 30)
        assert reply is not None, f"no answer to {request}"
        return reply

    async def scenario() -> None:
        await ledger.start("h-1", 1)
        assert await ledger.query("h-1", "balance", timeout=60) == 1
        journaled = await ledger.journal("h-1")
        rejected = {  # answered rejected; the first two are unusable records, dead-lettered too
            "args that are no array": raw(payload=b'{"a": 1}'),
            "args that are no JSON": raw(payload=b"[nope"),
            "an unknown query": raw(query="explode"),
        }
        for what, request in rejected.items():
            reply = await ask(request)
            assert reply.answer == "rejected" and reply.reason, (what, reply)
        assert reply.status == "RUNNING" and "has no query 'explode'" in reply.reason, reply
        failed = {"broken": "KeyError", "spin": "ran longer than", "huge": "more than"}
        for name, reason in failed.items():
            began = time.monotonic()
            reply = await ask(raw(query=name))
            assert reply.answer == "failed" and reason in (reply.reason or ""), (name, reply)
            assert time.monotonic() - began < 20, name
        # Requests that break a limit cannot be trusted to name where to answer: dead-lettered only.
        for request in (raw(query=None), raw(query="n" * 300), raw(payload=b"[" + b"1," * 300_000 + b"1]")):
            await requester.send(ledger.topics.inbox, request)
        producer = kafka(kafka_bootstrap).producer()
        for envelope in (b"{", json.dumps({"kind": "query_handler", "instance_id": "h-1"}).encode(),
                         json.dumps({"kind": "query_handler", "instance_id": "h-1", "query": 7}).encode(),
                         json.dumps({"kind": "signal", "instance_id": "h-1", "signal": "post",
                                     "query": "balance"}).encode()):
            producer.produce(ledger.topics.inbox, envelope, b"h-1", headers=[("content-type", b"application/json")])
        producer.flush(10)
        # A canary on the same instance (one partition, in order): still serving, its state untouched.
        await ledger.signal("h-1", "post", 2)
        await eventually_entries(workflow_app, "h-1", [2])
        assert await ledger.query("h-1", "balance", timeout=30) == 3
        after = await ledger.journal("h-1")
        assert after[:len(journaled)] == journaled
        assert not any("query" in type(record).__name__.lower() for record in after)
        # Only the canary's signal and its steps were journaled, nothing of the hostile requests.
        assert len(after) - len(journaled) <= 6, after[len(journaled):]

    run(scenario())

    def dead_letters() -> list[DeadLetter]:
        letters = [avro.decode(r.value) for r in read_topic(kafka_bootstrap, f"{workflow_app.name}.deadletter")]
        assert len(letters) == 9, letters  # 2 refused + 3 over a limit + 4 malformed JSON envelopes
        return letters  # type: ignore[return-value]

    letters = assert_eventually(dead_letters, timeout=60, message="the malformed requests are dead-lettered")
    assert all(letter.source_topic == ledger.topics.inbox for letter in letters)


def test_the_cli_and_a_json_envelope_query(
    kafka_bootstrap: str, app_id: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    ledger = workflow_app.workflow_handle("ledger")
    run(ledger.start("cli-1", 4))
    run(ledger.signal("cli-1", "post", 6))
    run(eventually_entries(workflow_app, "cli-1", [6]))
    tidings = workflow_cli(kafka_bootstrap, app_id, calls)
    assert tidings("query", "ledger", "cli-1", "balance", "--timeout", "60") == (
        0, {"queried": "cli-1", "query": "balance", "workflow": "ledger", "result": 10})
    assert tidings("query", "ledger", "cli-1", "entry", "[0]", "--timeout", "60")[1]["result"] == 6
    code, error = tidings("query", "ledger", "cli-1", "nope", "--timeout", "60")
    assert code == 1 and "has no query 'nope'" in error
    code, error = tidings("query", "ledger", "cli-1", "broken", "--timeout", "60")
    assert code == 1 and "KeyError" in error
    code, error = tidings("query", "ledger", "cli-1", "entry", "{nope")
    assert code != 0 and "not JSON" in error
    code, error = tidings("query", "ledger", "cli-1", "entry", '{"i": 0}')
    assert code == 1 and "JSON array" in error
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "query", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and "ARGS_JSON" in done.stdout and "on_query" in done.stdout

    # A JSON producer, answered in JSON on its own replies topic.
    replies = f"{app_id}.replies"
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    producer.produce(ledger.topics.inbox, json.dumps({
        "kind": "query_handler", "instance_id": "cli-1", "query": "entry", "payload": [0],
        "reply_to": replies, "request_id": "json-q-1"}).encode(), b"cli-1",
        headers=[("content-type", b"application/json")])
    producer.flush(10)

    def answered() -> Any:
        found = [r for r in read_topic(kafka_bootstrap, replies) if r.key == b"json-q-1"]
        assert found, "no JSON answer yet"
        return json.loads(found[-1].value)

    answer = assert_eventually(answered, timeout=60)
    assert answer["answer"] == "answered" and answer["result"] in (6, "6") and answer["status"] == "RUNNING", answer
