"""A requester whose producer delivers nothing for ``STUCK_S`` produces with a new one.

librdkafka asks one broker for an idempotent producer's id and retries that broker for ever
(confluent-kafka-python#1335): a client whose every request waited on a broker that kept
refusing ids (after a controller failover on the local cluster) waited for ever. These use a
real librdkafka producer pointed at a port nothing listens on, so nothing is ever delivered.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from tidings.core.workflow_records import WorkflowInbox
from tidings.errors import BrokerError
from tidings.shell.runtime import requester as requester_module
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.requester import Requester, RequestSender


def _nothing_listens() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_sender_says_how_long_its_oldest_undelivered_record_has_waited() -> None:
    sender = RequestSender(KafkaConnection.of(_nothing_listens()))
    try:
        assert sender.stuck_for() == 0.0
        sender.produce("t", b"k", b"v", lambda error, message: None)
        time.sleep(0.3)
        assert sender.stuck_for() >= 0.3
    finally:
        sender.close(0.5)


def test_a_stuck_producer_is_replaced_and_its_waiting_request_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requester_module, "STUCK_S", 0.3)
    requester = Requester(KafkaConnection.of(_nothing_listens()), replies_topic="app.replies")

    def start(instance_id: str) -> WorkflowInbox:
        return WorkflowInbox(f"start:{instance_id}", instance_id, "start", 1, payload=b"1")

    async def scenario() -> None:
        first = asyncio.ensure_future(requester.send("app.workflow.w.inbox", start("a")))
        await asyncio.sleep(0.5)
        stuck = requester._producer
        second = asyncio.ensure_future(requester.send("app.workflow.w.inbox", start("b")))
        await asyncio.sleep(0.1)
        assert requester._producer is not stuck  # a new producer took the second request
        with pytest.raises(BrokerError, match="producing to app.workflow.w.inbox failed"):
            await asyncio.wait_for(first, 5)  # purged with the old producer: the caller retries
        assert not second.done()  # it waits on the new producer (nothing listens here either)
        second.cancel()

    try:
        asyncio.run(scenario())
    finally:
        requester.close()
