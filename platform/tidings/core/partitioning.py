"""The partition of an instance: murmur2 exactly as the Java Kafka client computes it.

Every record about one instance goes to ``partition_for(instance_id, partitions)`` (SPEC §2),
the Java client's default partitioner for a keyed record, so an external producer that
keys by instance id with a murmur2 partitioner (Java default; librdkafka
``partitioner=murmur2_random``) lands in the same partition as tidings.
"""

from __future__ import annotations

from struct import unpack_from
from typing import Final

_M: Final = 0x5BD1E995
_SEED: Final = 0x9747B28C
_MASK32: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Hash bytes with Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``).

    Args:
        data: The bytes to hash.

    Returns:
        The hash as Java returns it: a signed 32-bit int.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end = length & ~3
    # Four bytes at a time, little-endian, as Java assembles them from the array; one
    # unpack for all words is several times faster than slicing per word.
    for word in unpack_from(f"<{length >> 2}I", data):
        k = (word * _M) & _MASK32
        k ^= k >> 24
        h = ((h * _M) ^ (k * _M)) & _MASK32
    rest = length & 3
    # Java masks each tail byte with 0xff, so the bytes are unsigned here too.
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h = ((h ^ data[end]) * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(instance_id: str, partitions: int) -> int:
    """Return the partition of an instance: ``toPositive(murmur2(utf8(id))) % partitions``.

    Args:
        instance_id: The aggregate, workflow, saga or schedule instance id.
        partitions: The topic's partition count (all topics of a definition share it).

    Returns:
        A partition in ``range(partitions)``.

    Raises:
        ValueError: ``partitions`` is not positive.
    """
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return (murmur2(instance_id.encode("utf-8")) & 0x7FFFFFFF) % partitions
