"""A real worker's /readyz, /livez and unknown paths (issue 19, "Must show").

- ``/readyz`` answers 503 while a restarted worker catches up a large journal (a tail its
  store lacks, written while it was down), with the definition it recovers as the reason,
  and 200 after; ``/livez`` answers 200 all the while, and an unknown path 404.
- ``/livez`` answers 200 while the worker's only broker is stopped for 30 s (a broker of
  this test's own: the shared one must not be stopped), and ``/readyz`` is 200 again once the
  broker is back.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from tidings.broker import LocalBroker
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.workflow.journal import Ended, Started
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually
from tests.integration import health_apps
from tests.integration.apps import build
from tests.integration.test_metrics import free_port
from tests.kafka_clients import kafka
from tests.workers import Workers, applied

#: Ended instances written into the workflow's journal while its worker is down: 2 records
#: each. A workflow's catch-up restores some 2,000 records a second here: a few seconds.
INSTANCES = 4_000
OUTAGE_S = 30.0


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def answering(port: int, path: str, status: int, timeout: float, workers: Workers) -> str:
    """Wait until ``path`` answers ``status``; return its body."""

    def check() -> str:
        try:
            got, body = get(port, path)
        except OSError as exc:  # not listening yet
            raise AssertionError(f"{path}: {exc}") from None
        assert got == status, f"{path}: {got} {body}"
        return body

    return assert_eventually(check, timeout=timeout, interval=0.2,
                             message=f"{path} never answered {status}:\n{workers.log_tail(40)}")


def write_ended_instances(bootstrap: str, journal: str, count: int) -> None:
    """``count`` instances that started and ended, each on its home partition (as another
    worker would have written them)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 2 * count + 1000, "compression.type": "lz4"})
    for n in range(count):
        instance = f"bulk-{n}"
        partition = partition_for(instance, health_apps.PARTITIONS)
        for seq, record in ((1, Started(1, "1", 1_700_000_000_000)),
                            (2, Ended(2, "finished", 1_700_000_000_001, "2"))):
            producer.produce(journal, avro.encode(WorkflowJournalEntry(instance, record)),
                             f"{instance}/{seq}".encode(), partition=partition)
        if n % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def test_readyz_is_503_while_a_restarted_worker_catches_up_a_large_journal_then_200(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> None:
    app = next(applied(kafka_bootstrap, health_apps.build(app_id)))
    port = free_port()
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.health_apps:app",
                      env={"TIDINGS_METRICS_PORT": str(port)})
    try:
        worker = workers.start("w1")
        assert answering(port, "/readyz", 200, 90, workers).startswith("ready: ")
        status, body = get(port, "/livez")
        assert status == 200 and body.startswith("alive"), body  # "alive (starting)" before the watch's first look
        for unknown in ("/", "/health", "/healthz", "/ready", "/metricsx"):
            assert get(port, unknown)[0] == 404, unknown
        worker.kill()

        journal = app.workflow_handle("echo").topics.journal
        began = time.monotonic()
        write_ended_instances(kafka_bootstrap, journal, INSTANCES)
        print(f"\n{2 * INSTANCES} journal records written in {time.monotonic() - began:.1f} s")

        workers.start("w1")  # the same data directory: a restart, its store lacks the tail
        seen: list[tuple[float, int, str]] = []
        began = time.monotonic()
        while time.monotonic() - began < 120:
            try:
                status, body = get(port, "/readyz")
                live = get(port, "/livez")[0]
            except OSError:  # not listening yet
                time.sleep(0.02)
                continue
            seen.append((time.monotonic() - began, status, body.strip()))
            assert live == 200, f"/livez {live} during the catch-up:\n{workers.log_tail(40)}"
            if status == 200:
                break
            time.sleep(0.05)
        recovering = [(at, body) for at, status, body in seen if status == 503 and "recovering" in body]
        print("\n".join(f"{at:6.2f} s  {status}  {body}" for at, status, body in seen[:3] + seen[-3:]))
        assert seen and seen[-1][1] == 200, f"never ready again:\n{workers.log_tail(40)}"
        assert recovering, f"no 503 while catching up: {seen[:5]}"
        assert any("workflow echo" in body for _, body in recovering), recovering[:5]
        assert all(status == 503 for _, status, _ in seen[:-1])
        assert get(port, "/nowhere")[0] == 404
        log = worker.log_path.read_text(errors="replace")
        assert "restoring workflow echo partition" in log
    finally:
        workers.kill_all()


def test_livez_stays_200_while_the_broker_is_down_for_30_s(app_id: str, tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "broker", heap="512m")
    workers: Workers | None = None
    try:
        bootstrap = broker.start()
        app = build(app_id)
        apply_topics(kafka(bootstrap), app.topic_specs(), out=lambda line: None)
        port = free_port()
        # A stall timeout shorter than the outage: a liveness clock running while no broker
        # answers would end the worker (exit 70) as well as fail /livez. No instance id: a
        # lone static member may be fenced by its own rejoin after a broker restart and exit
        # 70 (docs/operations.md, "Liveness"), which is not what this test is about.
        workers = Workers(bootstrap, app_id, tmp_path, env={"TIDINGS_METRICS_PORT": str(port),
                                                            "TIDINGS_STALL_TIMEOUT": "25"})
        worker = workers.start("w1")
        answering(port, "/readyz", 200, 90, workers)
        broker.stop()
        began = time.monotonic()
        answers: list[tuple[int, str]] = []  # every half second of the outage
        while time.monotonic() - began < OUTAGE_S:
            answers.append(get(port, "/livez"))
            time.sleep(0.5)
        assert worker.running, f"the worker exited during the outage:\n{workers.log_tail(40)}"
        assert {status for status, _ in answers} == {200}, answers
        print(f"\n/livez during the outage: {sorted(set(body.strip() for _, body in answers))}; "
              f"/readyz: {get(port, '/readyz')}")
        assert broker.start() == bootstrap
        answering(port, "/readyz", 200, 90, workers)
        assert get(port, "/livez")[0] == 200
        print(f"ready again {time.monotonic() - began - OUTAGE_S:.1f} s after the broker was started again")
    finally:
        if workers is not None:
            workers.kill_all()
        broker.stop()  # by the PID it recorded
