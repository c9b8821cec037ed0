"""The transactional publisher against the real broker: records and input offsets commit together.

What exactly-once rests on: records become visible to ``read_committed`` readers only with the
offsets of the input that produced them; a zombie whose group generation is stale is fenced
(KIP-447) and makes nothing visible; a process killed mid-transaction leaves nothing
half-visible, and its successor with the same transactional id clears it at start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from tidings.errors import BrokerError, RecordRejected
from tidings.shell.runtime.io import Outgoing
from tidings.shell.runtime.transactions import GROUP_FENCING, Fenced, TransactionAborted, TransactionalPublisher
from tidings.testing.eventually import assert_eventually
from tests.kafka_clients import kafka

SESSION_TIMEOUT_MS = 6000  # the broker's minimum


def create_topics(bootstrap: str, *topics: NewTopic) -> None:
    admin = kafka(bootstrap).admin()
    for future in admin.create_topics(list(topics), operation_timeout=30).values():
        future.result(30)


def read_to_end(
    bootstrap: str, topic: str, partitions: int, *, isolation: str, timeout: float = 10.0
) -> list[tuple[int, bytes]]:
    """Read ``topic`` up to the end it has now, as ``(partition, value)`` in offset order.

    A ``read_committed`` reader stops at the first open transaction's records; raises
    ``TimeoutError`` when it cannot reach the end (records of an open transaction).
    """
    ends = _ends(bootstrap, topic, partitions)
    consumer = kafka(bootstrap).consumer(
        **{
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        while True:
            for message in consumer.consume(1000, 0.1):
                if message.error() is None:
                    values.append((message.partition() or 0, message.value() or b""))
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(max(tp.offset, 0) >= ends[tp.partition] for tp in positions):
                return values
            if time.monotonic() > deadline:
                raise TimeoutError(f"{isolation} reader of {topic} stuck at {positions}, end {ends}")
    finally:
        consumer.close()


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    # read_uncommitted: the high watermark, past open transactions and commit markers
    # (librdkafka's default, read_committed, answers the last stable offset instead).
    consumer = kafka(bootstrap).consumer(
        **{
            "group.id": f"ends-{uuid.uuid4().hex}",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def group_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    """Return the group's committed offset (negative when none), without joining it."""
    consumer = kafka(bootstrap).consumer(**{"group.id": group, "enable.auto.commit": False})
    try:
        (committed,) = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return int(committed.offset)
    finally:
        consumer.close()


def produce_input(bootstrap: str, topic: str, count: int) -> None:
    producer = kafka(bootstrap).producer()
    for index in range(count):
        producer.produce(topic, f"in-{index}".encode(), b"k", partition=0)
    assert producer.flush(10) == 0


def member(bootstrap: str, group: str, topic: str) -> Consumer:
    """Join ``group`` on ``topic`` and poll until the consumer is assigned its partition."""
    consumer = kafka(bootstrap).consumer(
        **{
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    assert_eventually(
        lambda: consumer.poll(0.2) is not None or consumer.assignment(),
        timeout=30,
        message=f"{group} assigns {topic}",
    )
    return consumer


def publisher_for(bootstrap: str, names: Mapping[str, str], group_metadata: Callable[[], object],
            on_fenced: Callable[[BaseException], None] = lambda error: None) -> TransactionalPublisher:
    """The publisher under test with the test's transactional id (``start`` it)."""
    return TransactionalPublisher(kafka(bootstrap), transactional_id=names["transactional_id"],
                                  group_metadata=group_metadata, on_fenced=on_fenced)


@pytest.fixture
def names(app_id: str) -> Iterator[Mapping[str, str]]:
    yield {
        "input": f"{app_id}.txn.input",
        "output": f"{app_id}.txn.output",
        "group": f"{app_id}-group",
        "transactional_id": f"{app_id}-worker",
    }


def test_records_and_offsets_commit_together_and_become_visible(
    kafka_bootstrap: str, names: Mapping[str, str]
) -> None:
    create_topics(kafka_bootstrap, NewTopic(names["input"], 1, 1), NewTopic(names["output"], 2, 1))
    produce_input(kafka_bootstrap, names["input"], 5)
    consumer = member(kafka_bootstrap, names["group"], names["input"])
    fenced: list[BaseException] = []

    async def scenario() -> TransactionalPublisher:
        publisher = publisher_for(kafka_bootstrap, names, consumer.consumer_group_metadata, fenced.append)
        await publisher.start()
        try:
            sent = publisher.send(
                [Outgoing(names["output"], b"k", f"out-{i}".encode(), partition=i % 2) for i in range(10)]
            )
            # Two callers' offsets merge: the highest per partition is committed.
            await asyncio.gather(
                publisher.commit_offsets({(names["input"], 0): 3}),
                publisher.commit_offsets({(names["input"], 0): 2}),
            )
            positions = await sent
            assert [p.partition for p in positions] == [i % 2 for i in range(10)]
            # Nothing waits: no transaction is paid for.
            await publisher.committed()
        finally:
            await publisher.aclose()
        return publisher

    try:
        publisher = asyncio.run(scenario())
    finally:
        consumer.close()
    assert (publisher.commits, publisher.aborts, fenced) == (1, 0, [])
    visible = read_to_end(kafka_bootstrap, names["output"], 2, isolation="read_committed")
    assert sorted(value for _, value in visible) == sorted(f"out-{i}".encode() for i in range(10))
    assert group_offset(kafka_bootstrap, names["group"], names["input"], 0) == 3


def test_records_sent_during_a_commit_go_into_the_next_transaction_in_order(
    kafka_bootstrap: str, names: Mapping[str, str]
) -> None:
    create_topics(kafka_bootstrap, NewTopic(names["input"], 1, 1), NewTopic(names["output"], 1, 1))
    produce_input(kafka_bootstrap, names["input"], 3)
    consumer = member(kafka_bootstrap, names["group"], names["input"])

    def batch(label: str, size: int = 100) -> list[Outgoing]:
        return [Outgoing(names["output"], b"k", f"{label}-{i:03}".encode(), partition=0) for i in range(size)]

    sent: list[list[Outgoing]] = []

    async def scenario() -> TransactionalPublisher:
        publisher = publisher_for(kafka_bootstrap, names, consumer.consumer_group_metadata)
        await publisher.start()
        try:
            sent.append(batch("a"))
            first = publisher.send(sent[-1])
            first_commit = publisher.commit_offsets({(names["input"], 0): 1})
            while not publisher.in_commit:  # the committer takes the transaction
                await asyncio.sleep(0)
            # Send all through the commit: librdkafka refuses produce from the moment the
            # commit begins until the next transaction does, so these must all be held.
            held = []
            while not first_commit.done():
                assert publisher.in_commit
                sent.append(batch(f"b{len(sent)}", 3))
                held.append(publisher.send(sent[-1]))
                await asyncio.sleep(0.0005)
            await first_commit
            # How many batches fit inside the commit is the machine's speed (a loaded one
            # commits in fewer steps of the loop): one held is enough to check the order.
            assert publisher.commits == 1 and held, "no batch was sent while the commit ran"
            await publisher.commit_offsets({(names["input"], 0): 3})
            first_positions = await first
            held_positions = [p for future in held for p in await future]
        finally:
            await publisher.aclose()
        # One offset between the transactions: the first one's commit marker.
        assert held_positions[0].offset == first_positions[-1].offset + 2
        offsets = [p.offset for p in held_positions]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        return publisher

    try:
        publisher = asyncio.run(scenario())
    finally:
        consumer.close()
    assert (publisher.commits, publisher.aborts) == (2, 0)
    visible = [value for _, value in read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_committed")]
    assert visible == [r.value for records in sent for r in records]
    assert group_offset(kafka_bootstrap, names["group"], names["input"], 0) == 3


def test_a_zombie_with_a_stale_generation_is_fenced_and_makes_nothing_visible(
    kafka_bootstrap: str, names: Mapping[str, str]
) -> None:
    create_topics(kafka_bootstrap, NewTopic(names["input"], 1, 1), NewTopic(names["output"], 1, 1))
    produce_input(kafka_bootstrap, names["input"], 10)
    zombie = member(kafka_bootstrap, names["group"], names["input"])
    # The zombie's view of the group: it stops polling here and never learns what follows.
    stale = zombie.consumer_group_metadata()
    zombie.close()  # leaves the group at once, instead of after the session timeout
    successor = member(kafka_bootstrap, names["group"], names["input"])
    assert [tp.partition for tp in successor.assignment()] == [0]
    successor.commit(offsets=[TopicPartition(names["input"], 0, 1)], asynchronous=False)
    fenced: list[BaseException] = []
    metadata: list[object] = [stale]

    async def scenario() -> TransactionalPublisher:
        publisher = publisher_for(kafka_bootstrap, names, lambda: metadata[0], fenced.append)
        await publisher.start()
        try:
            # Acknowledged first, so the record is surely written (the abort purges what is not).
            await publisher.send([Outgoing(names["output"], b"k", b"zombie", partition=0)])
            with pytest.raises(Fenced) as refused:
                await publisher.commit_offsets({(names["input"], 0): 7})
            assert fenced == [refused.value]
            # Refused by the group coordinator for the stale generation, not for another reason.
            cause = refused.value.__cause__
            assert isinstance(cause, KafkaException)
            assert cause.args[0].code() in GROUP_FENCING, cause
            assert isinstance(refused.value, BrokerError)

            # The producer stays usable: once the worker rejoined, its offsets commit again.
            metadata[0] = successor.consumer_group_metadata()
            publisher.send([Outgoing(names["output"], b"k", b"successor", partition=0)])
            await publisher.commit_offsets({(names["input"], 0): 2})
        finally:
            await publisher.aclose()
        return publisher

    try:
        publisher = asyncio.run(scenario())
    finally:
        successor.close()
    assert (publisher.commits, publisher.aborts) == (1, 1)
    committed = read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_committed")
    assert [value for _, value in committed] == [b"successor"]
    written = read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_uncommitted")
    assert [value for _, value in written] == [b"zombie", b"successor"]
    assert group_offset(kafka_bootstrap, names["group"], names["input"], 0) == 2


VICTIM = """
import asyncio, sys
from tidings.shell.runtime.io import Outgoing
from tidings.shell.runtime.transactions import TransactionalPublisher
from tests.kafka_clients import kafka

async def main(bootstrap: str, transactional_id: str, topic: str) -> None:
    publisher = TransactionalPublisher(
        kafka(bootstrap), transactional_id=transactional_id, group_metadata=lambda: None,
        on_fenced=print, transaction_timeout_ms=120_000,
    )
    await publisher.start()
    await publisher.send([Outgoing(topic, b"k", b"v%d" % i, partition=0) for i in range(20)])
    print("sent", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(*sys.argv[1:]))
"""


def test_a_transaction_left_open_by_a_killed_process_is_never_visible_and_its_successor_aborts_it(
    kafka_bootstrap: str, names: Mapping[str, str]
) -> None:
    create_topics(kafka_bootstrap, NewTopic(names["output"], 1, 1))
    victim = subprocess.Popen(
        [sys.executable, "-c", VICTIM, kafka_bootstrap, names["transactional_id"], names["output"]],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert victim.stdout is not None
        assert victim.stdout.readline().strip() == "sent"
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    written = read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_uncommitted")
    assert len(written) == 20
    # The open transaction (timeout 120 s) holds read_committed readers before its records.
    with pytest.raises(TimeoutError):
        read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_committed", timeout=2.0)

    async def successor() -> None:
        publisher = publisher_for(kafka_bootstrap, names, lambda: None)
        await publisher.start()  # aborts the victim's transaction
        publisher.close()

    started = time.monotonic()
    asyncio.run(successor())
    # Long before the victim's 120 s transaction timeout: the readers pass its records now.
    assert read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_committed", timeout=5.0) == []
    assert time.monotonic() - started < 30


def test_a_record_the_broker_refuses_aborts_its_transaction_and_the_next_one_goes_on(
    kafka_bootstrap: str, names: Mapping[str, str]
) -> None:
    small = f"{names['output']}.small"
    create_topics(
        kafka_bootstrap,
        NewTopic(names["input"], 1, 1),
        NewTopic(names["output"], 1, 1),
        NewTopic(small, 1, 1, config={"max.message.bytes": "1024"}),
    )
    produce_input(kafka_bootstrap, names["input"], 3)
    consumer = member(kafka_bootstrap, names["group"], names["input"])

    async def scenario() -> TransactionalPublisher:
        publisher = publisher_for(kafka_bootstrap, names, consumer.consumer_group_metadata)
        await publisher.start()
        try:
            # Written (acknowledged), yet never visible: its transaction is aborted below.
            await publisher.send([Outgoing(names["output"], b"k", b"lost", partition=0)])
            with pytest.raises(RecordRejected):
                await publisher.send([Outgoing(small, b"k", b"x" * 4096, partition=0)])
            # librdkafka takes no more records into a transaction with a failed write.
            with pytest.raises(TransactionAborted):
                await publisher.send([Outgoing(names["output"], b"k", b"refused", partition=0)])
            with pytest.raises(TransactionAborted):
                await publisher.commit_offsets({(names["input"], 0): 1})
            # Redone, as a caller does after TransactionAborted, without the refused record.
            publisher.send([Outgoing(names["output"], b"k", b"redone", partition=0)])
            await publisher.commit_offsets({(names["input"], 0): 1})
        finally:
            await publisher.aclose()
        return publisher

    try:
        publisher = asyncio.run(scenario())
    finally:
        consumer.close()
    assert (publisher.commits, publisher.aborts) == (1, 1)
    visible = read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_committed")
    assert [value for _, value in visible] == [b"redone"]
    written = read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_uncommitted")
    assert [value for _, value in written] == [b"lost", b"redone"]
    assert group_offset(kafka_bootstrap, names["group"], names["input"], 0) == 1


def test_a_commit_whose_records_are_acknowledged_is_one_call_in_the_transaction_thread(
    kafka_bootstrap: str, names: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offsets, commit and the next begin go to the transaction thread together: each hop
    back to a busy event loop waited for the batch it was deciding (issue 20)."""
    from tidings.shell.runtime import transactions

    # Only the offsets below commit (no timer commit while an ack is still out).
    monkeypatch.setattr(transactions, "MAX_OPEN_S", 60.0)
    create_topics(kafka_bootstrap, NewTopic(names["input"], 1, 1), NewTopic(names["output"], 1, 1))
    produce_input(kafka_bootstrap, names["input"], 3)
    consumer = member(kafka_bootstrap, names["group"], names["input"])
    fenced: list[BaseException] = []
    calls: list[str] = []

    async def scenario() -> TransactionalPublisher:
        publisher = publisher_for(kafka_bootstrap, names, consumer.consumer_group_metadata, fenced.append)
        await publisher.start()
        original = publisher._calls.run

        async def counted(function, *args):  # type: ignore[no-untyped-def]
            calls.append(getattr(function, "__name__", repr(function)))
            return await original(function, *args)

        publisher._calls.run = counted  # type: ignore[method-assign]
        try:
            for round_ in range(3):
                await publisher.send([Outgoing(names["output"], b"k", f"out-{round_}".encode())])  # acked
                await publisher.commit_offsets({(names["input"], 0): round_ + 1})
        finally:
            await publisher.aclose()
        return publisher

    try:
        publisher = asyncio.run(scenario())
    finally:
        consumer.close()
    assert (publisher.commits, publisher.aborts, fenced) == (3, 0, [])
    assert calls == ["_commit_at_once"] * 3
    visible = read_to_end(kafka_bootstrap, names["output"], 1, isolation="read_committed")
    assert [value for _, value in visible] == [b"out-0", b"out-1", b"out-2"]
    assert group_offset(kafka_bootstrap, names["group"], names["input"], 0) == 3
