"""Prometheus metrics of one worker: what goes in, what comes out, and where the time goes.

One ``Metrics`` per worker owns its own ``CollectorRegistry`` (no module-level registry, so
two workers in one process, or a test next to a worker, never share counts). The worker
wraps two seams with it and nothing else changes in its code:

- ``instrument(kind, name, input, start)`` wraps an ``Input.start``: records in per topic,
  the batch size, the time ``start`` took to decide the batch, and the time its ``finish``
  took to commit it;
- ``counting(publisher)`` wraps the worker's ``Publisher``: records out per topic.

The kinds report the rest through the ``Runtime`` they are opened with (``runtime.metrics``):
dead letters, command → reply and workflow start → outcome latency, activity attempts,
partition recovery; their instance gauges are read only when Prometheus scrapes
(``register_instances``), so keeping them costs nothing per record. Everything on the hot
path is counted once per batch where the batch allows it, through label children looked up
once and cached (``labels()`` hashes its arguments and takes a lock on every call).

Every metric is listed in docs/operations.md ("Metrics"). The worker serves the registry on
its HTTP port beside ``/livez`` and ``/readyz`` (``health.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, GCCollector, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .io import Delivered, Incoming, Outgoing, Publisher

log = logging.getLogger(__name__)

Finish = Callable[[], Awaitable[None]]
Start = Callable[[list[Incoming]], Awaitable[Finish]]
#: ``sample()`` -> {state: count}, called on scrape (from the HTTP server's thread).
InstanceSample = Callable[[], Mapping[str, int]]

#: Records per batch: one record when idle, up to the pipeline's 2,000 under load.
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
#: Seconds, from 100 µs (a small batch decided in memory) to 10 s (a catch-up, a stall).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Seconds, for things that take longer: a workflow's run, a partition's catch-up.
RUN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
               30.0, 60.0, 300.0, 900.0, 3600.0)


class Metrics:
    """Every metric of one worker, in its own registry.

    Args:
        monotonic: Seconds for durations (``time.perf_counter``).
        wall: Seconds since the epoch, to compare with Kafka timestamps and journaled times.
    """

    def __init__(
        self,
        *,
        monotonic: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._monotonic = monotonic
        self._wall = wall
        r = self.registry
        # process_cpu_seconds_total, resident memory, open fds: what an operator (and the
        # bench's CPU per record) reads of the worker process as a whole.
        ProcessCollector(registry=r)
        # python_gc_*: the collector's work per generation (runtime/collector.py's policy).
        GCCollector(registry=r)
        self.records_in = Counter(
            "tidings_records_in", "Records an agent took from a topic (every record, dead-lettered ones too).",
            ["topic", "kind", "name"], registry=r)
        self.records_out = Counter(
            "tidings_records_out", "Records the worker produced, per topic (handed to the producer).",
            ["topic"], registry=r)
        self.dead_letters = Counter(
            "tidings_dead_letters", "Records dead-lettered, by the definition that refused them and "
            "the error's class name.", ["kind", "name", "reason"], registry=r)
        self.batch_records = Histogram(
            "tidings_batch_records", "Records per batch an input decided.",
            ["kind", "name", "input"], buckets=BATCH_BUCKETS, registry=r)
        self.decide_seconds = Histogram(
            "tidings_decide_seconds", "Seconds an input took to decide a batch and start its writes.",
            ["kind", "name", "input"], buckets=LATENCY_BUCKETS, registry=r)
        self.commit_seconds = Histogram(
            "tidings_commit_seconds", "Seconds a batch's completion took: writes acknowledged, "
            "RocksDB written.", ["kind", "name", "input"], buckets=LATENCY_BUCKETS, registry=r)
        self.command_reply_seconds = Histogram(
            "tidings_command_reply_seconds", "Seconds from a command record's Kafka timestamp to its "
            "reply being produced.", ["aggregate"], buckets=LATENCY_BUCKETS, registry=r)
        self.workflow_run_seconds = Histogram(
            "tidings_workflow_run_seconds", "Seconds from a workflow instance's start to its outcome "
            "being published.", ["workflow"], buckets=RUN_BUCKETS, registry=r)
        self.consumer_lag = Gauge(
            "tidings_consumer_lag", "Records between the consumer's position and the partition's end.",
            ["topic", "partition"], registry=r)
        self.activity_attempts = Counter(
            "tidings_activity_attempts", "Activity attempts that ended (succeeded, failed or timed out).",
            ["workflow", "activity"], registry=r)
        self.activity_failures = Counter(
            "tidings_activity_failures", "Activity attempts that raised or timed out.",
            ["workflow", "activity"], registry=r)
        self.partition_recovery_seconds = Histogram(
            "tidings_partition_recovery_seconds", "Seconds a partition's catch-up took before its "
            "first record could be decided.", ["kind", "name"], buckets=RUN_BUCKETS, registry=r)
        self.partition_recovered_seconds = Gauge(
            "tidings_partition_recovered_seconds", "Seconds the last catch-up of the partition took.",
            ["kind", "name", "partition"], registry=r)
        self.workflow_replayed_records = Counter(
            "tidings_workflow_replayed_records", "Journal records a worker read back to rebuild workflow "
            "instances by replay (after a restart, an eviction); a run that continued as new is not among "
            "them.", ["workflow"], registry=r)
        self.workflow_runs_continued = Counter(
            "tidings_workflow_runs_continued", "Workflow runs that continued as new (their records tombstoned).",
            ["workflow"], registry=r)
        self.transactions = Counter(
            "tidings_transactions", "Kafka transactions ended, by outcome (committed, aborted).",
            ["outcome"], registry=r)
        self.transaction_seconds = Histogram(
            "tidings_transaction_commit_seconds", "Seconds from the start of a transaction's "
            "commit (offsets sent with the group's metadata) to its end.", buckets=LATENCY_BUCKETS,
            registry=r)
        self.intake_stalled = Gauge(
            "tidings_intake_stalled_seconds", "Seconds the intake has made no progress with records "
            "waiting while the brokers answer (0 when healthy); the worker exits 70 past its stall "
            "timeout.", registry=r)
        self._instances = _InstancesCollector()
        r.register(self._instances)
        # Label children, looked up once: labels() costs a hash, a lock and a dict lookup.
        self._children: dict[tuple[Any, ...], Any] = {}

    # -- the worker's two seams --------------------------------------------------------

    def instrument(self, kind: str, name: str, input_name: str, start: Start) -> Start:
        """Wrap an ``Input.start``: count records in, time the decide and the commit.

        Args:
            kind: The hosted definition's kind (``"aggregate"``).
            name: The definition's name.
            input_name: The input's name (``Input.name``; a definition may have several).
            start: The input's ``start``.

        Returns:
            A ``start`` that does the same and measures it.
        """
        batch_records = self.batch_records.labels(kind, name, input_name)
        decide_seconds = self.decide_seconds.labels(kind, name, input_name)
        commit_seconds = self.commit_seconds.labels(kind, name, input_name)
        records_in = self.records_in
        per_topic: dict[str, Any] = {}
        clock = self._monotonic

        async def instrumented(batch: list[Incoming]) -> Finish:
            counts: dict[str, int] = {}
            for record in batch:
                counts[record.topic] = counts.get(record.topic, 0) + 1
            for topic, count in counts.items():
                child = per_topic.get(topic)
                if child is None:
                    child = per_topic[topic] = records_in.labels(topic, kind, name)
                child.inc(count)
            batch_records.observe(len(batch))
            began = clock()
            finish = await start(batch)
            decide_seconds.observe(clock() - began)

            async def timed_finish() -> None:
                began = clock()
                await finish()
                commit_seconds.observe(clock() - began)

            return timed_finish

        return instrumented

    def counting(self, publisher: Publisher) -> Publisher:
        """Wrap ``publisher`` so every record it is given is counted as out, per topic."""
        return CountingPublisher(publisher, self.records_out)

    # -- what the kinds report ---------------------------------------------------------

    def dead_letter(self, kind: str, name: str, error: BaseException) -> None:
        """Count a record of definition ``name`` of ``kind`` dead-lettered with ``error``."""
        self._child(self.dead_letters, kind, name, type(error).__name__).inc()

    def replied(self, aggregate: str, command_timestamps_ms: Iterable[int | None]) -> None:
        """Observe command → reply latency for replies produced now (one per command timestamp)."""
        histogram = self._child(self.command_reply_seconds, aggregate)
        now_ms = self._wall() * 1000
        for timestamp in command_timestamps_ms:
            if timestamp is not None and timestamp > 0:
                histogram.observe(max(0.0, (now_ms - timestamp) / 1000))

    def workflow_ended(self, workflow: str, started_ms: Iterable[int]) -> None:
        """Observe start → outcome latency of instances whose outcomes are published now."""
        histogram = self._child(self.workflow_run_seconds, workflow)
        now_ms = self._wall() * 1000
        for started in started_ms:
            histogram.observe(max(0.0, (now_ms - started) / 1000))

    def workflow_replayed(self, workflow: str, records: int) -> None:
        """Count the journal records read back to replay one instance."""
        self._child(self.workflow_replayed_records, workflow).inc(records)

    def workflow_continued(self, workflow: str) -> None:
        """Count a run that continued as new."""
        self._child(self.workflow_runs_continued, workflow).inc()

    def activity_attempt(self, workflow: str, activity: str, *, failed: bool) -> None:
        """Count an activity attempt that ended; ``failed``: it raised or timed out."""
        self._child(self.activity_attempts, workflow, activity).inc()
        if failed:
            self._child(self.activity_failures, workflow, activity).inc()

    def recovery(self, kind: str, name: str) -> Callable[[int, float], None]:
        """Return ``recovered(partition, seconds)``, for ``PartitionOwner(on_recovered=...)``."""
        histogram = self.partition_recovery_seconds.labels(kind, name)

        def recovered(partition: int, seconds: float) -> None:
            histogram.observe(seconds)
            self._child(self.partition_recovered_seconds, kind, name, str(partition)).set(seconds)

        return recovered

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Set the consumer lag of ``topic``/``partition`` (the intake calls this)."""
        self._child(self.consumer_lag, topic, str(partition)).set(lag)

    def set_stalled(self, seconds: float) -> None:
        """Set how long the intake has been stalled (the liveness watch calls this)."""
        self.intake_stalled.set(seconds)

    def transaction(self, outcome: str, seconds: float | None = None) -> None:
        """Count a transaction that ended with ``outcome`` (``"committed"``, ``"aborted"``);
        ``seconds``: how long its commit took."""
        self._child(self.transactions, outcome).inc()
        if seconds is not None:
            self.transaction_seconds.observe(seconds)

    def register_instances(self, kind: str, name: str, sample: InstanceSample) -> None:
        """Report ``tidings_instances{kind,name,state}`` from ``sample()`` on every scrape.

        ``sample`` runs in the HTTP server's thread while the event loop goes on: it must
        only read (``len()``, a copy of a dict's values) and may fail on a dict that changed
        size meanwhile; that scrape then leaves this definition's gauges out.
        """
        self._instances.add(kind, name, sample)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


class CountingPublisher:
    """A ``Publisher`` that counts the records it is given per topic, then hands them on.

    Anything else asked of it (``close``, a transactional publisher's methods) goes to the
    wrapped publisher.
    """

    def __init__(self, publisher: Publisher, records_out: Counter) -> None:
        self.wrapped = publisher
        self._records_out = records_out
        self._per_topic: dict[str, Any] = {}

    def send(self, records: Sequence[Outgoing]) -> Awaitable[list[Delivered]]:
        self._count(records)
        return self.wrapped.send(records)

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        self._count(records)
        return await self.wrapped.publish(records)

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        self._count(records)
        self.wrapped.publish_later(records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def _count(self, records: Sequence[Outgoing]) -> None:
        if not records:
            return
        first = records[0].topic
        if all(record.topic == first for record in records):  # the common case: one journal
            self._topic(first).inc(len(records))
            return
        counts: dict[str, int] = {}
        for record in records:
            counts[record.topic] = counts.get(record.topic, 0) + 1
        for topic, count in counts.items():
            self._topic(topic).inc(count)

    def _topic(self, topic: str) -> Any:
        child = self._per_topic.get(topic)
        if child is None:
            child = self._per_topic[topic] = self._records_out.labels(topic)
        return child


class _InstancesCollector(Collector):
    """``tidings_instances``: asks each registered definition for its counts on scrape."""

    def __init__(self) -> None:
        self._samples: list[tuple[str, str, InstanceSample]] = []

    def add(self, kind: str, name: str, sample: InstanceSample) -> None:
        self._samples.append((kind, name, sample))

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for kind, name, sample in list(self._samples):
            try:
                counts = dict(sample())
            except RuntimeError:  # a dict changed size under the copy: skip, next scrape has it
                continue
            for state, count in sorted(counts.items()):
                family.add_metric([kind, name, state], count)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "tidings_instances", "Instances this worker holds, by state (cached in memory, running, parked).",
            labels=["kind", "name", "state"])
