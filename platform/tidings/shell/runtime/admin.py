"""Kafka's admin side as an operator needs it: topics, consumer groups, moving offsets.

``KafkaAdmin`` wraps confluent-kafka's ``AdminClient`` for ``tidings offsets`` and
``tidings deadletters``: whether a topic is there and its partitions, what a group is doing
(its state and members), where it has committed in each partition, the log's start and end
there, and committing new offsets for it. Kafka errors become
``BrokerError`` here, each saying what to do; librdkafka's own log lines are silenced so
that an unreachable broker is one line of ours, not a screenful of connection retries.

Kafka only takes offsets from outside the group while the group has no members: a worker
that is running would overwrite them with its own next commit, so the broker refuses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ...errors import BrokerError
from .connection import KafkaConnection
from .kafka import not_authorized

T = TypeVar("T")

#: A topic and one of its partitions.
Position = tuple[str, int]

#: Group states in which the broker takes offsets from outside the group (no members).
IDLE_STATES = frozenset({"EMPTY", "DEAD"})

# Errors a moment later may not have: a coordinator being elected or loaded, a new topic's
# leader not serving yet. librdkafka marks few of these retriable, so they are listed.
_TRANSIENT = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    }
)
# What the broker answers an offset commit from outside a group that has members.
_GROUP_ACTIVE = frozenset(
    {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION}
)


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a consumer group and the partitions it holds."""

    member_id: str
    client_id: str
    host: str
    #: The static member id (a worker's ``TIDINGS_INSTANCE_ID``), if any.
    instance_id: str | None
    assignment: tuple[Position, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group's state (Kafka's name, e.g. ``STABLE``, ``EMPTY``) and members."""

    group: str
    state: str
    members: tuple[GroupMember, ...]

    @property
    def idle(self) -> bool:
        """Whether the broker takes offsets for this group from outside it (no members)."""
        return not self.members and self.state in IDLE_STATES


class KafkaAdmin:
    """Look up topics, describe consumer groups, read and move their committed offsets.

    Args:
        connection: The Kafka cluster and its client properties.
        timeout: Seconds each question to Kafka may take, retries included.
    """

    def __init__(self, connection: KafkaConnection, *, timeout: float = 15.0) -> None:
        self.bootstrap = connection.bootstrap
        self._connection = connection  # names its principal when Kafka refuses it
        self.timeout = timeout
        # log_level 0: librdkafka would print every failed connection attempt to stderr.
        # A metadata request for a missing topic would create it on a broker that allows
        # auto-creation (with its default layout): looking must not change anything.
        self._admin = connection.admin(**{"log_level": 0, "allow.auto.create.topics": False})

    def describe_group(self, group: str) -> GroupDescription:
        """Return ``group``'s state and members (state ``DEAD`` for a group nobody ever joined).

        Raises:
            BrokerError: Kafka did not answer or refused.
        """
        description = self._ask(
            f"describing group {group}",
            lambda: self._admin.describe_consumer_groups([group], request_timeout=self.timeout)[group].result(),
        )
        members = tuple(
            GroupMember(
                member.member_id,
                member.client_id,
                member.host,
                member.group_instance_id,
                tuple(sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)),
            )
            for member in description.members
        )
        state = getattr(description.state, "name", str(description.state))
        return GroupDescription(group, state, members)

    def committed(self, group: str) -> dict[Position, int]:
        """Return the offset ``group`` has committed in each partition it has committed in.

        Raises:
            BrokerError: Kafka did not answer or refused.
        """
        request = [ConsumerGroupTopicPartitions(group)]
        answer = self._ask(
            f"reading the offsets of group {group}",
            lambda: self._admin.list_consumer_group_offsets(request, request_timeout=self.timeout)[group].result(),
        )
        offsets: dict[Position, int] = {}
        for tp in answer.topic_partitions or []:
            if tp.error is not None:
                raise BrokerError(f"reading the offset of group {group} in {tp.topic}/{tp.partition}: {tp.error}")
            if tp.offset >= 0:  # a negative offset is librdkafka's "none committed"
                offsets[(tp.topic, tp.partition)] = tp.offset
        return offsets

    def partitions(self, topic: str) -> list[int]:
        """Return the partitions of ``topic``, sorted.

        Raises:
            BrokerError: The topic does not exist (saying how to create it), or Kafka did not answer.
        """
        try:
            metadata = self._admin.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise self._error(f"reading the metadata of {topic}", exc.args[0] if exc.args else exc) from exc
        described = metadata.topics.get(topic)
        if described is not None and described.error is not None:
            refused = not_authorized(described.error, self._connection, f"to describe topic {topic}")
            if refused is not None:
                raise refused
        if described is None or described.error is not None:
            reason = described.error if described is not None else "no metadata"
            raise BrokerError(
                f"topic {topic} is not there ({reason}); run `tidings topics apply MODULE:APP` "
                "or start a worker, which applies the topics"
            )
        return sorted(described.partitions)

    def log_range(self, positions: Iterable[Position]) -> dict[Position, tuple[int, int]]:
        """Return the first and the next offset (the end) of each partition's log.

        Raises:
            BrokerError: Kafka did not answer, or a topic does not exist.
        """
        wanted = sorted(set(positions))
        if not wanted:
            return {}
        starts = self._list_offsets(wanted, OffsetSpec.earliest())
        ends = self._list_offsets(wanted, OffsetSpec.latest())
        return {position: (starts[position], ends[position]) for position in wanted}

    def commit(self, group: str, offsets: Mapping[Position, int]) -> None:
        """Commit ``offsets`` for ``group``, which must have no members.

        Raises:
            BrokerError: The group has members (saying to stop them first), or Kafka refused.
        """
        partitions = [TopicPartition(topic, partition, offset)
                      for (topic, partition), offset in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        answer = self._ask(
            f"moving the offsets of group {group}",
            lambda: self._admin.alter_consumer_group_offsets(request, request_timeout=self.timeout)[group].result(),
        )
        for tp in answer.topic_partitions or []:
            if tp.error is not None:
                # A group with members refuses per partition, not with an exception.
                raise self._error(f"moving the offset of group {group} in {tp.topic}/{tp.partition}", tp.error)

    # -- asking ------------------------------------------------------------------------------

    def _list_offsets(self, positions: list[Position], spec: OffsetSpec) -> dict[Position, int]:
        request = {TopicPartition(topic, partition): spec for topic, partition in positions}

        def ask() -> dict[Position, int]:
            futures = self._admin.list_offsets(request, request_timeout=self.timeout)
            return {(tp.topic, tp.partition): int(future.result().offset) for tp, future in futures.items()}

        return self._ask(f"reading the log offsets of {', '.join(sorted({t for t, _ in positions}))}", ask)

    def _ask(self, what: str, call: Callable[[], T]) -> T:
        """Return ``call()``, asking again on a transient error until the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                transient = isinstance(error, KafkaError) and error.code() in _TRANSIENT
                if not transient or time.monotonic() > deadline:
                    raise self._error(what, error) from exc
                time.sleep(0.1)

    def _error(self, what: str, error: object) -> BrokerError:
        """Return the ``BrokerError`` for ``error`` (a ``KafkaError``, usually), saying what to do."""
        code = error.code() if isinstance(error, KafkaError) else None
        if code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            return BrokerError(
                f"{what}: no answer from Kafka at {self.bootstrap} within {self.timeout:.0f} s "
                "(is the broker running? check --bootstrap or TIDINGS_BOOTSTRAP, and the "
                "security settings of --kafka-config / TIDINGS_KAFKA_*)"
            )
        if code in _GROUP_ACTIVE:
            return BrokerError(
                f"{what}: the group has active members ({error}); stop its workers first, "
                "then run this again"
            )
        refused = not_authorized(error, self._connection, what.replace("reading", "to read", 1)
                                 .replace("moving", "to move", 1))
        if refused is not None:
            return refused
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._NOENT):
            return BrokerError(f"{what}: {error}; run `tidings topics apply MODULE:APP` if a topic is missing")
        return BrokerError(f"{what}: {error}")
