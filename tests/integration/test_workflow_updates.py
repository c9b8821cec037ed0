"""Updates on a real broker and worker process: accepted and answered after a step; a validator's
rejection journals nothing; an update sent before the body waits; de-duplication by update id; an
ended instance; update-with-start; a SIGKILL between acceptance and the answer; hostile update
requests (malformed, unknown names, huge payloads, a handler that raises); the CLI and JSON."""

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
from tidings.testing.topics import read_topic
from tidings.core.workflow import Started, StepStarted
from tidings.core.workflow.journal import UpdateAnswered, UpdateReceived
from tidings.core.workflow_records import WorkflowInbox
from tidings.errors import WorkflowEnded, WorkflowNotFound, WorkflowUpdateFailed, WorkflowUpdateRejected
from tidings.testing.eventually import assert_eventually
from tests.integration.workflow_apps import Calls
from tests.workflow_workers import ROOT, WorkflowWorkers, calls, workflow_app, workflow_cli, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka
from tests.workers import both_guarantees


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def journal(app: App, instance_id: str) -> list[Any]:
    return run(app.workflow_handle("cart").journal(instance_id))


def updates_in(records: list[Any]) -> tuple[list[UpdateReceived], list[UpdateAnswered]]:
    return ([r for r in records if isinstance(r, UpdateReceived)], [r for r in records if isinstance(r, UpdateAnswered)])


def test_updates_are_answered_rejected_stored_before_the_wait_and_deduplicated(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    cart = workflow_app.workflow_handle("cart")
    (calls.directory).mkdir(parents=True, exist_ok=True)
    (calls.directory / "gate-100").touch()
    try:
        async def scenario() -> None:
            with pytest.raises(WorkflowNotFound):
                await client.update("cart", "nobody", "add_item", 1, timeout=30)
            await cart.start("c-1", 3.0)  # sleeps 3 s: the first update arrives before the body waits
            assert await client.update("cart", "c-1", "add_item", 5, update_id="u-1", timeout=60) == 1
            # A repeat of u-1 stores nothing and gets the first answer.
            assert await client.update("cart", "c-1", "add_item", 7, update_id="u-1", timeout=30) == 1
            # An update that runs an activity before it is answered.
            assert await cart.update("c-1", "add_item", 100, timeout=60) == 2
            before = await cart.journal("c-1")
            with pytest.raises(WorkflowUpdateRejected, match="must not be negative"):
                await cart.update("c-1", "add_item", -1, timeout=30)
            with pytest.raises(WorkflowUpdateRejected, match="declares no update 'remove'"):
                await cart.update("c-1", "remove", 1, timeout=30)
            with pytest.raises(WorkflowUpdateRejected, match="does not read as its type"):
                await cart.update("c-1", "add_item", "three", timeout=30)
            assert await cart.journal("c-1") == before  # the rejections journaled nothing
            with pytest.raises(WorkflowUpdateFailed, match="out of stock"):
                await cart.update("c-1", "add_item", 99, timeout=30)
            assert await cart.update("c-1", "add_item", 2, wait_for="accepted", update_id="u-2", timeout=30) is None
            assert await cart.update("c-1", "add_item", 2, update_id="u-2", timeout=30) == 3  # its answer
            assert await cart.update("c-1", "close", timeout=30) == [5, 1000, 2]
            with pytest.raises(WorkflowEnded, match="has ended"):
                await cart.update("c-1", "add_item", 1, timeout=30)
            # A repeat of an update answered before the end still gets its first answer.
            assert await client.update("cart", "c-1", "add_item", 7, update_id="u-1", timeout=30) == 1

        run(scenario())
        records = journal(workflow_app, "c-1")
        received, answered = updates_in(records)
        assert [r.update_id for r in received].count("u-1") == 1
        # u-1 was stored while the body slept, before it first waited for an update.
        first_wait = next(r for r in records if isinstance(r, StepStarted) and r.kind == "update")
        assert received[0].update_id == "u-1" and received[0].seq < first_wait.seq
        assert len(received) == len(answered) == 5  # 5, 100, 99, 2 and close; nothing rejected
        assert len(calls.lines("gated")) == 1
    finally:
        client.close()


def test_update_with_start_starts_once_with_the_update(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    cart = workflow_app.workflow_handle("cart")

    async def scenario() -> None:
        assert await cart.update_with_start("s-1", 0.0, "add_item", 4, timeout=60) == 1
        assert await cart.update_with_start("s-1", 0.0, "add_item", 6, timeout=60) == 2
        with pytest.raises(WorkflowUpdateRejected):
            await cart.update_with_start("s-2", 0.0, "add_item", -4, timeout=60)
        assert await cart.update("s-1", "close", timeout=30) == [4, 6]

    run(scenario())
    records = journal(workflow_app, "s-1")
    assert [type(r) for r in records][:2] == [Started, UpdateReceived]
    assert [type(r) for r in records].count(Started) == 1
    assert journal(workflow_app, "s-2") == []  # a rejected update-with-start starts nothing


@both_guarantees
def test_an_update_accepted_survives_a_sigkill_before_its_answer(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    worker = workflow_workers.start("w1")
    client = Client(kafka_bootstrap, app=workflow_app)
    cart = workflow_app.workflow_handle("cart")

    async def scenario() -> Any:
        await cart.start("k-1", 0.0)
        assert await client.update("cart", "k-1", "add_item", 1, timeout=60) == 1  # warm: worker up
        caller = asyncio.ensure_future(client.update("cart", "k-1", "add_item", 100, update_id="kill-1", timeout=150))
        # Accepted and its activity running (it waits for its gate): kill before the answer.
        deadline = time.monotonic() + 60
        while not calls.lines("gated") and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert calls.lines("gated"), workflow_workers.log_tail()
        received, answered = updates_in(await cart.journal("k-1"))
        assert [r.update_id for r in received] == [received[0].update_id, "kill-1"] and len(answered) == 1
        worker.kill()
        (calls.directory / "gate-100").touch()
        workflow_workers.start("w1-again", data_dir=worker.data_dir)
        return await caller

    try:
        assert run(scenario()) == 2, workflow_workers.log_tail()
        records = journal(workflow_app, "k-1")
        received, answered = updates_in(records)
        assert [r.update_id for r in received].count("kill-1") == 1
        assert [r.update_id for r in answered].count("kill-1") == 1
        assert len(calls.lines("gated")) == 2  # the activity ran again after the restart, at least once
    finally:
        client.close()


def test_hostile_update_requests_get_a_clear_error_and_the_worker_goes_on_in_order(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    client = Client(kafka_bootstrap, app=workflow_app)
    cart = workflow_app.workflow_handle("cart")

    def raw(kind: str = "update", **fields: Any) -> WorkflowInbox:
        base: dict[str, Any] = {"payload": b"1", "update": "add_item", "update_id": uuid.uuid4().hex}
        base.update(fields)
        return WorkflowInbox(uuid.uuid4().hex, "h-1", kind, int(time.time() * 1000),
                             reply_to=cart.client().requester.replies_topic, **base)

    async def ask(request: WorkflowInbox) -> Any:
        reply = await cart.client().requester.ask(cart.topics.inbox, request, 30)
        assert reply is not None, f"no answer to {request}"
        return reply

    try:
        async def scenario() -> None:
            await cart.start("h-1", 0.0)
            assert await cart.update("h-1", "add_item", 1, timeout=60) == 1
            answered = {
                "a wait_for of nonsense": raw(wait_for="soon"),  # dead-lettered too
                "a payload that is no JSON": raw(payload=b"{nope"),  # dead-lettered too
                "an unknown update": raw(update="explode"),
            }
            for what, request in answered.items():
                reply = await ask(request)
                assert reply.answer == "rejected" and reply.reason, (what, reply)
            # Requests that break a limit cannot be trusted to name where to answer: dead-lettered only.
            for request in (raw(update_id=None), raw(update=None), raw(update="n" * 300),
                            raw(payload=b'"' + b"x" * 600_000 + b'"')):
                await cart.client().requester.send(cart.topics.inbox, request)
            # Malformed JSON envelopes, then a canary on the same instance (one partition, in order).
            producer = kafka(kafka_bootstrap).producer()
            for envelope in (b"{", json.dumps({"kind": "update", "instance_id": "h-1"}).encode(),
                             json.dumps({"kind": "update", "instance_id": "h-1", "update": "add_item",
                                         "update_id": 7}).encode(),
                             json.dumps({"kind": "signal", "instance_id": "h-1", "signal": "x",
                                         "update_id": "u"}).encode()):
                producer.produce(cart.topics.inbox, envelope, b"h-1", headers=[("content-type", b"application/json")])
            producer.flush(10)
            assert await cart.update("h-1", "add_item", 2, timeout=60) == 2  # still serving, in order
            # A handler that raises faults its instance: the caller hears it ended, others go on.
            with pytest.raises(WorkflowEnded, match="faulted"):
                await cart.update("h-1", "add_item", 13, timeout=60)
            await cart.start("h-2", 0.0)
            assert await cart.update("h-2", "add_item", 3, timeout=60) == 1

        run(scenario())
        received, _ = updates_in(journal(workflow_app, "h-1"))
        assert [r.payload for r in received] == ["1", "2", "13"]  # nothing hostile was stored

        def dead_letters() -> list[DeadLetter]:
            letters = [avro.decode(r.value) for r in read_topic(kafka_bootstrap, f"{workflow_app.name}.deadletter")]
            assert len(letters) == 10, letters  # 2 refused + 4 over a limit + 4 malformed JSON envelopes
            return letters  # type: ignore[return-value]

        letters = assert_eventually(dead_letters, timeout=60, message="the malformed requests are dead-lettered")
        assert all(letter.source_topic == cart.topics.inbox for letter in letters)
    finally:
        client.close()


def test_the_cli_and_a_json_envelope_update(
    kafka_bootstrap: str, app_id: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    tidings = workflow_cli(kafka_bootstrap, app_id, calls)
    assert tidings("update", "cart", "cli-1", "add_item", "2", "--start", "0", "--timeout", "60") == (
        0, {"updated": "cli-1", "update": "add_item", "workflow": "cart", "answer": "completed", "result": 1})
    assert tidings("update", "cart", "cli-1", "add_item", "3", "--wait", "accepted", "--update-id", "a",
                   "--timeout", "60")[1]["answer"] == "accepted"
    assert tidings("update", "cart", "cli-1", "add_item", "3", "--update-id", "a", "--timeout", "60")[1]["result"] == 2
    code, error = tidings("update", "cart", "cli-1", "add_item", "-3", "--timeout", "60")
    assert code == 1 and "must not be negative" in error
    code, error = tidings("update", "cart", "cli-1", "add_item", "{nope")
    assert code != 0 and "not JSON" in error
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "update", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and "--wait" in done.stdout and "update-with-start" in done.stdout

    # A JSON producer, answered in JSON on its own replies topic.
    cart = workflow_app.workflow_handle("cart")
    replies = f"{app_id}.replies"
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    producer.produce(cart.topics.inbox, json.dumps({
        "kind": "update", "instance_id": "cli-1", "update": "add_item", "update_id": "json-1", "payload": 4,
        "reply_to": replies, "request_id": "json-req-1"}).encode(), b"cli-1",
        headers=[("content-type", b"application/json")])
    producer.flush(10)

    def answered() -> Any:
        found = [r for r in read_topic(kafka_bootstrap, replies) if r.key == b"json-req-1"]
        assert found, "no JSON answer yet"
        return json.loads(found[-1].value)

    answer = assert_eventually(answered, timeout=60)
    assert answer is not None and answer["answer"] == "completed" and answer["result"] in (3, "3"), answer
