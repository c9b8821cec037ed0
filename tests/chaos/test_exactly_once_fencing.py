"""Exactly-once fences a zombie worker: real workers, the real broker (issue 11, "Must show").

A zombie is a worker that lost its partitions without noticing (a long GC pause, a frozen
VM, a network partition) and still writes as their owner. At least once, tidings notices its
records afterwards (offset gaps, ``PartitionOwner(foreign_writers=...)``) and readers keep the
first record at each version. Exactly once, Kafka refuses the zombie's transaction: its
offsets carry the group generation it had (KIP-447), the group coordinator knows a newer
one, so nothing the zombie wrote becomes visible to ``read_committed`` readers, and the
zombie learns it was fenced and exits (status 70) to rejoin as a new member.

The zombie is made for real: worker A starts deciding a command that blocks its event loop
(``tests/integration/stall_apps.py``), the test freezes it (SIGSTOP) inside that decide, the
group's session timeout (6 s) gives its partition to worker B, B decides the same command
(A committed nothing), and A is thawed (SIGCONT) to finish its decide and write.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.codec import avro
from tidings.core.records import CommandEnvelope, EventEnvelope
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tidings.testing.topics import group_assignment, read_topic
from tests.integration.stall_apps import MARKER, Note, Noted, Stall, build
from tests.workers import EXACTLY_ONCE, Workers, applied, topic_ends
from tests.kafka_clients import kafka

FENCED_EXIT = 70  # the worker's "restart me" status


@pytest.fixture
def stall_app(kafka_bootstrap: str, app_id: str) -> Iterator[App]:
    yield from applied(kafka_bootstrap, build(app_id))


@pytest.fixture
def stall_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.stall_apps:app",
                      guarantee=EXACTLY_ONCE)
    yield started
    for worker in started.started:
        if worker.pid is not None and worker.running:
            try:
                os.kill(worker.pid, signal.SIGCONT)  # a stopped process ignores SIGKILL's wait
            except ProcessLookupError:
                pass
    started.kill_all()


def send_raw(bootstrap: str, app: App, aggregate_id: str, command: Stall | Note, command_id: str) -> None:
    """Produce a command as any producer would: an Avro envelope keyed by the aggregate id."""
    envelope = CommandEnvelope(
        command_id=command_id, correlation_id=command_id, aggregate_id=aggregate_id,
        type=type(command).__name__, payload=command.model_dump_json().encode(),
        timestamp_ms=int(time.time() * 1000),
    )
    producer = kafka(bootstrap).producer()
    producer.produce(f"{app.name}.aggregate.staller.commands", avro.encode(envelope), aggregate_id.encode())
    assert producer.flush(30) == 0


def events(bootstrap: str, app: App, isolation: str) -> list[tuple[str, int, str, dict]]:
    """(aggregate id, version, type, payload) of every event a reader of ``isolation`` sees."""
    found = []
    for record in read_topic(bootstrap, f"{app.name}.aggregate.staller.events", isolation=isolation):
        event = avro.decode_as(record.value, EventEnvelope)
        found.append((event.aggregate_id, event.version, event.type, json.loads(event.payload)))
    return found


def wait_for_log(worker: WorkerProcess, text: str, timeout: float = 60) -> None:
    assert_eventually(lambda: text in worker.log_tail(2000), timeout=timeout, interval=0.1,
                      message=f"{text!r} in {worker.log_path.name}:\n{worker.log_tail()}")


def test_a_zombie_worker_is_fenced_and_nothing_it_wrote_becomes_visible(
    kafka_bootstrap: str, stall_app: App, stall_workers: Workers
) -> None:
    commands = f"{stall_app.name}.aggregate.staller.commands"
    zombie = stall_workers.start("a")
    wait_for_log(zombie, "Worker ready")
    assert zombie.pid is not None

    # A starts deciding X's Stall (3 s with its loop blocked) and is frozen inside it.
    send_raw(kafka_bootstrap, stall_app, "x", Stall(tag="x", seconds=3), "stall-x")
    wait_for_log(zombie, f"{MARKER} x pid={zombie.pid}")
    os.kill(zombie.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        owner = stall_workers.start("b")
        wait_for_log(owner, "Worker ready", timeout=90)

        def b_alone_owns_the_partition() -> bool:
            assignment = group_assignment(kafka_bootstrap, stall_app.name, commands)
            assert len(assignment) == 1 and list(assignment.values()) == [{0}], assignment
            return True

        # A's session (6 s) expires; the group gives everything to B.
        assert_eventually(b_alone_owns_the_partition, timeout=60, interval=0.5)
        # A committed no offset, so B reads the Stall again and decides it itself.
        wait_for_log(owner, f"{MARKER} x pid={owner.pid}")
        assert_eventually(lambda: [e[:3] for e in events(kafka_bootstrap, stall_app, "read_committed")]
                          == [("x", 1, "Stalled")], timeout=60, interval=0.2,
                          message=f"B's event committed\n{owner.log_tail()}")
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    print(f"\nA was frozen {time.monotonic() - frozen_at:.1f} s")

    # A finishes its decide, writes as the owner it believes it is, and is refused.
    code = zombie.wait(60)
    assert code == FENCED_EXIT, f"A's exit status {code}\n{zombie.log_tail()}"
    assert "this worker was fenced" in zombie.log_tail(2000), zombie.log_tail()

    committed = events(kafka_bootstrap, stall_app, "read_committed")
    assert [(a, v, t) for a, v, t, _ in committed] == [("x", 1, "Stalled")]
    assert committed[0][3]["worker"] == owner.pid  # B's, not A's
    written = events(kafka_bootstrap, stall_app, "read_uncommitted")
    zombie_copies = [e for e in written if e[3].get("worker") == zombie.pid]
    print(f"read_uncommitted holds {len(written)} events; A's aborted copies: {zombie_copies} "
          "(there is one only if A's produce reached the broker before it was fenced)")
    # Whatever A wrote is aborted, not pending: no transaction of A holds readers back.
    assert_eventually(lambda: topic_ends(kafka_bootstrap, f"{stall_app.name}.aggregate.staller.events",
                                         "read_committed")
                      == topic_ends(kafka_bootstrap, f"{stall_app.name}.aggregate.staller.events",
                                    "read_uncommitted"), timeout=15)

    # B goes on: the next command of X is answered and continues B's versions.
    client = stall_app.client(kafka_bootstrap)
    reply = asyncio.run(client.send_envelope("staller", "x", Note(tag="after"), 30))
    assert reply.status == "accepted" and reply.version == 2, reply
    assert asyncio.run(client.send("staller", "y", Note(tag="y"), 30)) == Noted(tag="y")
    assert owner.running
