"""Broker failures on a three-node cluster, as Kafka's own replication tests exercise them
(issue 18, item 6).

On the local three-node cluster (``kafka_cluster``: three combined broker+controller JVMs,
replication factor 3, ``min.insync.replicas`` 2; ``tidings.broker.LocalCluster``) two apps
run under concurrent load while one failure happens:

- ``leader``: SIGKILL of the broker that leads the most of the apps' partitions, restarted
  on its data after 10 s;
- ``controller``: SIGKILL of the active KRaft controller (every node is a broker too, so this
  also kills a broker), restarted after 10 s;
- ``rolling``: a rolling restart of all three brokers, one at a time, each clean (SIGTERM)
  and waited back into every ISR before the next.

The load: the bank (six callers sending random transfers through one ``Client``, some to an
account that refuses them), and a workflow app whose ``errand`` takes an activity, a timer, a
signal and a child (``tests/integration/cluster_apps.py``), started and signalled
continuously. The test is the workers' supervisor, as a StatefulSet is: a worker that exits 70 is started
again and counted (a static member fenced by its own id after its coordinator moved); any
other exit fails the test, and nobody restarts a worker by hand.

Afterwards: the bank total is conserved, every confirmed transfer is stored once and
received or refunded exactly once (``tests/bank_chaos.violations``); every started workflow
has one outcome with the right value, and each activity body ran once per step its journal
holds. The outage each failure caused (the longest gap between two bank replies) is printed.

CI runs ``leader`` at least once, ``controller`` and ``rolling`` exactly once; ``--long`` runs
the other three pairs (see ``SHORT``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidings.broker import LocalCluster
from tidings.codec import avro
from tidings.core.workflow import StepCompleted, StepStarted
from tidings.core.workflow.journal import JournalRecord
from tidings.core.workflow.paths import child_id
from tidings.core.workflow_records import WorkflowJournalEntry, WorkflowOutcomeRecord
from tidings.errors import BrokerError, ReplyTimeout, WorkflowEnded
from tidings.shell.client.client import Client
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tidings.testing.topics import read_topic
from tests.bank_chaos import CALLERS, Progress, caller, drain, journal, open_accounts, violations
from tests.bank_workers import build as build_bank
from tests.integration.cluster_apps import build as build_errands
from tests.integration.workflow_apps import Calls
from tests.kafka_clients import kafka
from tests.kafka_cluster import restore
from tests.workers import AT_LEAST_ONCE, EXACTLY_ONCE, Workers

T = TypeVar("T")

#: (failure, guarantee) pairs CI runs; ``--long`` runs every pair.
# CI runs each failure once: the rolling restart under exactly-once (the shorter of its two
# variants here), the other two pairs under --long. Its run once ended in a librdkafka abort in this
# process (rd_kafka_enq_once_del_source_return): a coordinator admin request that timed out
# (librdkafka#4605; reproduced, see docs/cluster-local.md); LocalCluster no longer sends one.
# Since then both rolling variants passed every run here (about 2.5 min each on 2 cores since
# the journals are read once; 5 to 6.5 min before).
SHORT = [("leader", AT_LEAST_ONCE), ("controller", EXACTLY_ONCE), ("rolling", EXACTLY_ONCE)]
EVERY = [(failure, guarantee) for failure in ("leader", "controller", "rolling")
         for guarantee in (AT_LEAST_ONCE, EXACTLY_ONCE)]
STARTERS = 4  # concurrent loops that start and signal errands
DOWN_S = 10.0  # how long a killed node stays down


@dataclass
class _Load:
    """What the callers and the errand starter did."""

    progress: Progress = field(default_factory=Progress)
    confirmed: dict[str, tuple[str, str, Decimal]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    errands: list[str] = field(default_factory=list)


async def _retrying(call: Callable[[], Awaitable[T]]) -> T:
    """Call like a real caller: again on a timeout or a broker error (every call is idempotent)."""
    while True:
        try:
            return await call()
        except (ReplyTimeout, BrokerError):
            await asyncio.sleep(0.2)


async def _start_errands(errands: Any, bootstrap: str, stop: asyncio.Event, started: list[str],
                         starter: int) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        instance_id = f"e{starter}-{n}"
        await _retrying(lambda: errands.start(instance_id, f"order-{instance_id}", bootstrap=bootstrap))
        started.append(instance_id)
        # A signal resent after a timeout may arrive twice: the errand consumes one. A resend
        # that finds the errand ended was preceded by a delivered one (an errand ends only
        # after its "go"), so "ended" is its answer, not a failure.
        await _retrying(lambda: _signal_go(errands, instance_id, bootstrap))
        await asyncio.sleep(0.15)


async def _signal_go(errands: Any, instance_id: str, bootstrap: str) -> None:
    try:
        await errands.signal(instance_id, "go", 1, bootstrap=bootstrap)
    except WorkflowEnded:
        pass


async def _warmed_up(load: _Load, *, least: float = 5.0, most: float = 60.0) -> None:
    """Wait until the load is flowing (the thresholds the verdict needs, reached before the
    failure, so a slow start on a busy machine is not read as a failure's effect), at least
    ``least`` seconds and at most ``most``."""
    began = time.monotonic()
    await asyncio.sleep(least)
    while time.monotonic() - began < most and (len(load.confirmed) < 20 or len(load.errands) < 10):
        await asyncio.sleep(0.5)


def _fail(cluster: LocalCluster, failure: str, prefix: str) -> str:
    """Cause ``failure``; return what was done, for the printout."""
    if failure == "leader":
        node = cluster.busiest_leader(prefix)
        cluster.kill(node)
        time.sleep(DOWN_S)
        cluster.start_node(node)
        return f"SIGKILL of node {node} (the busiest leader), back after {DOWN_S:.0f} s"
    if failure == "controller":
        node = cluster.active_controller()
        cluster.kill(node)
        time.sleep(DOWN_S)
        cluster.start_node(node)
        return f"SIGKILL of node {node} (the active controller), back after {DOWN_S:.0f} s"
    for node in cluster.node_ids:
        cluster.stop_node(node)
        cluster.start_node(node)
        cluster.wait_in_sync(prefix, timeout=120)
        time.sleep(2.0)  # traffic on the full cluster between two restarts
    return f"rolling restart of nodes {', '.join(map(str, cluster.node_ids))}"


def _longest_gap(times: list[float], began: float, ended: float) -> float:
    """The longest stretch between two bank replies inside [began, ended]."""
    inside = [t for t in times if began <= t <= ended]
    points = [began, *inside, ended]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


class _Supervisor:
    """Restarts a worker that exited 70, as the chart's StatefulSet would, and counts it; any
    other exit fails the test.

    A static member whose group coordinator moved (its broker was killed) may be told by the
    new coordinator that it is fenced by its own ``group.instance.id``: librdkafka makes that
    fatal, and the worker exits 70 at once to be started again (issue 16).
    """

    def __init__(self, workers: list[WorkerProcess]) -> None:
        self.workers = workers
        self.restarts = 0

    def check(self) -> None:
        for worker in self.workers:
            if worker.running:
                continue
            code = worker.wait(0)
            if code != 70:
                raise AssertionError(f"a worker exited {code}, not 70:\n{worker.log_tail(60)}")
            self.restarts += 1
            worker.start()

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.check()
            await asyncio.sleep(0.2)


def _run(cluster: LocalCluster, app_id: str, tmp_path: Path, failure: str, guarantee: str) -> None:
    bootstrap = cluster.bootstrap
    bank, errands_app = build_bank(f"{app_id}b"), build_errands(f"{app_id}w", tmp_path / "calls")
    for app in (bank, errands_app):
        apply_topics(kafka(bootstrap), app.topic_specs(), out=lambda line: None)
    _assert_replicated(bootstrap, app_id)
    calls = Calls(tmp_path / "calls")
    bank_workers = Workers(bootstrap, f"{app_id}b", tmp_path / "bank", app_spec="tests.bank_workers:app",
                           guarantee=guarantee)
    errand_workers = Workers(bootstrap, f"{app_id}w", tmp_path / "errands",
                             app_spec="tests.integration.cluster_apps:app", guarantee=guarantee,
                             env={"TEST_CALLS_DIR": str(calls.directory)})
    supervisor = _Supervisor([bank_workers.start("w1", instance_id=f"{app_id}-b1"),
                              errand_workers.start("w1", instance_id=f"{app_id}-w1")])
    client = Client(bootstrap, app=bank)
    errands = errands_app.workflow_handle("errand")
    load = _Load()
    try:
        async def scenario() -> tuple[str, float, float]:
            await open_accounts(client)
            stop = asyncio.Event()
            tasks = [asyncio.create_task(caller(client, n, stop, load.progress, load.confirmed, load.refused))
                     for n in range(CALLERS)]
            unwatched = asyncio.Event()
            watching = asyncio.create_task(supervisor.watch(unwatched))
            tasks += [asyncio.create_task(_start_errands(errands, bootstrap, stop, load.errands, n))
                      for n in range(STARTERS)]
            await _warmed_up(load)
            began = time.monotonic()
            done = await asyncio.to_thread(_fail, cluster, failure, app_id)
            await asyncio.to_thread(cluster.wait_in_sync, app_id, timeout=120)
            await asyncio.sleep(5.0)  # traffic on the healed cluster
            ended = time.monotonic()
            stop.set()
            finished, _ = await asyncio.wait(tasks, timeout=120)
            unwatched.set()
            await watching
            assert len(finished) == len(tasks), "callers still waiting for replies"
            for task in finished:
                task.result()
            return done, _longest_gap(load.progress.at, began, ended), ended - began

        done, gap, lasted = asyncio.run(scenario())
        print(f"\n{guarantee}, {done}: {len(load.confirmed)} transfers, {len(load.errands)} errands; "
              f"longest gap between two bank replies {gap:.2f} s over {lasted:.0f} s")
        drain(bootstrap, bank, load.confirmed)
        events = journal(bootstrap, bank)
        assert len(load.confirmed) >= 20 and len(load.errands) >= 10, (
            f"too little load to say anything: {len(load.confirmed)} transfers, {len(load.errands)} errands")
        assert violations(events, load.confirmed) == []
        values = asyncio.run(_values(errands, load.errands, bootstrap))
        assert values == {i: len(f"order-{i}") + 2 for i in load.errands}, "an errand ended wrongly"
        _assert_one_outcome_each(bootstrap, errands.topics.outcomes, load.errands)
        ran_twice = _assert_activities_as_journaled(bootstrap, errands_app, calls, load.errands)
        supervisor.check()
        print(f"{ran_twice} activity bodies ran again (a rebalance after the outage); "
              f"{supervisor.restarts} worker restarts after exit 70")
    except BaseException:
        print(bank_workers.log_tail(60), errand_workers.log_tail(60))
        raise
    finally:
        client.close()
        errands.close()
        bank_workers.kill_all()
        errand_workers.kill_all()
        try:
            # A failure in the middle of a rolling restart leaves a node down: the session's
            # later tests (tests/integration/test_cluster_broker.py) need all three in sync.
            restore(cluster)
        finally:
            _delete_topics(bootstrap, app_id)


def _delete_topics(bootstrap: str, prefix: str) -> None:
    """Delete both apps' topics (``{app_id}b.*``, ``{app_id}w.*``): the cluster lives on."""
    admin = kafka(bootstrap).admin()
    ours = [name for name in admin.list_topics(timeout=10).topics if name.startswith(prefix)]
    for future in admin.delete_topics(ours, operation_timeout=30).values() if ours else ():
        future.result(60)


def _assert_replicated(bootstrap: str, prefix: str) -> None:
    """Every topic of the apps has three replicas and ``min.insync.replicas`` 2."""
    def listed() -> dict[str, Any]:
        # The broker asked may not have the new topics' metadata yet (seen right after a
        # node's restart): ask again until it has.
        metadata = kafka(bootstrap).admin().list_topics(timeout=10)
        found = {name: t for name, t in metadata.topics.items() if name.startswith(prefix)}
        assert found, "no topic was created"
        return found

    ours = assert_eventually(listed, timeout=30, interval=0.5)
    thin = [name for name, t in ours.items() if any(len(p.replicas) != 3 for p in t.partitions.values())]
    assert thin == [], f"topics without three replicas: {thin[:5]}"


async def _values(errands: Any, ids: list[str], bootstrap: str) -> dict[str, Any]:
    results = await asyncio.gather(*(errands.value(i, 120, bootstrap=bootstrap) for i in ids))
    return dict(zip(ids, results, strict=True))


def _assert_one_outcome_each(bootstrap: str, topic: str, ids: list[str]) -> None:
    """Each errand's outcome record says one thing (a record written twice says it twice)."""
    said: dict[str, set[bytes]] = defaultdict(set)
    for record in read_topic(bootstrap, topic):
        said[(record.key or b"").decode()].add(record.value or b"")
    missing = [i for i in ids if i not in said]
    several = [i for i in ids if len(said.get(i, ())) > 1]
    assert missing == [] and several == [], f"no outcome: {missing[:5]}; several outcomes: {several[:5]}"
    for instance_id in ids[:3]:
        avro.decode_as(next(iter(said[instance_id])), WorkflowOutcomeRecord)  # they are outcomes


def _assert_activities_as_journaled(bootstrap: str, app: Any, calls: Calls, ids: list[str]) -> int:
    """Each activity step the journals hold as completed ran, and no activity body ran for a
    step no journal holds; returns how many bodies ran more than once for their step.

    The journal keeps no attempts (an activity that ran again after a rebalance, under at
    least once, leaves the same two records), so a second run is counted and printed.
    """
    journaled: set[str] = set()
    children: list[str] = []
    journals = {name: _journals(bootstrap, app.workflow_handle(name).topics.journal)
                for name in ("errand", "piece")}

    def activities_of(name: str, instance_id: str) -> None:
        records = journals[name].get(instance_id, [])
        started = {r.path: r.kind for r in records if isinstance(r, StepStarted)}
        journaled.update(f"{name}/{instance_id}/{r.path}" for r in records
                         if isinstance(r, StepCompleted) and started.get(r.path) == "activity")
        children.extend(child_id(instance_id, path) for path, kind in started.items()
                        if kind.startswith("child"))

    for instance_id in ids:
        activities_of("errand", instance_id)
    for instance_id in sorted(set(children)):
        activities_of("piece", instance_id)
    ran = Counter(key for activity in ("tally", "part") for key in calls.keys(activity))
    assert len(journaled) == 2 * len(ids), f"{len(journaled)} activity steps completed for {len(ids)} errands"
    unjournaled = sorted(set(ran) - journaled)
    never_ran = sorted(journaled - set(ran))
    assert unjournaled == [] and never_ran == [], (
        f"ran without a journaled step: {unjournaled[:5]}; journaled but never ran: {never_ran[:5]}")
    return sum(n - 1 for n in ran.values() if n > 1)


def _journals(bootstrap: str, topic: str) -> dict[str, list[JournalRecord]]:
    """Every instance's journal in ``topic``, in seq order, from one read of the topic.

    What ``WorkflowHandle.journal`` returns for each (the first record of each
    ``{instance_id}/{seq}`` key in offset order), without a consumer and a partition read per
    instance: that took 2 to 6 minutes for 200 to 500 errands and their children here.
    """
    first: dict[tuple[str, int], JournalRecord] = {}
    for stored in read_topic(bootstrap, topic):
        instance_id, _, seq = (stored.key or b"").decode().rpartition("/")
        if seq.isdigit() and (instance_id, int(seq)) not in first:
            entry = avro.decode_as(stored.value or b"", WorkflowJournalEntry)
            assert (entry.instance_id, entry.record.seq) == (instance_id, int(seq)), stored.key
            first[(instance_id, int(seq))] = entry.record
    journals: dict[str, list[JournalRecord]] = defaultdict(list)
    for (instance_id, _seq), record in sorted(first.items()):
        journals[instance_id].append(record)
    return journals


@pytest.mark.parametrize(("failure", "guarantee"), SHORT, ids=[f"{f}-{g[:3]}" for f, g in SHORT],
                         indirect=["guarantee"])
def test_a_broker_failure_on_three_nodes_loses_and_repeats_nothing(
    kafka_cluster: LocalCluster, app_id: str, tmp_path: Path, failure: str, guarantee: str
) -> None:
    _run(kafka_cluster, app_id, tmp_path, failure, guarantee)


@pytest.mark.long
@pytest.mark.parametrize(("failure", "guarantee"), [p for p in EVERY if p not in SHORT],
                         ids=[f"{f}-{g[:3]}" for f, g in EVERY if (f, g) not in SHORT], indirect=["guarantee"])
def test_every_broker_failure_under_both_guarantees(
    kafka_cluster: LocalCluster, app_id: str, tmp_path: Path, failure: str, guarantee: str
) -> None:
    _run(kafka_cluster, app_id, tmp_path, failure, guarantee)
