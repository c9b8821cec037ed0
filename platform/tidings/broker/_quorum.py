"""Ask a KRaft controller who leads the metadata quorum: one DescribeQuorum request, in Python.

The ``controller`` of a client's metadata in KRaft is a random live broker, not the active
controller, and neither confluent-kafka nor aiokafka has ``describeMetadataQuorum``. Kafka's own
``kafka-metadata-quorum`` lives in the ``kafka-tools`` jar, which the broker's classpath lacks,
and costs a JVM start per question. DescribeQuorum (API key 55) is small: version 0 is flexible
(compact strings and arrays, tagged fields) and its answer starts with the leader's id and epoch,
so it is spoken here over a plain socket to a node's CONTROLLER listener (PLAINTEXT).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from tidings.errors import BrokerError

_API_KEY = 55
_API_VERSION = 0
_METADATA_TOPIC = "__cluster_metadata"
_CLIENT_ID = b"tidings-quorum"


@dataclass(frozen=True)
class QuorumState:
    """The metadata quorum as one controller sees it.

    Attributes:
        leader_id: The active controller's node id (-1 while an election runs).
        leader_epoch: The leader's epoch; it grows by one or more with every election.
        high_watermark: The committed end of the metadata log.
        voters: Each voter's log end offset as the leader last saw it, by node id (only the
            leader knows them; a follower reports -1).
    """

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: dict[int, int]


def encode_request(correlation_id: int) -> bytes:
    """Return a framed DescribeQuorum v0 request for partition 0 of ``__cluster_metadata``."""
    # Request header v2: key, version, correlation id, nullable (non-compact) client id, tags.
    header = struct.pack(">hhih", _API_KEY, _API_VERSION, correlation_id, len(_CLIENT_ID))
    header += _CLIENT_ID + b"\x00"
    topic = _METADATA_TOPIC.encode()
    body = (
        _uvarint(2)  # compact array: one topic
        + _uvarint(len(topic) + 1) + topic
        + _uvarint(2)  # compact array: one partition
        + struct.pack(">i", 0) + b"\x00"  # partition index, its tags
        + b"\x00"  # the topic's tags
        + b"\x00"  # the request's tags
    )
    message = header + body
    return struct.pack(">i", len(message)) + message


def decode_response(payload: bytes, correlation_id: int) -> QuorumState:
    """Decode a DescribeQuorum v0 response (without its 4-byte length).

    Raises:
        BrokerError: The answer is for another request, carries an error code, or is short.
    """
    reader = _Reader(payload)
    if reader.int32() != correlation_id:
        raise BrokerError("DescribeQuorum answer does not match its request")
    reader.tags()  # response header v1
    error = reader.int16()
    if error:
        raise BrokerError(f"DescribeQuorum failed with Kafka error code {error}")
    if reader.count() != 1:
        raise BrokerError("DescribeQuorum answered for other than one topic")
    reader.string()
    if reader.count() != 1:
        raise BrokerError("DescribeQuorum answered for other than one partition")
    reader.int32()  # partition index
    error = reader.int16()
    if error:
        raise BrokerError(f"DescribeQuorum failed with Kafka error code {error}")
    leader_id, leader_epoch, high_watermark = reader.int32(), reader.int32(), reader.int64()
    voters: dict[int, int] = {}
    for _ in range(reader.count()):
        replica, log_end = reader.int32(), reader.int64()
        reader.tags()
        voters[replica] = log_end
    return QuorumState(leader_id, leader_epoch, high_watermark, voters)


def describe_quorum(port: int, *, timeout: float = 2.0, host: str = "127.0.0.1") -> QuorumState:
    """Send DescribeQuorum to the CONTROLLER listener on ``host:port`` and return its answer.

    Args:
        port: A node's controller port.
        timeout: Seconds for connecting and for the answer.
        host: The node's address.

    Raises:
        OSError: The node does not answer (refused, reset, timed out).
        BrokerError: It answered with an error or with bytes that are not an answer.
    """
    correlation_id = 1
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(encode_request(correlation_id))
        (length,) = struct.unpack(">i", _read_exactly(sock, 4))
        return decode_response(_read_exactly(sock, length), correlation_id)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionResetError("the controller closed the connection mid-answer")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def _take(self, size: int) -> bytes:
        if self._at + size > len(self._data):
            raise BrokerError("DescribeQuorum answer is truncated")
        chunk = self._data[self._at:self._at + size]
        self._at += size
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def count(self) -> int:
        # Compact arrays and strings store length + 1 (0 is null).
        return max(self.uvarint() - 1, 0)

    def string(self) -> str:
        return self._take(self.count()).decode()

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())
