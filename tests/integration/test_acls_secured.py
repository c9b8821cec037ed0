"""The generated ACLs on a SASL_SSL broker with an authorizer (issue 18, item 3, must show).

Needs the fixture ``secured_broker`` (a node with a SASL_SSL listener, SCRAM users and
``StandardAuthorizer``), which gives:

- ``secured_broker.bootstrap``: the SASL_SSL bootstrap servers;
- ``secured_broker.config(name) -> Path``: a Java-style client properties file
  (``--kafka-config``) for ``"admin"`` (a super user), ``"worker"``, ``"client"`` and
  ``"client2"``, the SCRAM principals ``User:worker``, ``User:client``, ``User:client2``.

With the ACLs ``tidings acls --apply`` made
(applied twice: the second creates nothing), a raw producer authenticated as the client is
refused (TOPIC_AUTHORIZATION_FAILED) on every journal, events, verdicts, replies, status,
dead-letter and saga topic, and may not read another client's replies; every client
operation still works as that principal: send, start, signal, cancel, result, outcomes, and
kcat's produce to an inbox as docs/kafka-clients.md shows it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

from tidings.broker import LocalBroker, Method
from tidings.shell.runtime.connection import KafkaConnection
from tests.integration.kcat_apps import source_topic
from tests.secured_broker import delete_app_topics
from tests.workers import ROOT, Workers

pytestmark = pytest.mark.integration

APP_SPEC = "tests.integration.kcat_apps:app"
WORKER, CLIENT, CLIENT2 = "User:worker", "User:client", "User:client2"


class _Secured:
    """The secured node as this test asks for it: its SASL_SSL bootstrap, and each user's
    client properties file (SCRAM-SHA-512; PLAIN for kcat, whose bundled librdkafka cannot
    do SCRAM against Kafka 4: docs/security-local.md)."""

    def __init__(self, broker: LocalBroker) -> None:
        self.broker = broker
        self.bootstrap = broker.client_settings("admin", "scram").bootstrap

    def config(self, name: str, method: Method = "scram") -> Path:
        return self.broker.client_settings(name.removeprefix("User:"), method).properties


@pytest.fixture
def secured(secured_broker: LocalBroker, app_id: str) -> Iterator[_Secured]:
    yield _Secured(secured_broker)
    delete_app_topics(secured_broker, app_id)


def tidings(secured: Any, app_id: str, who: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``tidings ARGS`` as principal ``who`` (its properties file, its client name)."""
    env = {**os.environ, "TEST_APP_ID": app_id, "TIDINGS_BOOTSTRAP": secured.bootstrap,
           "TIDINGS_KAFKA_CONFIG": str(secured.config(who)), "PYTHONPATH": f"{ROOT}/platform:{ROOT}"}
    env.pop("TIDINGS_CLIENT_NAME", None)
    if who.startswith("client"):
        env["TIDINGS_CLIENT_NAME"] = who
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}\n{done.stderr}"
    return done.stdout


def produce_error(connection: KafkaConnection, topic: str) -> int | None:
    """Produce one record to ``topic``; the error code of its delivery (None: stored)."""
    producer = connection.producer(**{"enable.idempotence": False, "acks": "all", "message.timeout.ms": 15000})
    errors: list[KafkaError | None] = []
    try:
        producer.produce(topic, key=b"forged", value=b"forged", on_delivery=lambda e, m: errors.append(e))
    except Exception as exc:  # noqa: BLE001 - refused before queueing: that is a refusal too
        error = exc.args[0] if exc.args else None
        return error.code() if isinstance(error, KafkaError) else -1
    producer.flush(20)
    assert errors, f"no delivery report for {topic}"
    return None if errors[0] is None else errors[0].code()


def test_the_generated_acls_refuse_forged_records_and_allow_every_client_operation(
    secured: Any, app_id: str, tmp_path: Path
) -> None:
    acls = ("acls", APP_SPEC, "--worker", WORKER, "--client", CLIENT, "--client", CLIENT2, "--apply")
    first = ok(tidings(secured, app_id, "admin", *acls))
    assert " 0 created" not in first.splitlines()[-1], first
    second = ok(tidings(secured, app_id, "admin", *acls))
    assert ": 0 created," in second.splitlines()[-1] and "0 client replies topics created" in second, second
    ok(tidings(secured, app_id, "admin", "topics", "apply", APP_SPEC))
    # The flow stage's source is a producer's topic, not the app's: an operator makes it.
    admin_client = KafkaConnection.resolve(bootstrap=secured.bootstrap, config_file=secured.config("admin")).admin()
    for future in admin_client.create_topics([NewTopic(source_topic(app_id), num_partitions=2)]).values():
        future.result(30)

    worker = Workers(secured.bootstrap, app_id, tmp_path, app_spec=APP_SPEC,
                     env={"TIDINGS_KAFKA_CONFIG": str(secured.config("worker"))})
    worker.start()
    try:
        # Every client operation, as the client principal.
        # Exit 0 means the verdict came back on the client's own replies topic.
        ok(tidings(secured, app_id, "client", "send", APP_SPEC, "tally", "t-1", "Add", '{"amount": 3}'))
        ok(tidings(secured, app_id, "client", "start", APP_SPEC, "greet", "g-1", '"ada"'))
        ok(tidings(secured, app_id, "client", "signal", APP_SPEC, "greet", "g-1", "approve", "true"))
        assert "hello ada" in ok(tidings(secured, app_id, "client", "result", APP_SPEC, "greet", "g-1"))
        ok(tidings(secured, app_id, "client", "start", APP_SPEC, "greet", "g-2", '"bob"'))
        ok(tidings(secured, app_id, "client", "cancel", APP_SPEC, "greet", "g-2"))
        outcomes = ok(tidings(secured, app_id, "client", "outcomes", APP_SPEC, "greet"))
        assert '"g-1"' in outcomes and '"g-2"' in outcomes
        kcat = shutil.which("kcat")
        if kcat is not None:  # docs/kafka-clients.md's recipes, with the client's file and replies topic
            record = ('{"kind":"start","instance_id":"g-3","payload":"cy","request_id":"start-g-3",'
                      f'"reply_to":"{app_id}.replies.client"}}')
            done = subprocess.run(
                [kcat, "-F", str(secured.config("client", "plain")), "-b", secured.bootstrap, "-P",
                 "-t", f"{app_id}.workflow.greet.inbox", "-k", "g-3", "-X", "partitioner=murmur2_random",
                 "-H", "content-type=application/json"],
                input=record.encode(), capture_output=True, timeout=60)
            assert done.returncode == 0, done.stderr
            ok(tidings(secured, app_id, "client", "signal", APP_SPEC, "greet", "g-3", "approve", "false"))
            assert "hello cy" in ok(tidings(secured, app_id, "client", "result", APP_SPEC, "greet", "g-3"))
            read = subprocess.run(
                [kcat, "-F", str(secured.config("client", "plain")), "-b", secured.bootstrap, "-C", "-e",
                 "-t", f"{app_id}.replies.client", "-X", f"group.id={app_id}.client.kcat", "-f", "%k\n"],
                capture_output=True, timeout=60)
            assert read.returncode == 0 and b"start-g-3" in read.stdout, read.stderr

        # Forged records, as the client principal, on every topic only a worker may write.
        client = KafkaConnection.resolve(bootstrap=secured.bootstrap, config_file=secured.config("client"))
        admin = KafkaConnection.resolve(bootstrap=secured.bootstrap, config_file=secured.config("admin")).admin()
        topics = [name for name in admin.list_topics(timeout=30).topics if name.startswith(f"{app_id}.")]
        forbidden = [t for t in topics if not t.endswith((".commands", ".inbox")) or ".saga." in t]
        assert any(t.endswith(".journal") for t in forbidden) and any(t.endswith(".events") for t in forbidden)
        assert any(t.endswith(".status") for t in forbidden) and f"{app_id}.replies.client2" in forbidden
        for topic in forbidden:
            assert produce_error(client, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic
        # Another client's replies cannot be read either.
        reader = client.consumer(**{"group.id": f"{app_id}.client.peek", "enable.auto.commit": False})
        try:
            reader.subscribe([f"{app_id}.replies.client2"])
            message = reader.poll(10)
            assert message is not None and message.error() is not None
            assert message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        finally:
            reader.close()
    finally:
        worker.kill_all()
