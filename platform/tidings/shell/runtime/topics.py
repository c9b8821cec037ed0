"""Topic names, topic specifications from ``topics/roles.toml``, and applying them to Kafka.

``apply_topics`` creates what is missing and reports what differs; it never alters an
existing topic. Changing a partition count would move instances to other partitions
(``murmur2(id) % partitions``) and a config change deserves a human decision, so both are
reported for an operator to act on.
"""

from __future__ import annotations

import time

import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tidings.codec.resources import shipped_data
from tidings.errors import BrokerError, DefinitionError

from .connection import KafkaConnection

DEFAULT_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What one topic should look like.

    Attributes:
        name: The topic name.
        partitions: The partition count (fixed once created).
        replication_factor: Replicas per partition; -1 is the broker's default.
        config: Kafka topic configs, values as Kafka reports them (strings).
    """

    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """The settings a role gives its topics (one table of ``topics/roles.toml``)."""

    partitions: int
    replication_factor: int
    config: Mapping[str, str]


def _text(value: Any) -> str:
    # TOML may hold numbers or booleans; Kafka reports every config as a string.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_roles(text: str | None = None) -> Mapping[str, RoleSpec]:
    """Parse role specifications (by default the shipped ``topics/roles.toml``).

    Args:
        text: TOML text to parse instead of the shipped file.

    Returns:
        An immutable mapping from role name to its settings.

    Raises:
        DefinitionError: The file is malformed; every problem is listed.
    """
    if text is None:
        text = shipped_data("topics").joinpath("roles.toml").read_text(encoding="utf-8")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DefinitionError("topics/roles.toml", [str(exc)]) from exc
    defaults = dict(document.get("defaults", {}))
    problems: list[str] = []
    roles: dict[str, RoleSpec] = {}
    for role, table in document.get("roles", {}).items():
        settings = {**defaults, **table}
        partitions = settings.pop("partitions", None)
        replication = settings.pop("replication_factor", -1)
        if not isinstance(partitions, int) or partitions < 1:
            problems.append(f"role {role!r}: partitions must be a positive integer")
            continue
        if not isinstance(replication, int) or (replication < 1 and replication != -1):
            problems.append(f"role {role!r}: replication_factor must be positive or -1")
            continue
        config = MappingProxyType({key: _text(value) for key, value in settings.items()})
        roles[role] = RoleSpec(partitions, replication, config)
    if not document.get("roles"):
        problems.append("no [roles.*] table")
    if problems:
        raise DefinitionError("topics/roles.toml", problems)
    return MappingProxyType(roles)


# Read once at import and never mutated.
ROLES: Final = load_roles()


def topic_name(app: str, kind: str, name: str, role: str) -> str:
    """Return the topic of one role of one definition: ``{app}.{kind}.{name}.{role}``.

    Args:
        app: The app name, e.g. ``bank``.
        kind: ``aggregate``, ``workflow``, ``saga``, ...
        name: The definition's name, e.g. ``account``.
        role: The topic's role, e.g. ``events``.

    Returns:
        e.g. ``bank.aggregate.account.events``.
    """
    return f"{app}.{kind}.{name}.{role}"


def deadletter_topic(app: str) -> str:
    """Return the app's dead-letter topic, ``{app}.deadletter``."""
    return f"{app}.deadletter"


def spec_for(role: str, name: str, *, partitions: int | None = None) -> TopicSpec:
    """Return the specification of topic ``name`` playing ``role``.

    Args:
        role: A role of ``topics/roles.toml`` (``commands``, ``events``, ``journal``, ...).
        name: The topic name.
        partitions: The app's partition count; the role's default when None.

    Returns:
        The spec, with the role's configs.

    Raises:
        DefinitionError: The role is unknown or ``partitions`` is not positive.
    """
    settings = ROLES.get(role)
    if settings is None:
        raise DefinitionError(f"topic {name!r}", [f"unknown role {role!r}; roles are {', '.join(sorted(ROLES))}"])
    if partitions is not None and partitions < 1:
        raise DefinitionError(f"topic {name!r}", [f"partitions must be positive, got {partitions}"])
    return TopicSpec(
        name=name,
        partitions=settings.partitions if partitions is None else partitions,
        replication_factor=settings.replication_factor,
        config=dict(settings.config),
    )


@dataclass(frozen=True, slots=True)
class TopicDifference:
    """One setting of an existing topic that is not what its spec says."""

    topic: str
    setting: str
    expected: str
    actual: str | None

    def __str__(self) -> str:
        return f"{self.topic}: {self.setting} is {self.actual!r}, the spec says {self.expected!r}"


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """What ``apply_topics`` did and found.

    Attributes:
        created: Topics created by this run.
        differences: Settings of existing topics that differ from their specs.
    """

    created: tuple[str, ...] = ()
    differences: tuple[TopicDifference, ...] = ()

    @property
    def in_sync(self) -> bool:
        """Whether every existing topic matched its spec."""
        return not self.differences


def _unique(specs: Iterable[TopicSpec]) -> list[TopicSpec]:
    # Apps may list a shared topic (replies, deadletter) once per definition.
    by_name: dict[str, TopicSpec] = {}
    problems: list[str] = []
    for spec in specs:
        seen = by_name.setdefault(spec.name, spec)
        if seen != spec:
            problems.append(f"{spec.name!r} is specified twice, differently")
    if problems:
        raise DefinitionError("topic specifications", problems)
    return list(by_name.values())


def _create(admin: AdminClient, specs: list[TopicSpec], timeout: float) -> list[str]:
    if not specs:
        return []
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in specs],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            # Another worker applying the same specs at the same time won the race.
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise
    return sorted(created)


def _await_leaders(admin: AdminClient, names: list[str], timeout: float) -> None:
    # A created topic answers produce and offset requests only once every partition has a
    # leader; return when it does, so callers can use the topics straight away.
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        metadata = admin.list_topics(timeout=timeout)
        for name in list(pending):
            topic = metadata.topics.get(name)
            if topic is not None and topic.error is None and topic.partitions and all(
                p.leader >= 0 and p.error is None for p in topic.partitions.values()
            ):
                pending.discard(name)
        if pending:
            if time.monotonic() > deadline:
                raise BrokerError(f"topics without a leader after {timeout} s: {sorted(pending)}")
            time.sleep(0.05)


def _differences(
    admin: AdminClient, specs: list[TopicSpec], partition_counts: Mapping[str, int], timeout: float
) -> list[TopicDifference]:
    differences: list[TopicDifference] = []
    if not specs:
        return differences
    futures = admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in specs], request_timeout=timeout
    )
    actual_by_topic = {resource.name: future.result() for resource, future in futures.items()}
    for spec in specs:
        actual_partitions = partition_counts[spec.name]
        if actual_partitions != spec.partitions:
            differences.append(TopicDifference(spec.name, "partitions", str(spec.partitions), str(actual_partitions)))
        actual = actual_by_topic[spec.name]
        for key, expected in sorted(spec.config.items()):
            entry = actual.get(key)
            value = None if entry is None else entry.value
            if value != expected:
                differences.append(TopicDifference(spec.name, key, expected, value))
    return differences


def apply_topics(
    connection: KafkaConnection,
    specs: Iterable[TopicSpec],
    *,
    out: Callable[[str], Any] = print,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ApplyReport:
    """Create missing topics and report every setting of existing ones that differs.

    Idempotent: a second run creates nothing and, if nobody changed a topic, reports
    nothing. Existing topics are never altered (see the module docstring).

    Args:
        connection: The Kafka cluster and its client properties.
        specs: The topics to apply; repeats of one identical spec are fine.
        out: Where to write one line per created topic and per difference.
        timeout: Seconds each admin request may take.

    Returns:
        The topics created and the differences found.

    Raises:
        DefinitionError: Two different specs name the same topic.
        BrokerError: Kafka could not be reached or refused a request.
    """
    wanted = _unique(specs)
    admin = connection.admin()
    try:
        metadata = admin.list_topics(timeout=timeout)
        partition_counts = {name: len(topic.partitions) for name, topic in metadata.topics.items()}
        created = _create(admin, [s for s in wanted if s.name not in partition_counts], timeout)
        _await_leaders(admin, created, timeout)
        existing = [s for s in wanted if s.name in partition_counts]
        differences = _differences(admin, existing, partition_counts, timeout)
    except KafkaException as exc:
        raise BrokerError(f"applying topics on {connection} failed: {exc}") from exc
    for name in created:
        out(f"created {name}")
    for difference in differences:
        out(f"differs {difference}")
    return ApplyReport(tuple(created), tuple(differences))
