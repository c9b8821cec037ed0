"""Read a cluster's partition metadata: which topics a question is about, who leads what, and
which partitions are short of replicas. Pure functions of a ``ClusterMetadata`` answer."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from confluent_kafka.admin import ClusterMetadata, PartitionMetadata


def select_partitions(
    metadata: ClusterMetadata, prefix: str = "", topics: Collection[str] | None = None, *,
    include_internal: bool = False,
) -> dict[str, list[PartitionMetadata]]:
    """The partitions of the chosen topics, by topic name.

    Args:
        metadata: A metadata answer.
        prefix: Choose the topics whose names start with it; Kafka's internal ``__`` topics
            only when it starts with ``__`` or ``include_internal`` is set.
        topics: Choose exactly these topics instead.
        include_internal: Also choose internal topics that match ``prefix``.
    """
    chosen: dict[str, list[PartitionMetadata]] = {}
    for name, topic in metadata.topics.items():
        if topics is not None:
            wanted = name in topics
        else:
            internal = name.startswith("__") and not prefix.startswith("__")
            wanted = name.startswith(prefix) and (include_internal or not internal)
        if wanted:
            chosen[name] = list(topic.partitions.values())
    return chosen


def count_leaders(chosen: dict[str, list[PartitionMetadata]], nodes: Iterable[int]) -> dict[int, int]:
    """How many of the chosen partitions each of ``nodes`` leads (0 included)."""
    counts = dict.fromkeys(nodes, 0)
    for partitions in chosen.values():
        for partition in partitions:
            if partition.leader in counts:
                counts[partition.leader] += 1
    return counts


def short_partitions(
    chosen: dict[str, list[PartitionMetadata]], topics: Collection[str] | None = None,
    holds: Callable[[PartitionMetadata], bool] = lambda _p: True,
) -> list[str]:
    """Describe every chosen partition without a leader or short of its full ISR, and every
    asked-for topic that does not exist; empty when all are in sync.

    Args:
        chosen: From :func:`select_partitions`.
        topics: The topics asked for by name, if any (an absent one is short).
        holds: Only partitions for which it is true count (e.g. those a node has a replica of).
    """
    absent = [f"{t} (absent)" for t in sorted(topics or ()) if t not in chosen]
    # A topic the answering broker does not fully know yet comes back with no partitions.
    empty = [f"{t} (no partitions yet)" for t, partitions in sorted(chosen.items()) if not partitions]
    return absent + empty + [
        f"{topic}[{p.id}] leader={p.leader} isr={sorted(p.isrs)} of {sorted(p.replicas)}"
        for topic, partitions in sorted(chosen.items())
        for p in sorted(partitions, key=lambda p: p.id)
        if holds(p) and (p.leader < 0 or set(p.isrs) != set(p.replicas))
    ]
