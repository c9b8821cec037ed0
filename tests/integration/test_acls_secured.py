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

import json
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
from tidings.codec import avro
from tidings.core.records import DeadLetter, EventEnvelope
from tidings.shell.runtime.acls import Binding, apply_bindings
from tidings.shell.runtime.connection import KafkaConnection
from tidings.testing.topics import read_topic
from tests.integration.kcat_apps import source_topic
from tests.secured_broker import delete_app_topics
from tests.workers import AT_LEAST_ONCE, EXACTLY_ONCE, ROOT, Workers

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
        # A signal-with-start is one more inbox request: the same bindings serve it.
        started = ok(tidings(secured, app_id, "client", "signal", APP_SPEC, "greet", "g-4", "approve", "true",
                             "--start", '"dee"'))
        assert '"answer": "started"' in started, started
        assert "hello dee" in ok(tidings(secured, app_id, "client", "result", APP_SPEC, "greet", "g-4"))
        # An update (with start) too: a request on the inbox answered on the client's replies topic.
        echoed = ok(tidings(secured, app_id, "client", "update", APP_SPEC, "echo", "e-1", "echo", '"hi"',
                            "--start", "null"))
        assert '"result": "hi"' in echoed, echoed
        # A query to a handler too: the ended instance answers from its final state.
        queried = ok(tidings(secured, app_id, "client", "query", APP_SPEC, "echo", "e-1", "echoed"))
        assert '"result": 1' in queried, queried
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


def _setup(secured: Any, app_id: str) -> None:
    """The generated ACLs applied, the app's topics and the flow's source made, as the admin."""
    ok(tidings(secured, app_id, "admin", "acls", APP_SPEC, "--worker", WORKER, "--client", CLIENT, "--apply"))
    ok(tidings(secured, app_id, "admin", "topics", "apply", APP_SPEC))
    admin = KafkaConnection.resolve(bootstrap=secured.bootstrap, config_file=secured.config("admin")).admin()
    for future in admin.create_topics([NewTopic(source_topic(app_id), num_partitions=2)]).values():
        future.result(30)


def _json_record(connection: KafkaConnection, topic: str, key: str, body: dict[str, Any]) -> None:
    """Produce one JSON record as a non-Python client would (docs/kafka-clients.md)."""
    producer = connection.producer(**{"acks": "all", "partitioner": "murmur2_random"})
    errors: list[KafkaError | None] = []
    producer.produce(topic, key=key.encode(), value=json.dumps(body).encode(),
                     headers=[("content-type", b"application/json")], on_delivery=lambda e, m: errors.append(e))
    producer.flush(20)
    assert errors == [None], errors


@pytest.mark.parametrize("processing", [AT_LEAST_ONCE, EXACTLY_ONCE], ids=["alo", "eos"])
def test_a_reply_to_the_worker_may_not_write_dead_letters_the_request_and_the_worker_serves_on(
    secured: Any, app_id: str, tmp_path: Path, processing: str
) -> None:
    """Issue 18 item 3: a ``reply_to`` the worker may describe but not write, one it may not
    describe and one nobody made: each request is dead-lettered with the reason and not done;
    the next request on the same partition gets its reply; the worker never exits. Under
    exactly-once a transaction with one such write fails as a whole (TopicCheck's docstring),
    so the worker must refuse it before the transaction."""
    _setup(secured, app_id)
    admin = KafkaConnection.resolve(bootstrap=secured.bootstrap, config_file=secured.config("admin"))
    # Outside the app's prefix: the worker's prefixed ACLs do not cover them.
    readonly, hidden, missing = (f"ext-{app_id}.readonly", f"ext-{app_id}.hidden", f"ext-{app_id}.missing")
    admin_client = admin.admin()  # held: its futures fail once it is collected
    for future in admin_client.create_topics([NewTopic(readonly, 1), NewTopic(hidden, 1)]).values():
        future.result(30)
    apply_bindings(admin, [Binding(WORKER, "TOPIC", "LITERAL", readonly, "DESCRIBE")], out=lambda line: None)
    worker = Workers(secured.bootstrap, app_id, tmp_path, app_spec=APP_SPEC, guarantee=processing,
                     env={"TIDINGS_KAFKA_CONFIG": str(secured.config("worker"))})
    process = worker.start()
    client = KafkaConnection.resolve(bootstrap=secured.bootstrap, config_file=secured.config("client"))
    try:
        ok(tidings(secured, app_id, "client", "send", APP_SPEC, "tally", "t-1", "Add", '{"amount": 1}'))
        bad = {readonly: "but not write it", hidden: "may not describe", missing: "may not describe"}
        for n, reply_to in enumerate(bad):
            _json_record(client, f"{app_id}.aggregate.tally.commands", "t-1", {
                "command_id": f"bad-{n}", "aggregate_id": "t-1", "type": "Add", "payload": {"amount": 100},
                "reply_to": reply_to})
            _json_record(client, f"{app_id}.workflow.greet.inbox", "g-1", {
                "kind": "start", "instance_id": "g-1", "payload": "eve", "request_id": f"bad-start-{n}",
                "reply_to": reply_to})
        # Served in order after them: the reply comes on the client's own replies topic.
        ok(tidings(secured, app_id, "client", "send", APP_SPEC, "tally", "t-1", "Add", '{"amount": 2}'))
        ok(tidings(secured, app_id, "client", "start", APP_SPEC, "greet", "g-1", '"ada"'))
        ok(tidings(secured, app_id, "client", "signal", APP_SPEC, "greet", "g-1", "approve", "true"))
        assert "hello ada" in ok(tidings(secured, app_id, "client", "result", APP_SPEC, "greet", "g-1"))
        assert process.running, worker.log_tail()

        letters = [avro.decode_as(r.value, DeadLetter) for r in read_topic(admin, f"{app_id}.deadletter")]
        by_topic: dict[str, list[str]] = {}
        for letter in letters:
            assert letter.error_type == "ReplyUndeliverable", letter
            by_topic.setdefault(letter.source_topic, []).append(letter.reason)
        print(f"\n{processing}: {len(letters)} dead letters, e.g. {letters[0].reason}")
        for topic in (f"{app_id}.aggregate.tally.commands", f"{app_id}.workflow.greet.inbox"):
            reasons = by_topic.get(topic, [])
            assert len(reasons) == len(bad), (topic, reasons)
            for reply_to, says in bad.items():
                assert any(reply_to in reason and says in reason for reason in reasons), (reply_to, reasons)
        # Not done: the tally holds 1 + 2, none of the refused 100s.
        events = read_topic(admin, f"{app_id}.aggregate.tally.events")
        assert sorted(json.loads(avro.decode_as(r.value, EventEnvelope).payload)["amount"] for r in events) == [1, 2]
        assert read_topic(admin, readonly) == [] and read_topic(admin, hidden) == []
        log = process.log_path.read_text(errors="replace")
        assert "Fenced" not in log and "Traceback" not in log, worker.log_tail()
    finally:
        worker.kill_all()
        for future in admin_client.delete_topics([readonly, hidden], operation_timeout=30).values():
            future.result(30)


def test_the_worker_principal_with_the_generated_acls_recovers_and_runs_the_operator_clis(
    secured: Any, app_id: str, tmp_path: Path
) -> None:
    """The worker's assign-only readers (catch-up, replies, sends) and the operator CLIs
    docs/acls.md promises the worker principal (``tidings journal``, ``tidings deadletters``)
    read with group ids under ``{app}.``: a group outside it is refused (GROUP_AUTHORIZATION_FAILED
    among the records read), so with only the generated ACLs each of these would fail."""
    _setup(secured, app_id)
    worker = Workers(secured.bootstrap, app_id, tmp_path, app_spec=APP_SPEC,
                     env={"TIDINGS_KAFKA_CONFIG": str(secured.config("worker"))})
    first = worker.start("w1")
    try:
        ok(tidings(secured, app_id, "client", "send", APP_SPEC, "tally", "t-1", "Add", '{"amount": 3}'))
        ok(tidings(secured, app_id, "client", "start", APP_SPEC, "greet", "g-1", '"ada"'))
        # A hostile record, so the dead-letter topic has something to show.
        _json_record(KafkaConnection.resolve(bootstrap=secured.bootstrap, config_file=secured.config("client")),
                     f"{app_id}.aggregate.tally.commands", "t-2", {"command_id": "x", "aggregate_id": "t-2",
                                                                   "type": "Steal", "payload": {}})
        first.stop()
        # A new worker with an empty data dir catches every partition up from its journal.
        second = worker.start("w2")
        ok(tidings(secured, app_id, "client", "send", APP_SPEC, "tally", "t-1", "Add", '{"amount": 4}'))
        ok(tidings(secured, app_id, "client", "signal", APP_SPEC, "greet", "g-1", "approve", "true"))
        assert "hello ada" in ok(tidings(secured, app_id, "client", "result", APP_SPEC, "greet", "g-1"))
        assert second.running, worker.log_tail()
        assert "GROUP_AUTHORIZATION_FAILED" not in worker.log_tail(2000), worker.log_tail()

        journal = ok(tidings(secured, app_id, "worker", "journal", APP_SPEC, "greet", "g-1", "--json"))
        assert '"type": "started"' in journal and '"type": "ended"' in journal, journal
        letters = ok(tidings(secured, app_id, "worker", "deadletters", APP_SPEC))
        assert "Steal" in letters, letters
        # A client may not read the journal: refused, and the message says why and what to do.
        refused = tidings(secured, app_id, "client", "journal", APP_SPEC, "greet", "g-1")
        assert refused.returncode != 0
        message = refused.stdout + refused.stderr
        print(f"\nthe client reading a journal: {message.strip().splitlines()[-1]}")
        assert "User:client is not authorized" in message and "tidings acls" in message, message
        assert "not there" not in message, message
    finally:
        worker.kill_all()
