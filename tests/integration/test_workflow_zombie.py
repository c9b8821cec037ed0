"""A journal record this worker did not write (a zombie's) is noticed, read and replayed.

Only the worker that owns a partition writes its journal, and its records land there back
to back. A worker that lost the partition without noticing (a long pause, a network
partition) may still write; the owner sees the gap at its next write, drops what it knows
of the partition, and recovers it again from the journal, foreign records included. The
test plays the zombie by producing a journal record straight to the partition.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any


from tidings import App
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.workflow import SignalReceived, WorkflowStatus
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.workers import only_at_least_once
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


@only_at_least_once
def test_a_record_another_worker_wrote_to_the_journal_is_read_and_replayed(
    workflow_app: App, workflow_workers: WorkflowWorkers, kafka_bootstrap: str
) -> None:
    worker = workflow_workers.start()
    collector = workflow_app.workflow_handle("collector")
    partitions = workflow_app.partitions
    waiting = "zombie-x"
    partition = partition_for(waiting, partitions)
    later = next(f"zombie-y{n}" for n in range(10_000) if partition_for(f"zombie-y{n}", partitions) == partition)

    async def wait_for_second_item() -> None:
        await collector.start(waiting, 2)
        await collector.signal(waiting, "item", 1)

    asyncio.run(wait_for_second_item())
    journal = collector.topics.journal

    def entries() -> list[Any]:
        return [avro.decode_as(r.value, WorkflowJournalEntry) for r in read_topic(kafka_bootstrap, journal)
                if r.key.startswith(f"{waiting}/".encode())]

    # Started, step 1 (started, signal, completed), step 2 started: waiting for item 2.
    assert_eventually(lambda: len(entries()) == 5, timeout=60, message=workflow_workers.log_tail())
    seq = max(entry.record.seq for entry in entries()) + 1

    # The zombie received item 2 and journaled it.
    foreign = SignalReceived(seq, "item", "2", int(time.time() * 1000))
    producer = kafka(kafka_bootstrap).producer()
    producer.produce(journal, avro.encode(WorkflowJournalEntry(waiting, foreign)),
                     f"{waiting}/{seq}".encode(), partition=partition)
    assert producer.flush(30) == 0

    async def write_there_and_read_back() -> Any:
        # The owner's next write to that partition reveals the gap.
        await collector.start(later, 1)
        return await collector.value(waiting, 60)

    assert asyncio.run(write_there_and_read_back()) == [1, 2]
    assert "records this worker did not write" in worker.log_tail(400)

    async def the_later_one_still_works() -> tuple[Any, Any]:
        await collector.signal(later, "item", 7)
        return await collector.value(later, 60), await collector.status(waiting)

    assert asyncio.run(the_later_one_still_works()) == ([7], WorkflowStatus.FINISHED)
    assert worker.running
