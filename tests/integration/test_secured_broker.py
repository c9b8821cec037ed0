"""tidings on the secured local node (``secured_broker``, tests/secured_broker.py).

A wrong password, a certificate from another CA and plaintext on the SASL_SSL port are
refused, each with a reason that says so; the bank (tests/bank_workers.py: accounts and the
transfer saga) runs end to end with a worker process and a ``Client``, once over SASL_SSL
with SCRAM and once over mutual TLS, as the principals ``User:worker`` and ``User:client``
(granted the least-privilege ACLs `tidings acls` makes; nothing else is allowed on this node); every
transfer ends once, received or refunded, and the total is conserved. The aiokafka clients
(the bench's) connect over each method too. No password is in any log or output.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from examples.bank.account import SendTransfer
from tidings.broker import ClientSettings, LocalBroker
from tidings.broker._certs import issue, new_ca, private_pem, write_private
from tidings.broker._security import read_passwords
from tidings.codec import avro
from tidings.core.records import EventEnvelope
from tidings.core.saga_records import SagaJournalEntry
from tidings.errors import KafkaUnreachable
from tidings.shell.client.client import Client
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.reachability import probe_kafka
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tidings.testing.topics import read_topic
from tests.bank_workers import build
from tests.bank_chaos import ACCOUNTS, CLOSED, GHOST, open_accounts, send, violations
from tests.secured_broker import admin_connection, delete_app_topics, grant_app, revoke
from tests.workers import ROOT

TRANSFERS_PER_CALLER = 8
CALLERS = 3


def refusal(connection: KafkaConnection) -> str:
    """The reason the node refuses ``connection`` (the probe the CLI and worker run)."""
    with pytest.raises(KafkaUnreachable) as refused:
        probe_kafka(connection, 4)
    return str(refused.value)


def test_a_wrong_password_is_refused_and_the_reason_says_so(secured_broker: LocalBroker, tmp_path: Path) -> None:
    right = secured_broker.client_settings("worker", "scram")
    assert probe_kafka(right.connection(), 15) is None  # the same file, right password: answers
    wrong = tmp_path / "wrong.properties"
    wrong_password = "not-the-password-" + "x" * 8
    wrong.write_text("".join(line if not line.startswith("sasl.password=") else f"sasl.password={wrong_password}\n"
                             for line in right.properties.read_text().splitlines(keepends=True)))
    message = refusal(KafkaConnection.resolve(config_file=wrong, environ={}))
    print(f"\nwrong password: {message}")
    assert "Authentication failed" in message and "invalid credentials" in message, message
    assert "SCRAM-SHA-512" in message
    assert wrong_password not in message


def test_a_client_certificate_of_another_ca_is_refused(secured_broker: LocalBroker, tmp_path: Path) -> None:
    ours = secured_broker.client_settings("worker", "mtls")
    ca, ca_key = new_ca("not the broker's CA")
    forged_key = ec.generate_private_key(ec.SECP256R1())
    forged = issue(ca, ca_key, forged_key, "worker", server=False)  # the same CN as the real worker's
    write_private(tmp_path / "forged.key", private_pem(forged_key))
    write_private(tmp_path / "forged.crt", forged.public_bytes(serialization.Encoding.PEM))
    entries = dict(line.split("=", 1) for line in ours.properties.read_text().splitlines()
                   if "=" in line and not line.startswith("#"))
    entries["ssl.certificate.location"] = str(tmp_path / "forged.crt")
    entries["ssl.key.location"] = str(tmp_path / "forged.key")
    message = refusal(KafkaConnection.resolve(kafka=entries, environ={}))
    print(f"\nforeign client certificate: {message}")
    assert "bad certificate" in message, message
    assert probe_kafka(ours.connection(), 15) is None  # the real worker certificate is let in


def test_plaintext_to_the_sasl_ssl_port_fails_fast_and_says_why(secured_broker: LocalBroker) -> None:
    bootstrap = secured_broker.client_settings("admin", "scram").bootstrap
    failures: list[tuple[float, str]] = []
    began = time.monotonic()

    class Failures:
        def log(self, level: int, fmt: str, *args: object) -> None:
            message = fmt % args if args else fmt
            if "FAIL" in message or "Disconnected" in message:
                failures.append((time.monotonic() - began, message))

    # A bare librdkafka client, as any tool would be: its own log is where it says why.
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": Failures()}
    admin = AdminClient(config)
    future = admin.describe_cluster(request_timeout=10)
    while not failures and time.monotonic() - began < 10:
        admin.poll(0.05)
    assert failures, "a PLAINTEXT client on the SASL_SSL port was not refused within 10 s"
    after, first = failures[0]
    print(f"\nplaintext on SASL_SSL: refused after {after:.2f} s: {first}")
    assert after < 3.0
    # Closed while it asked for the API versions: the first request of the protocol.
    assert "Disconnected" in first and "APIVERSION_QUERY" in first, first
    assert not future.done() or future.exception() is not None  # nothing answered it
    # tidings' own probe (the CLI's, the worker's) gives up with the same reason.
    message = refusal(KafkaConnection(bootstrap))
    print(f"tidings: {message}")
    assert "APIVERSION_QUERY" in message or "security.protocol" in message, message


@pytest.mark.parametrize("method", ["scram", "plain", "scram-sha-256", "mtls"])
def test_the_aiokafka_clients_connect_over_each_method(secured_broker: LocalBroker, method: str, app_id: str) -> None:
    connection = secured_broker.client_settings("worker", method).connection()  # type: ignore[arg-type]
    # aiokafka's producer is idempotent: Kafka lets it start only for a principal that may
    # write some topic (KIP-679). Granted here, or the test passed only after another had.
    grant_app(secured_broker, build(app_id), worker="worker")

    async def metadata() -> list[str]:
        producer = connection.aiokafka_producer()
        await asyncio.wait_for(producer.start(), 20)
        try:
            found = await producer.client.fetch_all_metadata()
            return sorted(f"{broker.host}:{broker.port}" for broker in found.brokers())
        finally:
            await producer.stop()

    try:
        assert asyncio.run(metadata()) == [connection.bootstrap]
    finally:
        revoke(secured_broker, build(app_id), worker="worker")


@pytest.mark.parametrize("method", ["scram", "mtls"])
def test_the_bank_runs_end_to_end_as_worker_and_client_principals(
    secured_broker: LocalBroker, method: str, app_id: str, tmp_path: Path
) -> None:
    worker_settings = secured_broker.client_settings("worker", method)  # type: ignore[arg-type]
    client_settings = secured_broker.client_settings("client", method)  # type: ignore[arg-type]
    # The least-privilege ACLs `tidings acls` makes: the client reads only its own replies.
    grant_app(secured_broker, build(app_id), worker="worker", clients=["client"])
    admin = admin_connection(secured_broker)
    began = time.monotonic()
    worker = WorkerProcess("tests.bank_workers:app", bootstrap=worker_settings.bootstrap,
                           data_dir=tmp_path / "w1", log_path=tmp_path / "w1.log",
                           env={"TEST_APP_ID": app_id, **worker_settings.environ()}, cwd=ROOT)
    try:
        worker.start()
        # The worker applies the app's topics itself, as User:worker (its ACLs allow Create).
        assert_eventually(lambda: _ready(worker), timeout=90, interval=0.2)
        confirmed, refunds = asyncio.run(_bank(client_settings, app_id))
        # Journals are the workers' (and an operator's) to read, not a client's.
        _drain(admin, app_id, confirmed)
        events = [avro.decode_as(r.value or b"", EventEnvelope)
                  for r in read_topic(admin, f"{app_id}.aggregate.account.events")]
        print(f"\nthe bank over {method}: {len(confirmed)} transfers confirmed, {refunds} to accounts "
              f"that refund, {len(events)} events, {time.monotonic() - began:.1f} s")
        assert len(confirmed) >= CALLERS * TRANSFERS_PER_CALLER // 2
        assert any(e.type == "TransferRefunded" for e in events), "no refund: that path went untested"
        assert any(e.type == "TransferReceived" for e in events)
        assert violations(events, confirmed) == []
        # The CLI with the same settings file, as the worker principal: it reaches the node.
        cli = subprocess.run(
            [sys.executable, "-m", "tidings.cli.main", "topics", "apply", "tests.bank_workers:app"],
            env={**os.environ, "TEST_APP_ID": app_id, **worker_settings.environ()}, cwd=ROOT,
            capture_output=True, text=True, timeout=120,
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "0 created, 0 differing" in cli.stdout, cli.stdout  # the worker made them all
    finally:
        worker.stop()
        log = worker.log_path.read_text(errors="replace")
        revoke(secured_broker, build(app_id), worker="worker", clients=["client"])
        delete_app_topics(secured_broker, app_id)
    # The worker said who it is, and nobody's password.
    assert "sasl.username=worker" in log or "ssl.certificate.location" in log, log[-3000:]
    for user, password in read_passwords(secured_broker.data_dir).items():
        assert password not in log, f"{user}'s password is in the worker's log"
        assert password not in cli.stdout + cli.stderr, f"{user}'s password is in the CLI's output"


def _ready(worker: WorkerProcess) -> bool:
    # The log's tail is the message when it never gets ready (refused, or an ACL missing).
    assert "Worker ready" in worker.log_tail(400), worker.log_tail(30)
    return True


async def _bank(settings: ClientSettings, app_id: str) -> tuple[dict[str, tuple[str, str, Decimal]], int]:
    """Open the accounts, then transfer concurrently: confirmed transfers, and how many went
    to an account that refunds them."""
    client = Client(settings.connection(), app=build(app_id), name="client")  # its own replies topic
    confirmed: dict[str, tuple[str, str, Decimal]] = {}
    refunding = 0
    try:
        await open_accounts(client)

        async def caller(number: int) -> None:
            nonlocal refunding
            rng = random.Random(f"{app_id}-{number}")
            for n in range(TRANSFERS_PER_CALLER):
                transfer_id = f"c{number}-{n}"
                source = ACCOUNTS[(number + n) % len(ACCOUNTS)]
                # Every fourth to an account that refuses it: the saga refunds those.
                target = (GHOST if n % 8 == 3 else CLOSED) if n % 4 == 3 else rng.choice(
                    [a for a in ACCOUNTS if a != source])
                amount = Decimal(rng.randint(1, 50))
                reply = await send(client, source, SendTransfer(transfer_id=transfer_id, target=target,
                                                                 amount=amount), f"send-{transfer_id}", transfer_id)
                assert reply.status == "accepted", reply
                if reply.events[-1].type == "TransferSent":
                    confirmed[transfer_id] = (source, target, amount)
                    refunding += target in (GHOST, CLOSED)

        await asyncio.gather(*(caller(n) for n in range(CALLERS)))
    finally:
        client.close()
    return confirmed, refunding


def _drain(connection: KafkaConnection, app_id: str, confirmed: dict[str, tuple[str, str, Decimal]]) -> None:
    """Wait until every confirmed transfer's saga has ended."""

    def all_ended() -> bool:
        ended = {entry.saga_id for entry in (avro.decode_as(r.value or b"", SagaJournalEntry)
                                             for r in read_topic(connection, f"{app_id}.saga.transfer.journal"))
                 if entry.ended}
        pending = set(confirmed) - ended
        assert not pending, f"{len(pending)} sagas have not ended, e.g. {sorted(pending)[:5]}"
        return True

    assert_eventually(all_ended, timeout=60, interval=0.5)


def test_the_admin_is_a_super_user_and_nobody_else_is(secured_broker: LocalBroker, app_id: str) -> None:
    """The fixture's promise to the ACL tests: the admin may create topics; client2 (no ACL) may not."""
    topic = f"{app_id}.probe"
    denied = secured_broker.client_settings("client2", "scram").connection().admin()
    failure = denied.create_topics([NewTopic(topic, 1)], operation_timeout=10)[topic].exception(timeout=30)
    assert failure is not None and "TOPIC_AUTHORIZATION_FAILED" in str(failure), failure
    admin = admin_connection(secured_broker).admin()
    assert admin.create_topics([NewTopic(topic, 1)], operation_timeout=10)[topic].result(timeout=30) is None
    delete_app_topics(secured_broker, app_id)
