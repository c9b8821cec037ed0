"""Topic names, topic specifications from ``topics/roles.toml``, and applying them to Kafka.

``apply_topics`` creates what is missing and reports what differs; it never alters an
existing topic. Changing a partition count would move instances to other partitions
(``murmur2(id) % partitions``) and a config change deserves a human decision, so both are
reported for an operator to act on. A replication factor cannot be changed in place at all
(Kafka moves replicas only by a partition reassignment), so a topic with fewer replicas than
its spec asks is reported with what to do.

``Replication`` is the one replication setting of an app (``App(replication_factor=...,
min_insync_replicas=...)``, ``TIDINGS_REPLICATION_FACTOR`` / ``TIDINGS_MIN_INSYNC_REPLICAS``,
``tidings topics apply --replication-factor N --min-insync-replicas M``): ``applied`` puts
it on every spec of the app.
"""

from __future__ import annotations

import os
import time

import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tidings.codec.resources import shipped_data
from tidings.errors import BrokerError, DefinitionError

from .connection import KafkaConnection

DEFAULT_TIMEOUT_S: Final = 30.0
#: The broker's default.replication.factor (KIP-464): right for one node and a cluster alike.
BROKER_DEFAULT: Final = -1
REPLICATION_ENV: Final = "TIDINGS_REPLICATION_FACTOR"
MIN_INSYNC_ENV: Final = "TIDINGS_MIN_INSYNC_REPLICAS"
MIN_INSYNC_CONFIG: Final = "min.insync.replicas"


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


def replication_reasons(replication_factor: object, min_insync_replicas: object) -> list[str]:
    """Every problem with a replication setting (empty when it is usable).

    ``replication_factor`` is a positive int or -1 (the broker's default);
    ``min_insync_replicas`` is None (the broker's default) or a positive int no larger than a
    positive ``replication_factor``: with more, no write with ``acks=all`` could ever succeed.
    """
    reasons = []
    # bool is an int in Python; True replicas means nothing.
    rf_ok = isinstance(replication_factor, int) and not isinstance(replication_factor, bool) and (
        replication_factor >= 1 or replication_factor == BROKER_DEFAULT)
    if not rf_ok:
        reasons.append(f"replication factor must be a positive integer or -1 (the broker's default), "
                       f"not {replication_factor!r}")
    if min_insync_replicas is not None:
        if not isinstance(min_insync_replicas, int) or isinstance(min_insync_replicas, bool) \
                or min_insync_replicas < 1:
            reasons.append(f"min.insync.replicas must be a positive integer, not {min_insync_replicas!r}")
        elif rf_ok and isinstance(replication_factor, int) and replication_factor >= 1 \
                and min_insync_replicas > replication_factor:
            reasons.append(f"min.insync.replicas {min_insync_replicas} is more than the replication "
                           f"factor {replication_factor}: no acks=all write could succeed; lower it")
    return reasons


@dataclass(frozen=True, slots=True)
class Replication:
    """How many replicas an app's topics get, and how many must have a write (acks=all).

    Attributes:
        factor: Replicas per partition; -1 is the broker's ``default.replication.factor``.
        min_insync_replicas: The topics' ``min.insync.replicas``; None keeps the broker's
            default (``min.insync.replicas`` of the broker, 1 unless set).
    """

    factor: int = BROKER_DEFAULT
    min_insync_replicas: int | None = None

    def __post_init__(self) -> None:
        reasons = replication_reasons(self.factor, self.min_insync_replicas)
        if reasons:
            raise DefinitionError("the replication setting", reasons)

    @classmethod
    def resolve(
        cls, factor: int | None = None, min_insync_replicas: int | None = None, *,
        environ: Mapping[str, str] = os.environ,
    ) -> Replication:
        """The setting from explicit values, else ``TIDINGS_REPLICATION_FACTOR`` and
        ``TIDINGS_MIN_INSYNC_REPLICAS``, else the broker's defaults.

        Raises:
            DefinitionError: a value is not usable (every problem listed, naming its source).
        """
        reasons: list[str] = []

        def from_env(name: str) -> int | None:
            text = environ.get(name, "").strip()
            if not text:
                return None
            try:
                return int(text)
            except ValueError:
                reasons.append(f"{name}={text!r} is not an integer")
                return None

        if factor is None:
            factor = from_env(REPLICATION_ENV)
        if min_insync_replicas is None:
            min_insync_replicas = from_env(MIN_INSYNC_ENV)
        factor = BROKER_DEFAULT if factor is None else factor
        reasons.extend(replication_reasons(factor, min_insync_replicas))
        if reasons:
            raise DefinitionError("the replication setting", reasons)
        return cls(factor, min_insync_replicas)

    def applied(self, specs: Iterable[TopicSpec]) -> list[TopicSpec]:
        """``specs`` with this replication factor and ``min.insync.replicas``.

        The broker's default (-1, None) leaves a spec's own value as it is.
        """
        out = []
        for spec in specs:
            config = dict(spec.config)
            if self.min_insync_replicas is not None:
                config[MIN_INSYNC_CONFIG] = str(self.min_insync_replicas)
            factor = spec.replication_factor if self.factor == BROKER_DEFAULT else self.factor
            out.append(replace(spec, replication_factor=factor, config=config))
        return out


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
    #: What an operator can do about it, when applying again cannot fix it.
    hint: str = ""

    def __str__(self) -> str:
        text = f"{self.topic}: {self.setting} is {self.actual!r}, the spec says {self.expected!r}"
        return f"{text} ({self.hint})" if self.hint else text


REPLICATION_HINT: Final = (
    "Kafka cannot change an existing topic's replication factor: add replicas with "
    "kafka-reassign-partitions.sh --reassignment-json-file, or delete and re-apply the topic"
)


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


def _create(admin: AdminClient, specs: list[TopicSpec], timeout: float, brokers: int) -> list[str]:
    if not specs:
        return []
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in specs],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    by_name = {s.name: s for s in specs}
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
            # Another worker applying the same specs at the same time won the race.
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if code in (KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.POLICY_VIOLATION,
                        KafkaError.INVALID_CONFIG):
                spec = by_name[name]
                raise BrokerError(
                    f"creating {name} with replication factor {spec.replication_factor} "
                    f"({brokers} brokers answer) and {MIN_INSYNC_CONFIG}="
                    f"{spec.config.get(MIN_INSYNC_CONFIG, 'default')} was refused: "
                    f"{exc.args[0].str()}; ask for no more replicas than the cluster has brokers"
                ) from exc
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
    admin: AdminClient, specs: list[TopicSpec], partition_counts: Mapping[str, int],
    replicas: Mapping[str, int], timeout: float,
) -> list[TopicDifference]:
    differences: list[TopicDifference] = []
    if not specs:
        return differences
    for spec in specs:
        # -1 asks for the broker's default, whatever it is: nothing to compare with.
        if spec.replication_factor != BROKER_DEFAULT and replicas[spec.name] != spec.replication_factor:
            below = replicas[spec.name] < spec.replication_factor
            differences.append(TopicDifference(
                spec.name, "replication_factor", str(spec.replication_factor), str(replicas[spec.name]),
                REPLICATION_HINT if below else "more replicas than asked; nothing to do unless that is wrong",
            ))
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
        # The fewest replicas of any partition: one partition short is a topic short.
        replicas = {name: min((len(p.replicas) for p in topic.partitions.values()), default=0)
                    for name, topic in metadata.topics.items()}
        created = _create(admin, [s for s in wanted if s.name not in partition_counts], timeout,
                          len(metadata.brokers))
        _await_leaders(admin, created, timeout)
        existing = [s for s in wanted if s.name in partition_counts]
        differences = _differences(admin, existing, partition_counts, replicas, timeout)
    except KafkaException as exc:
        raise BrokerError(f"applying topics on {connection} failed: {exc}") from exc
    for name in created:
        out(f"created {name}")
    for difference in differences:
        out(f"differs {difference}")
    return ApplyReport(tuple(created), tuple(differences))
