"""The least-privilege ACLs an app needs (``tidings acls``), as data, and applying them.

``app_bindings`` is pure: from an app's name and its topics it lists the bindings of the
worker principal and of each client principal (docs/security.md, "ACLs"). ``apply_bindings``
describes what the cluster has and creates only what is missing, so it is idempotent.

Who may do what:

- The worker owns its app: every topic under ``{app}.`` (prefixed: a new definition needs no
  new binding), the app's consumer group ``{app}`` and its readers' groups ``{app}.*``, its
  transactional ids ``{app}-*`` (``worker_dir.transactional_id``). Topics of the app outside
  the prefix (a flow's source and sink, an orchestration's ``actions_topic``) get literal
  bindings. No cluster binding: since Kafka 2.8 (KIP-679) an idempotent producer needs WRITE
  on a topic, not IDEMPOTENT_WRITE on the cluster.
- A client writes only the aggregates' commands and the workflows' inboxes, reads only the
  workflows' outcomes and status and its own replies topic ``{app}.replies.{name}``
  (``client_replies_topic``), and uses consumer groups under ``{app}.client.``. Topic names
  put the role last (``{app}.{kind}.{name}.{role}``), so no prefix separates an inbox from a
  journal: these are literal, one per topic, and a new aggregate or workflow needs the
  client's bindings applied again. A prefix ALLOW with DENY exceptions would be shorter but
  fail open: a topic the DENY list misses would be writable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from ...errors import BrokerError, DefinitionError
from .connection import KafkaConnection

#: The environment variable naming a Client's principal (``Client(name=...)``).
CLIENT_NAME_ENV: Final = "TIDINGS_CLIENT_NAME"
#: Roles of ``{app}.{kind}.{name}.{role}`` topics a client may write, per kind.
CLIENT_WRITES: Final = frozenset({("aggregate", "commands"), ("workflow", "inbox")})
#: Roles a client may read, of any kind.
CLIENT_READS: Final = frozenset({"outcomes", "status"})
#: What a worker may do on each of its topics: ``topics apply`` creates and compares configs.
WORKER_TOPIC_OPERATIONS: Final = ("READ", "WRITE", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS")
_PRINCIPAL: Final = re.compile(r"^[A-Za-z][A-Za-z0-9]*:(?P<name>.+)$")
_TOPIC_SAFE: Final = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True, slots=True, order=True)
class Binding:
    """One ALLOW ACL, in Kafka's terms (``kafka-acls.sh``, ``AclBinding``).

    Attributes:
        resource_type: ``TOPIC``, ``GROUP`` or ``TRANSACTIONAL_ID``.
        pattern_type: ``LITERAL`` or ``PREFIXED``.
        name: The resource name, or its prefix.
        principal: e.g. ``User:bank-worker``.
        operation: ``READ``, ``WRITE``, ``CREATE``, ``DESCRIBE``, ``DESCRIBE_CONFIGS``.
        host: The client host it allows; ``*`` for any.
        permission: Always ``ALLOW``: what is not allowed is denied by the authorizer.
    """

    principal: str
    resource_type: str
    pattern_type: str
    name: str
    operation: str
    host: str = "*"
    permission: str = "ALLOW"

    def __str__(self) -> str:
        return (f"{self.principal} {self.permission} {self.operation} on {self.resource_type} "
                f"{self.pattern_type} {self.name!r} from {self.host}")

    def as_kafka(self) -> AclBinding:
        """This binding as confluent-kafka's ``AclBinding``."""
        return AclBinding(ResourceType[self.resource_type], self.name, ResourcePatternType[self.pattern_type],
                          self.principal, self.host, AclOperation[self.operation],
                          AclPermissionType[self.permission])


def principal_name(principal: str) -> str:
    """The name part of ``Type:name`` (``User:alice`` -> ``alice``).

    Raises:
        DefinitionError: ``principal`` is not ``Type:name``.
    """
    match = _PRINCIPAL.match(principal or "")
    if match is None:
        raise DefinitionError(f"principal {principal!r}", ["give it as Type:name, e.g. User:bank-client"])
    return match.group("name")


def client_replies_topic(app: str, principal: str) -> str:
    """The replies topic of one client principal: ``{app}.replies.{name}``.

    Raises:
        DefinitionError: the principal's name cannot be part of a topic name (a TLS
            distinguished name: map it to a short name with the brokers'
            ``ssl.principal.mapping.rules``).
    """
    name = principal_name(principal)
    if not _TOPIC_SAFE.match(name) or name in (".", ".."):
        raise DefinitionError(f"principal {principal!r}", [
            f"its name {name!r} cannot be part of a topic name (letters, digits, '.', '_', '-'); "
            "map it to a short name with the brokers' ssl.principal.mapping.rules"])
    return f"{app}.replies.{name}"


def client_group_prefix(app: str) -> str:
    """The prefix of every consumer group a client of ``app`` uses: ``{app}.client.``."""
    return f"{app}.client."


def _role(app: str, topic: str) -> tuple[str, str] | None:
    # (kind, role) of an {app}.{kind}.{name}.{role} topic; None for any other.
    parts = topic[len(app) + 1:].split(".") if topic.startswith(f"{app}.") else []
    return (parts[0], parts[-1]) if len(parts) >= 3 else None


def app_bindings(
    app: str,
    topics: Iterable[str],
    *,
    worker: str | None,
    clients: Sequence[str] = (),
    host: str = "*",
) -> list[Binding]:
    """Every ACL the worker principal and each client principal of ``app`` need.

    Args:
        app: The app name (its topics' prefix, its consumer group).
        topics: Every topic the app's workers read or write (its declared topics and any
            outside the ``{app}.`` prefix: a flow's source, an external sink).
        worker: The workers' principal (``User:bank-worker``); None for clients only.
        clients: The client principals; each gets its own replies topic.
        host: The client host every binding allows.

    Returns:
        The bindings, sorted, without repeats.

    Raises:
        DefinitionError: a principal is malformed or its name cannot name a replies topic.
    """
    names = sorted(set(topics))
    bindings: set[Binding] = set()
    if worker is not None:
        principal_name(worker)
        prefix = f"{app}."
        for operation in WORKER_TOPIC_OPERATIONS:
            bindings.add(Binding(worker, "TOPIC", "PREFIXED", prefix, operation, host))
            for topic in names:
                if not topic.startswith(prefix):
                    bindings.add(Binding(worker, "TOPIC", "LITERAL", topic, operation, host))
        # READ on a group allows what a member does (join, commit, fetch offsets), and
        # includes DESCRIBE; the transactional producer commits offsets to it too.
        bindings.add(Binding(worker, "GROUP", "LITERAL", app, "READ", host))
        bindings.add(Binding(worker, "GROUP", "PREFIXED", prefix, "READ", host))
        for operation in ("WRITE", "DESCRIBE"):
            bindings.add(Binding(worker, "TRANSACTIONAL_ID", "PREFIXED", f"{app}-", operation, host))
    for client in clients:
        replies = client_replies_topic(app, client)
        for topic in names:
            role = _role(app, topic)
            if role in CLIENT_WRITES:
                operations: tuple[str, ...] = ("WRITE", "DESCRIBE")
            elif role is not None and role[1] in CLIENT_READS:
                operations = ("READ", "DESCRIBE")
            else:
                continue
            bindings.update(Binding(client, "TOPIC", "LITERAL", topic, op, host) for op in operations)
        bindings.update(Binding(client, "TOPIC", "LITERAL", replies, op, host) for op in ("READ", "DESCRIBE"))
        bindings.add(Binding(client, "GROUP", "PREFIXED", client_group_prefix(app), "READ", host))
    return sorted(bindings)


@dataclass(frozen=True, slots=True)
class AclReport:
    """What ``apply_bindings`` did: the bindings it created and those already there."""

    created: tuple[Binding, ...] = ()
    present: tuple[Binding, ...] = ()


def _existing(admin: Any, principals: Iterable[str], timeout: float) -> set[tuple[Any, ...]]:
    found: set[tuple[Any, ...]] = set()
    for principal in sorted(set(principals)):
        # None is the filter's wildcard (confluent-kafka's stubs say str).
        of_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,  # type: ignore[arg-type]
                                        principal, None, AclOperation.ANY, AclPermissionType.ANY)  # type: ignore[arg-type]
        found.update(_key(b) for b in admin.describe_acls(of_principal, request_timeout=timeout).result())
    return found


def _key(binding: AclBinding) -> tuple[Any, ...]:
    return (binding.restype, binding.name, binding.resource_pattern_type, binding.principal,
            binding.host, binding.operation, binding.permission_type)


def apply_bindings(
    connection: KafkaConnection,
    bindings: Iterable[Binding],
    *,
    out: Callable[[str], Any] = print,
    timeout: float = 30.0,
) -> AclReport:
    """Create the bindings the cluster lacks; leave every other ACL as it is.

    Idempotent: the cluster's ACLs are described first, so a second run creates nothing.
    The connection's principal must be allowed to describe and alter ACLs (a super user, or
    ALTER on the cluster).

    Raises:
        BrokerError: Kafka refused or did not answer (no authorizer, not allowed to alter ACLs).
    """
    wanted = sorted(set(bindings))
    admin = connection.admin()
    try:
        existing = _existing(admin, (b.principal for b in wanted), timeout)
        missing = [b for b in wanted if _key(b.as_kafka()) not in existing]
        if missing:
            futures = admin.create_acls([b.as_kafka() for b in missing], request_timeout=timeout)
            for future in futures.values():
                future.result()
    except KafkaException as exc:
        raise BrokerError(
            f"applying ACLs on {connection} failed: {exc.args[0] if exc.args else exc}; the brokers "
            "need an authorizer (authorizer.class.name) and this principal ALTER on the cluster"
        ) from exc
    for binding in missing:
        out(f"created {binding}")
    return AclReport(tuple(missing), tuple(b for b in wanted if b not in missing))
