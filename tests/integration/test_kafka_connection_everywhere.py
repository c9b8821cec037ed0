"""Every Kafka client a worker, a Client and the CLI build gets the connection's properties.

One property is set once for the whole run (``TIDINGS_KAFKA_CLIENT_RACK``, a harmless marker),
another and a secret come from a ``client.properties`` file (``TIDINGS_KAFKA_CONFIG``):
``socket.keepalive.enable`` and ``sasl.password``, which librdkafka takes and ignores with
``security.protocol=PLAINTEXT``. Every client built is recorded where it is built
(``TIDINGS_KAFKA_RECORD_CLIENTS``, ``shell/runtime/connection.py``): the test lists them,
checks each got both properties and the secret redacted, and that the secret appears nowhere
in the worker's log, its /metrics page, the client's output or the records.

Faust builds no Kafka client in a worker (``runtime/worker.py``, ``_Boot``), so it needs none
of the connection's security settings: the worker runs under a wrapper that records every
connection aiokafka (Faust's Kafka library) opens and, at exit, every aiokafka client object
alive. There are none.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import defaultdict
from pathlib import Path

from tests.prometheus import free_port
from tests.workers import EXACTLY_ONCE, ROOT, both_guarantees

APP = "tests.integration.connection_apps:app"
SECRET = f"tidings-secret-{uuid.uuid4().hex}"
MARKER = f"rack-{uuid.uuid4().hex[:8]}"

# Runs `tidings ...` and keeps a file saying what of aiokafka (Faust's Kafka library) the
# process used: every connection it opened (create_conn, which each of its clients calls
# for the bootstrap servers and each broker) and, at exit, the aiokafka client objects alive.
WORKER = """
import atexit, gc, json, sys, threading, time
import aiokafka.client, aiokafka.conn

report_path = sys.argv[1]
connections = []
original = aiokafka.conn.create_conn

async def create_conn(host, port, *args, **kwargs):
    connections.append(f"{host}:{port}")
    return await original(host, port, *args, **kwargs)

aiokafka.conn.create_conn = aiokafka.client.create_conn = create_conn
CLIENT_MODULES = ("aiokafka.client", "aiokafka.producer.producer", "aiokafka.consumer.consumer", "aiokafka.admin.client")

def report(at_exit=False):
    state = {"connections": connections, "at_exit": at_exit}
    if at_exit:
        state["clients"] = sorted(type(o).__name__ for o in gc.get_objects()
                                  if type(o).__module__ in CLIENT_MODULES
                                  and type(o).__name__.endswith(("Client", "Producer", "Consumer")))
    with open(report_path, "w") as out:
        json.dump(state, out)

def keep_reporting():
    while True:
        report()
        time.sleep(0.5)

atexit.register(report, True)
threading.Thread(target=keep_reporting, daemon=True).start()
sys.argv = ["tidings", *sys.argv[2:]]
from tidings.cli.main import main
code = main()
report(True)
sys.exit(code)
"""

# A program using the App's client: commands, workflows, a signal sent by the projection,
# outcomes read back, a journal read back.
CLIENT = """
import asyncio, os
from tests.integration.connection_apps import Add, build

app = build(os.environ["TEST_APP_ID"])

async def main():
    client = app.client()
    try:
        await client.send("tally", "t-1", Add(amount=1), 60)
        await client.start("pay", "p-1", "t-2")
        assert await client.value("pay", "p-1", 90) == 16
        await client.start("waiter", "w-1")
        await client.send("tally", "w-1", Add(amount=99), 60)
        assert await client.value("waiter", "w-1", 90) is True
        ended = [instance async for instance, _ in client.outcomes("pay", follow=False)]
        assert ended == ["p-1"], ended
        assert await app.workflow_handle("pay").journal("p-1")
        print(repr(client.connection), flush=True)
    finally:
        client.close()

asyncio.run(main())
"""


def wait_for(path: Path, text: str, process: subprocess.Popen[bytes], seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        assert process.poll() is None, path.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, path.read_text(errors="replace")[-4000:]
        time.sleep(0.1)


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def sites_by_pid(built: list[dict[str, object]]) -> dict[int, set[str]]:
    found: dict[int, set[str]] = defaultdict(set)
    for client in built:
        found[int(client["pid"])].add(f"{client['role']} {client['site']}")  # type: ignore[call-overload]
    return found


@both_guarantees
def test_every_client_of_a_worker_a_client_and_the_cli_gets_the_properties_and_hides_the_secret(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, guarantee: str,
) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "# given once, for every client of every process\n"
        "security.protocol=PLAINTEXT\n"
        f"sasl.password={SECRET}\n"
        "socket.keepalive.enable=true\n"
    )
    recorded = tmp_path / "clients.jsonl"
    faust_report = tmp_path / "aiokafka.json"
    env = {
        **os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap, "TEST_APP_ID": app_id,
        "TIDINGS_KAFKA_CLIENT_RACK": MARKER, "TIDINGS_KAFKA_CONFIG": str(properties),
        "TIDINGS_KAFKA_RECORD_CLIENTS": str(recorded), "PYTHONUNBUFFERED": "1",
        "TIDINGS_PROCESSING_GUARANTEE": guarantee,
    }
    port = free_port()
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(faust_report), "worker", APP, "--data-dir", str(tmp_path / "data"),
             "--metrics-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True,
        )
    try:
        wait_for(log, "Worker ready", worker)
        client = subprocess.run([sys.executable, "-c", CLIENT], env=env, cwd=ROOT, capture_output=True,
                                text=True, timeout=240)
        assert client.returncode == 0, client.stdout + client.stderr + log.read_text(errors="replace")[-4000:]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
            metrics = page.read().decode()
        # The CLI with nothing but --kafka-config: the file names the cluster and the marker too.
        cli_config = tmp_path / "cli.properties"
        cli_config.write_text(f"bootstrap.servers={kafka_bootstrap}\nclient.rack={MARKER}\n"
                              f"sasl.password={SECRET}\nsocket.keepalive.enable=true\n")
        cli_env = {key: value for key, value in env.items()
                   if key not in ("TIDINGS_BOOTSTRAP", "TIDINGS_KAFKA_CLIENT_RACK", "TIDINGS_KAFKA_CONFIG")}
        cli = subprocess.run(
            [sys.executable, "-m", "tidings.cli.main", "send", APP, "tally", "cli-1", "Add", '{"amount": 2}',
             "--kafka-config", str(cli_config), "--timeout", "60"],
            env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
    worker_log = log.read_text(errors="replace")

    built = records(recorded)
    sites = sites_by_pid(built)
    print("Kafka clients built, by process:")
    for pid, names in sorted(sites.items()):
        print(f"  pid {pid}:", *sorted(names), sep="\n    ")
    assert len(sites) == 3  # the worker, the program using a Client, `tidings send`
    publisher = ({"producer tidings.shell.runtime.transactions.TransactionalPublisher.__init__"}
                 if guarantee == EXACTLY_ONCE else {"producer tidings.shell.runtime.kafka.ConfluentPublisher.__init__"})
    assert sites[worker.pid] == publisher | {
        # a reply goes only to a topic the worker may write: it asks
        "admin tidings.shell.runtime.kafka.TopicCheck._describe",
        "admin tidings.shell.runtime.topics.apply_topics",
        "consumer tidings.shell.runtime.intake.Intake.start",
        "consumer tidings.shell.runtime.kafka.KafkaPartitionReader._client",
        "consumer tidings.shell.kinds.workflow.replies.RepliesReader._client",
        "consumer tidings.shell.kinds.workflow.sends.EventsTail._client",
        # the projection's signal goes through a requester of the worker's own
        "producer tidings.shell.runtime.requester.RequestSender.__init__",
        "consumer tidings.shell.runtime.replies.ReplyReader._consumer_at",
    }
    requester = {
        "producer tidings.shell.runtime.requester.RequestSender.__init__",
        "consumer tidings.shell.runtime.replies.ReplyReader._consumer_at",
    }
    (program, command) = sorted((names for pid, names in sites.items() if pid != worker.pid), key=len, reverse=True)
    assert program == requester | {
        "consumer tidings.shell.runtime.requester.OutcomeWatcher.__init__",
        "consumer tidings.shell.runtime.requester.OutcomeWatcher._new_consumer",
        "consumer tidings.shell.client.follower.TopicFollower._run",
        "consumer tidings.shell.kinds.workflow.journal.read_journal",
    }
    assert command == requester
    for client_built in built:
        config = client_built["config"]
        assert isinstance(config, dict)
        assert config["client.rack"] == MARKER, client_built
        assert config["socket.keepalive.enable"] == "true", client_built
        assert config["sasl.password"] == "[redacted]", client_built
    assert all(client_built["library"] == "confluent-kafka" for client_built in built)

    # Faust (aiokafka) opened no connection to Kafka, and no aiokafka client was alive at exit.
    assert json.loads(faust_report.read_text()) == {"connections": [], "at_exit": True, "clients": []}

    # The secret is nowhere to be read; the worker says its connection, redacted.
    assert "Kafka connection: bootstrap.servers=" in worker_log and "sasl.password=[redacted]" in worker_log
    for text in (worker_log, metrics, client.stdout, client.stderr, cli.stdout, cli.stderr, recorded.read_text()):
        assert SECRET not in text
    assert "[redacted]" in client.stdout  # repr(KafkaConnection)
