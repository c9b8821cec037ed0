"""A worker's Prometheus endpoint counts exactly what went through it (issue 11, "Must show").

A real worker process runs the test App with ``TIDINGS_METRICS_PORT`` set (what
``tidings worker --metrics-port`` reads). Known traffic goes to the account aggregate: 25
commands it accepts (each stores one event) and 3 it rejects in ``decide`` (replies only,
no event), through the client; then 4 records that are not commands at all, produced with a
plain confluent-kafka producer onto its commands topic. The scrape of ``/metrics`` must show
exactly 32 records in on the commands topic, 25 records out to the events topic, 28 replies
timed, and 4 dead letters with the error's class as their reason.
"""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from decimal import Decimal
from pathlib import Path

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from examples.bank.account import Deposit, Deposited, Open, Opened, Rejected, Withdraw
from tidings import App
from tidings.testing.eventually import assert_eventually
from tests.workers import Workers, test_app  # noqa: F401 - fixture

ACCOUNTS = 5
DEPOSITS_EACH = 4  # 5 opens + 20 deposits: 25 accepted commands, one event each
REJECTED = 3
HOSTILE = [b"\x00not avro at all", b"", b"\xff" * 40, b"{not json"]


def free_port() -> int:
    """A port nobody listens on now (the worker binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str, /, **labels: str) -> float:
    return samples.get((metric, frozenset(labels.items())), 0.0)


def test_metrics_count_commands_in_events_out_and_dead_letters_exactly(
    kafka_bootstrap: str, test_app: App, app_id: str, tmp_path: Path
) -> None:
    port = free_port()
    workers = Workers(kafka_bootstrap, app_id, tmp_path, env={"TIDINGS_METRICS_PORT": str(port)})
    try:
        workers.start()
        client = test_app.client(kafka_bootstrap)
        account = next(h for h in test_app.aggregates if h.name == "account")
        commands, events = account.topics.commands, account.topics.events

        async def traffic() -> list[object]:
            ids = [f"acct-{n}" for n in range(ACCOUNTS)]
            opened = await asyncio.gather(*(client.send("account", i, Open(owner=i)) for i in ids))
            deposited = await asyncio.gather(*(
                client.send("account", i, Deposit(amount=Decimal(10))) for i in ids for _ in range(DEPOSITS_EACH)))
            refused = await asyncio.gather(*(
                client.send("account", ids[n], Withdraw(amount=Decimal(1000))) for n in range(REJECTED)))
            return [*opened, *deposited, *refused]

        replies = asyncio.run(traffic())
        accepted = ACCOUNTS * (1 + DEPOSITS_EACH)
        assert [type(r) for r in replies] == [Opened] * ACCOUNTS + [Deposited] * (accepted - ACCOUNTS) \
            + [Rejected] * REJECTED

        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for n, hostile in enumerate(HOSTILE):
            producer.produce(commands, hostile, b"hostile-%d" % n)
        assert producer.flush(10) == 0

        def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
            samples = scrape(port)
            dead = sum(v for (name, labels), v in samples.items() if name == "tidings_dead_letters_total")
            assert dead == len(HOSTILE), workers.log_tail()
            return samples

        samples = assert_eventually(counted, timeout=30, message="the dead letters were never counted")
        sent = accepted + REJECTED + len(HOSTILE)
        assert value(samples, "tidings_records_in_total", topic=commands, kind="aggregate", name="account") == sent
        assert value(samples, "tidings_records_out_total", topic=events) == accepted
        assert value(samples, "tidings_dead_letters_total", kind="aggregate", name="account",
                     reason="DecodeError") == len(HOSTILE)
        # Every command the client sent was answered, and each answer was timed.
        assert value(samples, "tidings_command_reply_seconds_count", aggregate="account") == accepted + REJECTED
        # Batches of the commands input add up to what it took in.
        assert value(samples, "tidings_batch_records_sum", kind="aggregate", name="account",
                     input="aggregate-account") == sent
        assert value(samples, "tidings_instances", kind="aggregate", name="account", state="cached") == ACCOUNTS
        # The projection of the same events took them in too, under its own name.
        assert_eventually(lambda: value(scrape(port), "tidings_records_in_total", topic=events,
                                        kind="projection", name="balances") == accepted, timeout=30)
    finally:
        workers.kill_all()
