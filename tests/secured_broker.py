"""The session's secured Kafka node, for every test that needs TLS, SASL or ACLs.

``secured_broker`` (registered in tests/conftest.py) is one ``LocalBroker(..., secure=True)``
for the whole session, started on first use in a temp dir of its own and stopped by its PID
at the end (never the shared plaintext broker). It yields the started ``LocalBroker``:

- ``secured_broker.client_settings(user, method)`` is a user's ``client.properties``
  (``ClientSettings``: ``.bootstrap``, ``.properties``, ``.connection()``, ``.environ()``);
  users ``admin`` (a super user: create topics and ACLs as it), ``worker``, ``client``,
  ``client2``; methods ``scram`` (SCRAM-SHA-512), ``scram-sha-256``, ``plain``, ``mtls``.
- Nobody but ``admin`` may do anything until an ACL grants it (``StandardAuthorizer``,
  ``allow.everyone.if.no.acl.found=false``); the fixture grants nothing. ``grant_app``
  grants a user everything on one app's resources, ``revoke`` takes it back.

``delete_app_topics`` deletes an app's topics as the admin: the ``app_id`` fixture cleans
up on the shared broker only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from tidings.broker import LocalBroker
from tidings.shell.runtime.connection import KafkaConnection


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A started secured node (see the module docstring); stopped by its PID at the end."""
    broker = LocalBroker(tmp_path_factory.mktemp("secured-kafka"), secure=True, heap="512m")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def admin_connection(broker: LocalBroker) -> KafkaConnection:
    """The super user's connection (SCRAM-SHA-512)."""
    return broker.client_settings("admin", "scram").connection()


def app_bindings(app_id: str, user: str) -> list[AclBinding]:
    """Everything on ``app_id``'s topics, groups and transactional ids, for ``User:user``.

    Wide on purpose (the least-privilege set is ``tidings acls``'s to make): topics, groups
    and transactional ids prefixed with the app's name, and the ``tidings-`` groups tidings'
    own readers name (``tidings-client-<uuid>``, ...).
    """
    allow = AclPermissionType.ALLOW
    patterns = [
        (ResourceType.TOPIC, app_id),
        (ResourceType.GROUP, app_id),
        (ResourceType.GROUP, "tidings-"),
        (ResourceType.TRANSACTIONAL_ID, app_id),
    ]
    return [
        AclBinding(kind, name, ResourcePatternType.PREFIXED, f"User:{user}", "*",
                   AclOperation.ALL, allow)
        for kind, name in patterns
    ]


def grant_app(broker: LocalBroker, app_id: str, *users: str) -> None:
    """Grant ``users`` everything on ``app_id``'s resources (``app_bindings``), as the admin."""
    bindings = [binding for user in users for binding in app_bindings(app_id, user)]
    admin = admin_connection(broker).admin()  # held: its futures fail once it is collected
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def revoke(broker: LocalBroker, app_id: str, *users: str) -> None:
    """Delete what ``grant_app`` granted ``users`` on ``app_id``."""
    filters = [
        AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                         b.operation, b.permission_type)
        for user in users for b in app_bindings(app_id, user)
    ]
    admin = admin_connection(broker).admin()
    for future in admin.delete_acls(filters).values():
        future.result(timeout=30)


def delete_app_topics(broker: LocalBroker, app_id: str) -> None:
    """Delete every topic named ``{app_id}.*`` on the secured node, as the admin."""
    admin = admin_connection(broker).admin()
    names = [name for name in admin.list_topics(timeout=10).topics if name.startswith(f"{app_id}.")]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(timeout=30)
