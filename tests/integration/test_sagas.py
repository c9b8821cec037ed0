"""Sagas on the real broker: started by a stored event, driven by events routed by
correlation id and by replies, recovered with the same command ids, immune to bad records."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any


from tidings import App, SagaHandle
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import EventEnvelope, ReplyEnvelope
from tidings.core.saga import saga_command_id
from tidings.core.saga_records import SagaRouted
from tidings.testing.eventually import assert_eventually, assert_eventually_async
from tidings.testing.topics import read_topic
from tests.integration.saga_apps import Pay, Release
from tests.saga_workers import (  # noqa: F401 - fixtures
    commands_sent,
    journal_topic,
    saga_app,
    saga_workers,
    stored_events,
)
from tests.workers import ROOT, Workers
from tests.kafka_clients import kafka


def transfers(app: App) -> SagaHandle:
    (saga,) = app.sagas
    return saga


async def ended(app: App, saga_id: str, timeout: float = 60.0) -> Any:
    saga = transfers(app)

    async def done() -> Any:
        status = await saga.status(saga_id)
        return status if status is not None and status.ended else None

    return await assert_eventually_async(done, timeout=timeout, interval=0.2,
                                         message=f"saga {saga_id} to end")


def test_a_two_aggregate_saga_runs_to_its_end_and_refunds_when_refused(
    kafka_bootstrap: str, saga_app: App, saga_workers: Workers
) -> None:
    worker = saga_workers.start()
    client = saga_app.client(kafka_bootstrap)

    async def scenario() -> None:
        await client.send("wallet", "alice", Pay(transfer="t-ok", target="bob", amount=30), correlation_id="t-ok")
        await client.send("wallet", "alice", Pay(transfer="t-no", target="closed-carol", amount=20),
                          correlation_id="t-no")
        done = await ended(saga_app, "t-ok")
        assert done.state.phase == "done" and done.transition == "stop"
        refunded = await ended(saga_app, "t-no")
        assert refunded.state.phase == "refunded"
        journal = await transfers(saga_app).journal("t-no")
        assert [r.transition for r in journal] == ["start", "handle", "handle", "stop"]
        # Refused is deferred (never stored): it reached the saga only in the reply.
        assert journal[1].state is not None and b"refunding" in journal[1].state

    try:
        asyncio.run(scenario())
    except BaseException:
        print(worker.log_tail(200))
        raise
    # Every command of the saga carried its id as correlation id and a derived command id.
    take = commands_sent(kafka_bootstrap, saga_app, "vault", saga_command_id("transfer", "t-ok", 1, 0))
    assert take and all(c.correlation_id == "t-ok" and c.reply_key == "t-ok" for c in take)
    assert take[0].reply_to == f"{saga_app.name}.saga.transfer.replies"
    (taken,) = stored_events(kafka_bootstrap, saga_app, "vault", "t-ok")
    assert taken.type == "Taken"
    (refund,) = [e for e in stored_events(kafka_bootstrap, saga_app, "wallet", "t-no") if e.type == "Refunded"]
    assert refund.aggregate_id == "alice"
    # The operator's view: `tidings saga status` and `tidings saga journal` read the journal.
    env = {**os.environ, "TEST_APP_ID": saga_app.name, "TIDINGS_BOOTSTRAP": kafka_bootstrap}
    spec = "tests.integration.saga_apps:app"
    status = subprocess.run([sys.executable, "-m", "tidings.cli.main", "saga", "status", spec, "transfer", "t-no"],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    shown = json.loads(status.stdout)
    assert (shown["started"], shown["ended"], shown["seq"], shown["transition"]) == (True, True, 4, "stop")
    assert shown["state"]["phase"] == "refunded"
    journal = subprocess.run([sys.executable, "-m", "tidings.cli.main", "saga", "journal", spec, "transfer", "t-no"],
                             env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    lines = [json.loads(line) for line in journal.stdout.splitlines()]
    assert [line["seq"] for line in lines] == [1, 2, 3, 4]
    assert lines[0]["commands"][0]["command"]["mode"] == "closed"
    never = subprocess.run([sys.executable, "-m", "tidings.cli.main", "saga", "status", spec, "transfer", "t-never"],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(never.stdout) == {"saga": "transfer", "id": "t-never", "started": False}


def test_events_reach_the_saga_by_correlation_id_and_a_resend_after_recovery_stores_nothing_twice(
    kafka_bootstrap: str, saga_app: App, saga_workers: Workers
) -> None:
    worker = saga_workers.start()
    client = saga_app.client(kafka_bootstrap)
    saga_id = "t-hold"
    hold_id = saga_command_id("transfer", saga_id, 2, 0)

    async def holding() -> None:
        await client.send("wallet", "dave", Pay(transfer=saga_id, target="hold-erin", amount=5), correlation_id=saga_id)
        await assert_eventually_async(
            lambda: [e for e in stored_events(kafka_bootstrap, saga_app, "vault", saga_id) if e.type == "Held"],
            timeout=60, interval=0.3, message="the saga to hold")

    try:
        asyncio.run(holding())
        worker.kill()
        # A restart with the same RocksDB: recovery runs on_enter(recovering=True) of "holding".
        worker = saga_workers.start("w1", data_dir=worker.data_dir)
        assert_eventually(lambda: len(commands_sent(kafka_bootstrap, saga_app, "vault", hold_id)) >= 2,
                          timeout=90, interval=0.5, message="Hold to be sent again after the restart")

        async def release() -> None:
            # An event the test makes another aggregate instance store, under the saga's id.
            await client.send("vault", "frank", Release(transfer=saga_id), correlation_id=saga_id)
            done = await ended(saga_app, saga_id)
            assert done.state.phase == "done"

        asyncio.run(release())
    except BaseException:
        print(worker.log_tail(200))
        raise
    # The resend had the first one's id, so the vault answered it and stored nothing new.
    held = [e for e in stored_events(kafka_bootstrap, saga_app, "vault", saga_id) if e.type == "Held"]
    assert len(held) == 1
    assert len({c.command_id for c in commands_sent(kafka_bootstrap, saga_app, "vault", hold_id)}) == 1


def test_hostile_records_on_the_inbox_and_replies_are_dead_lettered_and_the_saga_goes_on(
    kafka_bootstrap: str, saga_app: App, saga_workers: Workers
) -> None:
    worker = saga_workers.start()
    client = saga_app.client(kafka_bootstrap)
    saga = transfers(saga_app)
    inbox, replies = saga.topics.inbox, saga.topics.replies
    parts = saga_app.partitions
    good_event = EventEnvelope("e-1", "c-1", "x-1", "mallory", 1, "Paid", b'{"transfer":"x","target":"bob","amount":1}', 0)
    hostile: list[tuple[str, bytes | None, bytes | None, int]] = [
        (inbox, b"k", b"not avro at all", 0),
        (inbox, b"k", None, 1),
        (inbox, b"x-1", avro.encode(SagaRouted("other-saga", "wallet", good_event)), partition_for("x-1", parts)),
        (inbox, b"x-2", avro.encode(SagaRouted("transfer", "no-such-aggregate", good_event)), partition_for("x-1", parts)),
        (inbox, b"x-1", avro.encode(SagaRouted("transfer", "wallet", EventEnvelope(
            "e-2", "c-2", "x-1", "mallory", 1, "Paid", b"{not json", 0))), partition_for("x-1", parts)),
        (inbox, b"x-1", avro.encode(SagaRouted("transfer", "wallet", EventEnvelope(
            "", "c-3", "x-1", "mallory", 1, "Paid", b"{}", 0))), partition_for("x-1", parts)),
        (replies, b"nobody", avro.encode(ReplyEnvelope("c-9", "nobody", "bob", "accepted", 1, 0)),
         partition_for("nobody", parts)),
        (replies, b"k", b"\xc3\x01garbage", 2),
    ]
    producer = kafka(kafka_bootstrap).producer()
    for topic, key, value, partition in hostile:
        producer.produce(topic, value=value, key=key, partition=partition)
    producer.flush(10)

    def letters() -> list[Any]:
        from tidings.core.records import DeadLetter

        found = [avro.decode_as(r.value, DeadLetter) for r in read_topic(kafka_bootstrap, f"{saga_app.name}.deadletter")]
        return [d for d in found if d.source_topic in (inbox, replies)]

    try:
        dead = assert_eventually(lambda: (lambda d: d if len(d) >= len(hostile) else None)(letters()),
                                 timeout=90, interval=0.5, message="every hostile record dead-lettered")
        assert len(dead) == len(hostile), [d.reason for d in dead]

        async def canary() -> None:
            await client.send("wallet", "alice", Pay(transfer="t-after", target="bob", amount=1), correlation_id="t-after")
            assert (await ended(saga_app, "t-after")).state.phase == "done"
            # The well-formed reply to no saga started nothing.
            assert await saga.status("nobody") is None

        asyncio.run(canary())
    except BaseException:
        print(worker.log_tail(200))
        raise
    assert worker.running


def test_status_of_a_saga_never_started_is_none(kafka_bootstrap: str, saga_app: App) -> None:
    start = time.monotonic()
    assert asyncio.run(transfers(saga_app).status("never")) is None
    assert time.monotonic() - start < 30
