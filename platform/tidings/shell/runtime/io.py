"""The records the shell moves between Kafka and the agents, and the seams to Kafka.

Agents take ``Incoming`` records and hand back ``Outgoing`` ones; a ``Publisher`` writes
them and says where they landed. Keeping these plain lets the agent logic run against
any Kafka client (Faust's aiokafka producer in the worker, confluent-kafka elsewhere).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

@dataclass(frozen=True, slots=True)
class Incoming:
    """One consumed record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes] = field(default_factory=dict)
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One record to produce; ``partition`` None lets the producer choose."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where a produced record landed.

    ``offset`` is None when Kafka took the record without saying where: an idempotent
    producer's retry of a record the broker had already stored before a leader change
    (``DUPLICATE_SEQUENCE_NUMBER``, which librdkafka reports as delivered, offset unknown).
    Whoever keeps an end offset from it must then stay where it was, not guess.
    """

    topic: str
    partition: int
    offset: int | None


class Publisher(Protocol):
    """Writes records and says when the broker has acknowledged them."""

    def send(self, records: Sequence[Outgoing]) -> Awaitable[list[Delivered]]:
        """Enqueue ``records`` now, in order; await the result for their positions."""
        ...

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        """Produce ``records`` in order; return their positions in the same order."""
        ...

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        """Produce ``records`` without waiting; a failure is logged, not raised."""
        ...


class PartitionReader(Protocol):
    """Reads one partition of a topic between two offsets, outside any consumer group."""

    async def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """Return the (low, high) offsets of the partition."""
        ...

    def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> AsyncIterator[list[Incoming]]:
        """Yield the records in ``[start, end)`` in chunks, in offset order."""
        ...
