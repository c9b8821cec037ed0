"""A kind written only against the hosting protocol gets catch-up, forwarding and zombie detection.

The kind is the counter of ``tests/counter_kind.py``: an inbox of increments, a journal of
``{id}/{n}`` records, outcomes, and a memory-only store. It implements ``Hosted`` and
``Agent`` and hands its journal to a ``PartitionOwner``; none of the three behaviours below
is written in it. Each test runs real workers (child processes) on the real broker and
looks at what they wrote to Kafka.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import StoredRecord, read_topic
from tests.counter_kind import INCREMENT, CounterKind
from tests.integration.counter_apps import build
from tests.workers import Workers, only_at_least_once
from tests.kafka_clients import kafka

TIMEOUT = 45.0


@pytest.fixture
def counter_app(kafka_bootstrap: str, app_id: str) -> App:
    """The counter App named for this test, its topics applied."""
    app = build(app_id)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    return app


@pytest.fixture
def counter_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes of the counter App; every one is killed at the end of the test."""
    # A kind with nothing on disk: the worker must make its data directory itself.
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.counter_apps:app")
    yield started
    started.kill_all()


class Counter:
    """Talks to the counter ``clicks`` of a running App through Kafka only."""

    def __init__(self, app: App, bootstrap: str) -> None:
        self.kind = next(h for h in app.hosted if isinstance(h, CounterKind))
        self.topics = self.kind.topics
        self.partitions = app.partitions
        self.bootstrap = bootstrap
        self._producer = kafka(bootstrap).producer()

    def home(self, counter_id: str) -> int:
        return partition_for(counter_id, self.partitions)

    def increment(self, counter_id: str | None, *, partition: int | None = None,
                  value: bytes = INCREMENT) -> None:
        """Produce an increment to the inbox (by default on the id's home partition)."""
        if partition is None:
            partition = self.home(counter_id) if counter_id is not None else 0
        key = None if counter_id is None else counter_id.encode()
        self._producer.produce(self.topics.inbox, value, key, partition=partition)
        assert self._producer.flush(30) == 0

    def outcomes(self, counter_id: str) -> list[int]:
        """Every count published for ``counter_id``, in order."""
        return [int(r.value or b"") for r in read_topic(self.bootstrap, self.topics.outcomes)
                if r.key == counter_id.encode()]

    def journal(self, counter_id: str) -> list[StoredRecord]:
        """Every journal record of ``counter_id``, in (partition, offset) order."""
        return [r for r in read_topic(self.bootstrap, self.topics.journal)
                if (r.key or b"").startswith(f"{counter_id}/".encode())]

    def wait_for(self, counter_id: str, counts: list[int], workers: Workers) -> None:
        """Wait until the outcomes of ``counter_id`` are exactly ``counts``."""
        seen: list[list[int]] = []

        def arrived() -> bool:
            seen.append(self.outcomes(counter_id))
            return len(seen[-1]) >= len(counts)

        try:
            assert_eventually(arrived, timeout=TIMEOUT, interval=0.3,
                              message=f"outcomes of {counter_id}: {counts}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen {seen[-1:]}\n{workers.log_tail()}") from exc
        assert seen[-1] == counts, workers.log_tail()


@pytest.fixture
def counter(counter_app: App, kafka_bootstrap: str) -> Counter:
    return Counter(counter_app, kafka_bootstrap)


def _keys(records: list[StoredRecord]) -> list[str]:
    return [(r.key or b"").decode() for r in records]


def test_a_fresh_worker_catches_up_from_the_journal(counter: Counter, counter_workers: Workers) -> None:
    """A new worker with an empty store rebuilds the counts from the journal before counting.

    Without the owner's catch-up, worker B's memory would start at 0 for X (its data
    directory is fresh): the fourth increment would publish 1 and journal a second ``X/1``.
    Worker A is SIGKILLed, so its last inbox offsets may not be committed and B may get
    increments A counted again: the journal tells B which inbox offsets it already counted.
    """
    x = "x-catch-up"
    worker_a = counter_workers.start("a")
    for _ in range(3):
        counter.increment(x)
    counter.wait_for(x, [1, 2, 3], counter_workers)
    worker_a.kill()

    worker_b = counter_workers.start("b")  # another data directory: nothing in memory or on disk
    counter.increment(x)
    counter.wait_for(x, [1, 2, 3, 4], counter_workers)

    home = counter.home(x)
    journal = counter.journal(x)
    assert _keys(journal) == [f"{x}/{n}" for n in (1, 2, 3, 4)]
    assert [int(r.value or b"") for r in journal] == [1, 2, 3, 4]
    assert {r.partition for r in journal} == {home}
    # From its start to its end: three records at least once; exactly once, the commit
    # markers of the first worker's transactions take offsets too.
    restored = re.search(rf"restoring counter clicks partition {home} from the journal: offsets 0\.\.(\d+)",
                         worker_b.log_tail(400))
    assert restored is not None and int(restored[1]) >= 3, worker_b.log_tail()
    assert worker_b.running


def test_a_misrouted_increment_is_counted_once_on_its_home_partition(
    counter: Counter, counter_workers: Workers, kafka_bootstrap: str
) -> None:
    """Increments put on another partition are forwarded home and counted there, once.

    One goes to an explicitly wrong partition; four more come from a producer that
    ignores keys (librdkafka's ``random`` partitioner), as a producer nobody here wrote
    might. Without forwarding, each would be counted on the partition it landed on, from
    that partition's own count of X (a second ``X/1`` in another journal partition), and
    the outcomes would not be 1..5. Records that are no increment are dead letters.
    """
    x = "x-forwarding"
    home = counter.home(x)
    wrong = (home + 1) % counter.partitions
    worker = counter_workers.start()
    counter.increment(x, partition=wrong)
    landed: list[int | None] = []
    scattering = kafka(kafka_bootstrap).producer(**{"partitioner": "random"})
    for _ in range(4):
        scattering.produce(counter.topics.inbox, INCREMENT, x.encode(),
                           on_delivery=lambda error, message: landed.append(message.partition()))
    assert scattering.flush(30) == 0
    # Not increments: no key (nothing to route by), and a value that is not b"+1".
    counter.increment(None, partition=home)
    counter.increment(x, value=b"+2")

    counter.wait_for(x, [1, 2, 3, 4, 5], counter_workers)
    journal = counter.journal(x)
    assert _keys(journal) == [f"{x}/{n}" for n in range(1, 6)]
    assert {r.partition for r in journal} == {home}, "counted on the partition it landed on"
    inbox = [r for r in read_topic(kafka_bootstrap, counter.topics.inbox) if r.key == x.encode()]
    misrouted = [r for r in inbox if r.partition != home]
    assert len(misrouted) == 1 + sum(p != home for p in landed)
    # Every increment is on the home partition once (produced there or forwarded), and so
    # is the b"+2" record.
    assert len([r for r in inbox if r.partition == home]) == 5 + 1

    letters = [avro.decode_as(r.value or b"", DeadLetter)
               for r in read_topic(kafka_bootstrap, counter.topics.deadletter)]
    assert sorted((letter.reason, letter.key) for letter in letters) == [
        ("an increment needs its counter id as the record key", None),
        ("an increment's value is b'+1', not b'+2'", x.encode()),
    ], json.dumps([letter.reason for letter in letters])
    assert {letter.source_topic for letter in letters} == {counter.topics.inbox}
    assert worker.running


@only_at_least_once
def test_a_journal_record_another_worker_wrote_is_noticed_and_counted(
    counter: Counter, counter_workers: Workers, kafka_bootstrap: str
) -> None:
    """A zombie's journal record is noticed at the owner's next write and read back.

    X is at 2 when a zombie (a worker that lost the partition without noticing) journals
    ``X/3``: the test produces it straight to X's journal partition. The owner notices at
    its next write there (an increment of Y, another id of the same partition), because
    that write does not start where its previous one ended: it logs "records this worker
    did not write", and the partition is caught up again from the offset the counter had
    applied, foreign record included. The next increment of X then gives 4.

    Without ``settle``'s check nothing would make the worker read its own journal again:
    its memory says X is 2, so the next increment would publish 3 again and the journal
    would hold two records at ``X/3`` (this test would see outcomes [1, 2, 3]). The check
    detects a second writer at the next write, it does not fence it: an increment of X
    itself, instead of Y's, would be decided at 3 before the gap shows (fencing takes
    Kafka transactions; see docs/architecture.md).
    """
    x = "x-zombie"
    home = counter.home(x)
    y = next(f"y-zombie-{n}" for n in range(10_000) if counter.home(f"y-zombie-{n}") == home)
    worker = counter_workers.start()
    counter.increment(x)
    counter.increment(x)
    counter.wait_for(x, [1, 2], counter_workers)

    zombie = kafka(kafka_bootstrap).producer()
    zombie.produce(counter.topics.journal, b"3", f"{x}/3".encode(), partition=home)
    assert zombie.flush(30) == 0

    counter.increment(y)
    counter.wait_for(y, [1], counter_workers)
    assert_eventually(lambda: "records this worker did not write" in worker.log_tail(400),
                      timeout=10, message=worker.log_tail())
    counter.increment(x)
    counter.wait_for(x, [1, 2, 4], counter_workers)

    assert _keys(counter.journal(x)) == [f"{x}/1", f"{x}/2", f"{x}/3", f"{x}/4"]
    assert _keys(counter.journal(y)) == [f"{y}/1"]
    # Caught up again after the alarm, from the offset the counter had applied (the foreign
    # record's) to the end. (The first catch-up, before X's first increment, read nothing.)
    restored = [line for line in worker.log_tail(400).splitlines()
                if f"restoring counter clicks partition {home} from the journal" in line]
    assert len(restored) == 1 and restored[0].rstrip().endswith("offsets 2..4"), worker.log_tail()
    assert worker.running
