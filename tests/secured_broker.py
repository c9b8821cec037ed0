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
  applies an app's least-privilege ACLs for a worker user and client users, made by
  ``tidings acls``'s generator (``runtime/acls.py``), and each client's replies topic;
  ``revoke`` takes the ACLs back.

``delete_app_topics`` deletes an app's topics as the admin: the ``app_id`` fixture cleans
up on the shared broker only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from confluent_kafka.admin import AclBindingFilter

from tidings import App
from tidings.broker import LocalBroker
from tidings.cli.acls import app_topics
from tidings.shell.runtime.acls import Binding, app_bindings, apply_bindings, client_replies_topic
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.topics import apply_topics, spec_for


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


def app_acls(app: App, *, worker: str | None = None, clients: Sequence[str] = ()) -> list[Binding]:
    """The least-privilege ACLs of ``app`` for ``User:worker`` and each ``User:client``:
    ``tidings acls``'s own generator (``runtime/acls.py``), so a test runs with what an
    operator would apply."""
    return app_bindings(app.name, app_topics(app), worker=None if worker is None else f"User:{worker}",
                        clients=[f"User:{client}" for client in clients])


def grant_app(broker: LocalBroker, app: App, *, worker: str | None = None, clients: Sequence[str] = ()) -> None:
    """Apply ``app``'s generated ACLs (``app_acls``) and make each client's replies topic, as
    ``tidings acls --apply`` does, as the admin."""
    admin = admin_connection(broker)
    replies = [spec_for("replies", client_replies_topic(app.name, f"User:{client}"), partitions=app.partitions)
               for client in clients]
    apply_topics(admin, app.replication().applied(replies), out=lambda line: None)
    apply_bindings(admin, app_acls(app, worker=worker, clients=clients), out=lambda line: None)


def revoke(broker: LocalBroker, app: App, *, worker: str | None = None, clients: Sequence[str] = ()) -> None:
    """Delete what ``grant_app`` granted on ``app``."""
    filters = [
        AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                         b.operation, b.permission_type)
        for b in (binding.as_kafka() for binding in app_acls(app, worker=worker, clients=clients))
    ]
    admin = admin_connection(broker).admin()  # held: its futures fail once it is collected
    for future in admin.delete_acls(filters).values():
        future.result(timeout=30)


def delete_app_topics(broker: LocalBroker, app_id: str) -> None:
    """Delete every topic named ``{app_id}.*`` on the secured node, as the admin."""
    admin = admin_connection(broker).admin()
    names = [name for name in admin.list_topics(timeout=10).topics if name.startswith(f"{app_id}.")]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(timeout=30)
