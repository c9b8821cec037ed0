"""A worker's Prometheus endpoint counts exactly what went through it (issue 11, "Must show").

A real worker process runs the test App with ``TIDINGS_METRICS_PORT`` set (what
``tidings worker --metrics-port`` reads). Known traffic goes to the account aggregate: 25
commands it accepts (each stores one event) and 3 it rejects in ``decide`` (replies only,
no event), through the client; then 4 records that are not commands at all, produced with a
plain confluent-kafka producer onto its commands topic. The scrape of ``/metrics`` must show
exactly 32 records in on the commands topic, 25 records out to the events topic, 28 replies
timed, and 4 dead letters with the error's class as their reason.

A second test runs the workflow test App the same way: one-activity workflows give as many
activity attempts and timed runs as instances, and every partition's recovery is timed.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

from examples.bank.account import Deposit, Deposited, Open, Opened, Rejected, Withdraw
from tidings import App
from tidings.testing.eventually import assert_eventually
from tests.integration.workflow_apps import PARTITIONS, Calls
from tests.workers import Workers, test_app  # noqa: F401 - fixture
from tests.workflow_workers import calls, workflow_app  # noqa: F401 - fixtures
from tests.kafka_clients import kafka
from tests.prometheus import free_port, scrape, value

ACCOUNTS = 5
DEPOSITS_EACH = 4  # 5 opens + 20 deposits: 25 accepted commands, one event each
REJECTED = 3
HOSTILE = [b"\x00not avro at all", b"", b"\xff" * 40, b"{not json"]


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

        producer = kafka(kafka_bootstrap).producer()
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


RUNS = 10


def test_metrics_count_workflow_runs_activity_attempts_and_recoveries(
    kafka_bootstrap: str, workflow_app: App, calls: Calls, app_id: str, tmp_path: Path
) -> None:
    port = free_port()
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.workflow_apps:app",
                      env={"TEST_CALLS_DIR": str(calls.directory), "TIDINGS_METRICS_PORT": str(port)})
    try:
        workers.start()
        one = workflow_app.workflow_handle("one-activity")

        async def run() -> list[int]:
            await asyncio.gather(*(one.start(f"run-{n}", n) for n in range(RUNS)))
            ended = await asyncio.gather(*(one.result(f"run-{n}", timeout=60) for n in range(RUNS)))
            return [outcome.value for outcome in ended]

        assert asyncio.run(run()) == [n + 1 for n in range(RUNS)]

        def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
            samples = scrape(port)
            assert value(samples, "tidings_workflow_run_seconds_count", workflow="one-activity") == RUNS
            # Each instance's inbox got its start, and the query result() sends unless the
            # outcome answered result() first (the question is then cancelled before it is
            # produced, or may still be on its way).
            taken = value(samples, "tidings_records_in_total", topic=one.topics.inbox, kind="workflow",
                          name="one-activity")
            assert RUNS <= taken <= 2 * RUNS, taken
            return samples

        # The outcome is published before the run is observed: a scrape may come between.
        samples = assert_eventually(counted, timeout=30, message="the runs were never timed")
        inc = {"workflow": "one-activity", "activity": "inc"}
        assert value(samples, "tidings_activity_attempts_total", **inc) == RUNS
        assert value(samples, "tidings_activity_failures_total", **inc) == 0
        assert value(samples, "tidings_partition_recovery_seconds_count", kind="workflow",
                     name="one-activity") == PARTITIONS
        assert value(samples, "tidings_instances", kind="workflow", name="one-activity", state="running") == 0
    finally:
        workers.kill_all()
