"""``tidings list`` and ``tidings describe`` against a real broker and worker.

Each command runs as a child process, as an operator would run it. One worker per test: the
workflow test runs instances to each status and then lists and describes them; the
aggregate test stores events and dead letters and lists both.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

from tidings import App, Faulted, Finished
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.apps import Add, Added
from tests.integration.workflow_apps import Calls
from tests.kafka_clients import kafka
from tests.workers import ROOT, Workers, test_app, workers  # noqa: F401 - fixtures
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401
from tests.saga_workers import saga_app, saga_workers  # noqa: F401
from tests.integration.saga_apps import Pay


def tidings(bootstrap: str, app_id: str, *args: str, calls: Calls | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIDINGS_BOOTSTRAP": bootstrap, "TEST_APP_ID": app_id}
    if calls is not None:
        env["TEST_CALLS_DIR"] = str(calls.directory)
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


WORKFLOWS = "tests.integration.workflow_apps:app"
APP = "tests.integration.apps:app"


def test_list_shows_each_instance_with_its_latest_status_and_describe_says_where_it_waits(
    workflow_app: App, workflow_workers: WorkflowWorkers, kafka_bootstrap: str, calls: Calls
) -> None:
    workflow_workers.start()
    enrich, collector, faulty, napper = (workflow_app.workflow_handle(n)
                                         for n in ("enrich", "collector", "faulty", "napper"))

    async def run() -> None:
        await napper.start("n-1", 600.0)
        await collector.start("c-1", 2)
        await collector.signal("c-1", "item", 7)
        for instance_id in ("o-1", "o-2"):
            await enrich.start(instance_id, "ABC")
        await faulty.start("f-1", "broken on purpose")
        assert isinstance(await faulty.result("f-1", timeout=60), Faulted)
        for instance_id in ("o-1", "o-2"):
            assert isinstance(await enrich.result(instance_id, timeout=60), Finished)

    asyncio.run(run())
    app_id = workflow_app.name

    def listed(*args: str) -> subprocess.CompletedProcess[str]:
        return tidings(kafka_bootstrap, app_id, "list", WORKFLOWS, *args, calls=calls)

    # A status record may trail the answer to a start or signal: wait for them on the topics.
    assert_eventually(lambda: all(read_topic(kafka_bootstrap, h.topics.status) for h in (collector, napper)),
                      timeout=30, interval=0.3)
    every = lines(listed("workflow", "--json"))
    assert {(row["name"], row["id"], row["status"]) for row in every} == {
        ("collector", "c-1", "RUNNING"), ("enrich", "o-1", "FINISHED"), ("enrich", "o-2", "FINISHED"),
        ("faulty", "f-1", "FAULTED"), ("napper", "n-1", "RUNNING")}
    assert all(row["at"].endswith("Z") and row["at_ms"] > 0 for row in every)
    assert [row["at_ms"] for row in every] == sorted((row["at_ms"] for row in every), reverse=True)

    table = listed("workflow", "enrich")
    assert table.returncode == 0, table.stderr
    header, *rows, count = table.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "STATUS", "SINCE"]
    assert sorted(row.split()[1] for row in rows) == ["o-1", "o-2"]
    assert count == "2 instances: FINISHED 2"

    assert sorted((row["status"], row["id"]) for row in lines(
        listed("workflow", "--status", "running", "--status", "FAULTED", "--json"))) == [
        ("FAULTED", "f-1"), ("RUNNING", "c-1"), ("RUNNING", "n-1")]
    assert len(lines(listed("workflow", "--limit", "1", "--json"))) == 1
    assert lines(listed("workflow", "--count", "--json")) == [
        {"total": 5, "counts": {"FAULTED": 1, "FINISHED": 2, "RUNNING": 2}}]
    assert listed("workflow", "--count").stdout.strip() == "5 instances: RUNNING 2, FINISHED 2, FAULTED 1"

    bad = listed("workflow", "nope")
    assert bad.returncode == 2 and "declares no workflow 'nope'" in bad.stderr

    def described(*args: str) -> subprocess.CompletedProcess[str]:
        return tidings(kafka_bootstrap, app_id, "describe", WORKFLOWS, "workflow", *args, calls=calls)

    (collecting,) = lines(described("collector", "c-1", "--json"))
    assert collecting["status"]["status"] == "RUNNING" and collecting["started"]["input"] == "2"
    assert [(w["kind"], w["name"]) for w in collecting["waiting"]] == [("signal", "item")]
    assert collecting["pending_signals"] == [] and collecting["parent"] is None
    napping = described("napper", "n-1")
    assert napping.returncode == 0, napping.stderr
    assert napping.stdout.startswith("napper n-1: running, waiting on step")
    assert "waiting on" in napping.stdout and "timer" in napping.stdout and "(in 9 min" in napping.stdout
    (failed,) = lines(described("faulty", "f-1", "--json"))
    assert (failed["status"]["status"], failed["ended"]["outcome"], failed["waiting"]) == ("FAULTED", "faulted", [])
    assert "broken on purpose" in failed["ended"]["error"]
    never = described("enrich", "o-99")
    assert never.returncode == 2 and "no enrich instance 'o-99' was started" in never.stderr


def test_list_shows_aggregates_with_their_versions_and_the_dead_letters(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    workers.start()
    client = test_app.client(kafka_bootstrap)

    async def send() -> None:
        for aggregate_id, times in (("t-1", 3), ("t-2", 1)):
            for _ in range(times):
                assert await client.send("tally", aggregate_id, Add(amount=1)) == Added(amount=1)

    asyncio.run(send())
    commands = f"{test_app.name}.aggregate.tally.commands"
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    producer.produce(commands, b"\x00 not avro", b"t-1")
    producer.flush(10)
    assert_eventually(lambda: read_topic(kafka_bootstrap, f"{test_app.name}.deadletter"), timeout=30, interval=0.3)

    listed = lines(tidings(kafka_bootstrap, test_app.name, "list", APP, "aggregate", "tally", "--json"))
    assert {(row["id"], row["version"], row["events"]) for row in listed} == {("t-1", 3, 3), ("t-2", 1, 1)}
    table = tidings(kafka_bootstrap, test_app.name, "list", APP, "aggregates")
    assert table.returncode == 0 and table.stdout.splitlines()[-1] == "2 instances", table.stdout
    assert "version 3" in table.stdout

    (letter,) = lines(tidings(kafka_bootstrap, test_app.name, "list", APP, "deadletters", "tally", "--json"))
    assert (letter["status"], letter["name"]) == ("DecodeError", "tally")
    assert letter["letter"]["origin"]["topic"] == commands
    assert lines(tidings(kafka_bootstrap, test_app.name, "list", APP, "deadletters", "account", "--json")) == []
    assert lines(tidings(kafka_bootstrap, test_app.name, "list", APP, "deadletters", "--status", "SchemaError",
                         "--json")) == []
    counted = tidings(kafka_bootstrap, test_app.name, "list", APP, "deadletters", "--count")
    assert counted.stdout.strip() == "1 dead letter: DecodeError 1", counted.stdout


def test_list_and_describe_show_where_each_saga_stands(
    kafka_bootstrap: str, saga_app: App, saga_workers: Workers
) -> None:
    saga_workers.start()
    client = saga_app.client(kafka_bootstrap)
    (saga,) = saga_app.sagas

    async def run() -> None:
        await client.send("wallet", "alice", Pay(transfer="t-ok", target="bob", amount=30), correlation_id="t-ok")
        for _ in range(300):
            status = await saga.status("t-ok")
            if status is not None and status.ended:
                return
            await asyncio.sleep(0.2)
        raise AssertionError("saga t-ok did not end")

    asyncio.run(run())
    spec = "tests.integration.saga_apps:app"
    (row,) = lines(tidings(kafka_bootstrap, saga_app.name, "list", spec, "saga", "--json"))
    assert (row["name"], row["id"], row["status"], row["transition"]) == ("transfer", "t-ok", "ENDED", "stop")
    assert json.loads(row["state"])["phase"] == "done"
    counted = tidings(kafka_bootstrap, saga_app.name, "list", spec, "sagas", "transfer", "--count")
    assert counted.stdout.strip() == "1 saga: ENDED 1", counted.stdout

    (described,) = lines(tidings(kafka_bootstrap, saga_app.name, "describe", spec, "saga", "transfer", "t-ok",
                                 "--json"))
    assert (described["status"], described["expectations"]) == ("ENDED", [])
    assert [record["transition"] for record in described["journal"]][0] == "start"
    text = tidings(kafka_bootstrap, saga_app.name, "describe", spec, "saga", "transfer", "t-ok")
    assert text.returncode == 0 and text.stdout.startswith("transfer t-ok: ended,"), text.stdout
    never = tidings(kafka_bootstrap, saga_app.name, "describe", spec, "saga", "transfer", "t-never")
    assert never.returncode == 2 and "no transfer saga 't-never' was started" in never.stderr
