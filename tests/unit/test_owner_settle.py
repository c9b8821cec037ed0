"""``PartitionOwner.settle`` with acknowledgements that carry no offset.

After a leader change an idempotent producer may retry a batch the old leader had stored;
the broker answers DUPLICATE_SEQUENCE_NUMBER and librdkafka reports the records delivered
with no offset (``Delivered.offset`` None). Seen in the three-node leader-failure test: the
worker died with a TypeError adding 1 to None.
"""

from __future__ import annotations

import asyncio

from tidings.shell.runtime.io import Delivered
from tidings.shell.runtime.owner import PartitionOwner

JOURNAL = "app.workflow.w.journal"


def ready_owner(foreign: list[int]) -> PartitionOwner:
    async def catch_up(partition: int) -> None:
        await asyncio.sleep(0)

    owner = PartitionOwner("workflow w", journal=JOURNAL, partitions=4, catch_up=catch_up,
                           on_foreign=foreign.append)
    asyncio.run(owner.ensure_ready([0, 1]))
    return owner


def test_a_write_without_offsets_moves_no_end_and_the_next_one_is_not_taken_for_a_foreign_writer() -> None:
    foreign: list[int] = []
    owner = ready_owner(foreign)
    assert owner.settle([Delivered(JOURNAL, 0, 10), Delivered(JOURNAL, 0, 11), Delivered(JOURNAL, 1, 4)]) == {0: 12, 1: 5}
    # Partition 0's write was a retry Kafka had stored already: no offsets. Its end stays
    # where the store has it; partition 1, written normally beside it, moves on.
    assert owner.settle([Delivered(JOURNAL, 0, None), Delivered(JOURNAL, 0, None),
                         Delivered(JOURNAL, 1, 5)]) == {1: 6}
    # Partition 0's next write lands after those two (offsets 14, 15): not a foreign writer.
    assert owner.settle([Delivered(JOURNAL, 0, 14), Delivered(JOURNAL, 0, 15)]) == {0: 16}
    assert foreign == [] and owner.is_ready(0) and owner.is_ready(1)
    # Once the end is known again, the check is back: a gap is another writer.
    assert owner.settle([Delivered(JOURNAL, 0, 20)]) == {}
    assert foreign == [0] and not owner.is_ready(0)


def test_records_of_other_topics_without_offsets_are_ignored() -> None:
    owner = ready_owner([])
    assert owner.settle([Delivered("app.workflow.w.status", 0, None), Delivered(JOURNAL, 0, 0)]) == {0: 1}


def test_the_aggregate_and_orchestration_ends_skip_a_record_without_offset() -> None:
    """Their stores' ends come from the highest reported offset; one Kafka did not report
    moves nothing (the end stays behind it, and a catch-up reads it again)."""
    from types import SimpleNamespace

    from tidings.shell.kinds.aggregate.agent import AggregateAgent
    from tidings.shell.kinds.orchestration.agent import OrchestrationAgent

    verdicts = "app.aggregate.a.verdicts"
    aggregate = SimpleNamespace(topics=SimpleNamespace(verdicts=verdicts),
                                owner=SimpleNamespace(is_ready=lambda partition: True))
    ends = AggregateAgent._verdict_ends(aggregate, [Delivered(verdicts, 0, 7), Delivered(verdicts, 0, None),
                                                    Delivered(verdicts, 1, None)])  # type: ignore[arg-type]
    assert ends == {0: 8}
    orchestration = SimpleNamespace(_roles={"app.o.journal": "journal"})
    offsets = OrchestrationAgent._offsets(orchestration, [Delivered("app.o.journal", 2, None),
                                                          Delivered("app.o.journal", 3, 9)])  # type: ignore[arg-type]
    assert offsets == {("journal", 3): 10}
