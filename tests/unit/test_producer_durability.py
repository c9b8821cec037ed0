"""Every producer tidings builds is idempotent with ``acks=all``, whatever the connection says.

A user's ``App(kafka={"acks": "1"})``, a ``producer.enable.idempotence=false`` line in a
properties file or a ``TIDINGS_KAFKA_ACKS`` variable must not weaken the guarantees of
SPEC §2 (no record lost on a leader failover, no duplicate from a retry): each producer's own
settings win over the connection's (``KafkaConnection.config``). The call sites are listed
by reading the source, so a new producer fails this test until it is added here.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from tidings.console.actions import replay_producer
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.kafka import ConfluentPublisher
from tidings.shell.runtime.requester import RequestSender
from tidings.shell.runtime.transactions import TransactionalPublisher

NOWHERE = "127.0.0.1:1"
PLATFORM = Path(__file__).resolve().parents[2] / "platform" / "tidings"
#: Every module that builds a producer, and how many it builds.
PRODUCER_SITES = {
    "shell/runtime/kafka.py": 1,  # ConfluentPublisher (at-least-once worker)
    "shell/runtime/transactions.py": 1,  # TransactionalPublisher (exactly-once worker)
    "shell/runtime/requester.py": 1,  # RequestSender (every Client and CLI command)
    "console/actions.py": 1,  # replay_producer (a dead letter sent back from the console)
}


def weakened() -> KafkaConnection:
    return KafkaConnection.resolve(bootstrap=NOWHERE, environ={}, kafka={
        "acks": "1", "enable.idempotence": "false", "producer.acks": "0",
        "producer.enable.idempotence": "false"})


def test_every_producer_site_is_one_this_test_builds() -> None:
    sites = {}
    for path in PLATFORM.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        # Code lines only: a docstring names calls in ``...``, a comment after #.
        count = len(re.findall(r"^[^#`\n]*(?:\.producer\(|AIOKafkaProducer\()", text, re.MULTILINE))
        if count and path.name != "connection.py":
            sites[str(path.relative_to(PLATFORM))] = count
    assert sites == PRODUCER_SITES


def test_each_producer_is_idempotent_with_acks_all_over_a_connection_that_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "clients.jsonl"
    monkeypatch.setenv("TIDINGS_KAFKA_RECORD_CLIENTS", str(record))
    connection = weakened()

    async def build() -> None:
        ConfluentPublisher(connection).close(0.1)
        TransactionalPublisher(connection, transactional_id="t-1", group_metadata=lambda: None,
                               on_fenced=lambda exc: None).close(0.1)
        RequestSender(connection).close(0.1)
        replay_producer(connection).flush(0)

    asyncio.run(build())
    built = [json.loads(line) for line in record.read_text().splitlines()]
    sites = sorted(line["site"].rsplit(".", 2)[-2] for line in built)
    assert sites == ["ConfluentPublisher", "RequestSender", "TransactionalPublisher", "actions"]
    for line in built:
        assert line["config"]["acks"] == "all", line["site"]
        assert line["config"]["enable.idempotence"] in ("True", "true"), line["site"]


def test_the_aiokafka_producer_is_idempotent_with_acks_all_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "clients.jsonl"
    monkeypatch.setenv("TIDINGS_KAFKA_RECORD_CLIENTS", str(record))
    # The connection's acks=1 has no aiokafka equivalent and is dropped; aiokafka's own
    # default would be acks=1 without idempotence.
    assert "acks" not in weakened().aiokafka("producer")

    async def build() -> None:
        await weakened().aiokafka_producer().stop()

    asyncio.run(build())
    (built,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert built["config"]["acks"] == "all"
    assert built["config"]["enable_idempotence"] in ("True", "true")
