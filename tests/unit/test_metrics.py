"""``shell/runtime/metrics.py``: what a worker's Prometheus endpoint counts and how it times it.

No broker: the seams are driven directly (an ``Input.start``, a ``Publisher``), clocks are
fakes, and the text exposition is read back with prometheus_client's own parser.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidings.cli import worker as worker_cli
from tidings.errors import DecodeError, SchemaError
from tidings.shell.runtime.hosting import Runtime
from tidings.shell.runtime.io import Delivered, Incoming, Outgoing
from tidings.shell.runtime.metrics import Metrics
from tidings.shell.runtime.owner import PartitionOwner
from tidings.shell.runtime.connection import KafkaConnection

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(metrics: Metrics) -> Samples:
    """Every sample of the registry's text exposition: (name, labels) -> value."""
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(metrics: Metrics, metric: str, /, **labels: str) -> float | None:
    return samples(metrics).get((metric, frozenset(labels.items())))


class Ticks:
    """A clock that returns the next of the given times on each call."""

    def __init__(self, *times: float) -> None:
        self._times = list(times)

    def __call__(self) -> float:
        return self._times.pop(0)


class Recording:
    """A ``Publisher`` that keeps what it was given."""

    def __init__(self) -> None:
        self.sent: list[Outgoing] = []
        self.closed = False

    async def _delivered(self, records: Sequence[Outgoing]) -> list[Delivered]:
        return [Delivered(r.topic, 0, n) for n, r in enumerate(records)]

    def send(self, records: Sequence[Outgoing]) -> asyncio.Future[list[Delivered]]:
        self.sent.extend(records)
        return asyncio.ensure_future(self._delivered(records))

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        self.sent.extend(records)
        return await self._delivered(records)

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        self.sent.extend(records)

    def close(self) -> None:
        self.closed = True


def record(topic: str, offset: int = 0, timestamp_ms: int | None = None) -> Incoming:
    return Incoming(topic, 0, offset, b"k", b"v", {}, timestamp_ms)


def test_instrument_counts_records_per_topic_and_times_decide_and_commit() -> None:
    metrics = Metrics(monotonic=Ticks(10.0, 10.25, 20.0, 20.5))
    seen: list[list[Incoming]] = []
    finished: list[bool] = []

    async def start(batch: list[Incoming]):  # type: ignore[no-untyped-def]
        seen.append(batch)

        async def finish() -> None:
            finished.append(True)

        return finish

    instrumented = metrics.instrument("saga", "transfer", "saga-transfer", start)
    batch = [record("a"), record("b", 1), record("a", 2)]

    async def run() -> None:
        finish = await instrumented(batch)
        assert not finished  # deciding does not complete the batch
        await finish()

    asyncio.run(run())
    assert seen == [batch] and finished == [True]
    labels = {"kind": "saga", "name": "transfer"}
    assert value(metrics, "tidings_records_in_total", topic="a", **labels) == 2
    assert value(metrics, "tidings_records_in_total", topic="b", **labels) == 1
    by_input = {**labels, "input": "saga-transfer"}
    assert value(metrics, "tidings_batch_records_sum", **by_input) == 3
    assert value(metrics, "tidings_batch_records_bucket", **by_input, le="2.0") == 0
    assert value(metrics, "tidings_batch_records_bucket", **by_input, le="5.0") == 1
    assert value(metrics, "tidings_decide_seconds_sum", **by_input) == 0.25
    assert value(metrics, "tidings_commit_seconds_sum", **by_input) == 0.5
    assert value(metrics, "tidings_commit_seconds_bucket", **by_input, le="0.5") == 1
    assert value(metrics, "tidings_commit_seconds_bucket", **by_input, le="0.25") == 0


def test_counting_publisher_counts_records_out_per_topic_and_hands_them_on() -> None:
    metrics = Metrics()
    inner = Recording()
    publisher = metrics.counting(inner)
    one = [Outgoing("events", b"k", b"v")] * 3
    mixed = [Outgoing("events", b"k", b"v"), Outgoing("replies", b"k", b"v"), Outgoing("events", None, None)]

    async def run() -> list[Delivered]:
        delivered = await publisher.send(one)
        await publisher.publish(mixed)
        publisher.publish_later([Outgoing("replies", b"k", b"v")])
        publisher.publish_later([])
        return delivered

    delivered = asyncio.run(run())
    assert [d.offset for d in delivered] == [0, 1, 2]
    assert inner.sent == one + mixed + [Outgoing("replies", b"k", b"v")]
    assert value(metrics, "tidings_records_out_total", topic="events") == 5
    assert value(metrics, "tidings_records_out_total", topic="replies") == 2
    publisher.close()  # type: ignore[attr-defined]  # anything else goes to the wrapped one
    assert inner.closed


def test_a_scoped_runtime_counts_its_dead_letters_under_its_definition_and_the_error_class(
    tmp_path: Path,
) -> None:
    runtime = Runtime(connection=KafkaConnection(""), data_dir=tmp_path, partitions=1, publisher=Recording(),
                      deadletter_topic="app.deadletter")
    aggregate, workflow = runtime.scoped("aggregate", "account"), runtime.scoped("workflow", "enrich")
    aggregate.dead_letter(record("cmds"), DecodeError("not avro"))
    aggregate.dead_letter(record("cmds", 1), DecodeError("not avro either"))
    letter = workflow.dead_letter(record("inbox"), SchemaError("unknown type"))

    assert letter.topic == "app.deadletter"
    assert aggregate.metrics is runtime.metrics and aggregate.publisher is runtime.publisher
    assert value(runtime.metrics, "tidings_dead_letters_total", kind="aggregate", name="account",
                 reason="DecodeError") == 2
    assert value(runtime.metrics, "tidings_dead_letters_total", kind="workflow", name="enrich",
                 reason="SchemaError") == 1


def test_scoped_runtimes_share_what_closes_with_the_worker(tmp_path: Path) -> None:
    runtime = Runtime(connection=KafkaConnection(""), data_dir=tmp_path, partitions=1, publisher=Recording(),
                      deadletter_topic="app.deadletter")
    closed: list[str] = []
    runtime.scoped("aggregate", "account").on_close(lambda: closed.append("store"))
    runtime.close()
    assert closed == ["store"]


def test_reply_and_workflow_latency_are_measured_from_the_kafka_and_journal_timestamps() -> None:
    metrics = Metrics(wall=Ticks(100.0, 200.0))
    metrics.replied("account", [99_900, None, 99_990])  # a command without a timestamp is left out
    metrics.workflow_ended("enrich", [197_500])
    assert value(metrics, "tidings_command_reply_seconds_count", aggregate="account") == 2
    assert value(metrics, "tidings_command_reply_seconds_sum", aggregate="account") == pytest.approx(0.11)
    assert value(metrics, "tidings_workflow_run_seconds_sum", workflow="enrich") == 2.5


def test_activities_recovery_lag_and_transactions_are_counted_with_their_labels() -> None:
    metrics = Metrics()
    metrics.activity_attempt("enrich", "fetch", failed=True)
    metrics.activity_attempt("enrich", "fetch", failed=False)
    recovered = metrics.recovery("workflow", "enrich")
    recovered(3, 1.5)
    recovered(3, 0.5)
    metrics.set_lag("app.workflow.enrich.inbox", 2, 42)
    metrics.transaction("committed")
    metrics.transaction("committed")
    metrics.transaction("aborted")

    fetch = {"workflow": "enrich", "activity": "fetch"}
    assert value(metrics, "tidings_activity_attempts_total", **fetch) == 2
    assert value(metrics, "tidings_activity_failures_total", **fetch) == 1
    assert value(metrics, "tidings_partition_recovery_seconds_count", kind="workflow", name="enrich") == 2
    assert value(metrics, "tidings_partition_recovered_seconds", kind="workflow", name="enrich",
                 partition="3") == 0.5
    assert value(metrics, "tidings_consumer_lag", topic="app.workflow.enrich.inbox", partition="2") == 42
    assert value(metrics, "tidings_transactions_total", outcome="committed") == 2
    assert value(metrics, "tidings_transactions_total", outcome="aborted") == 1


def test_instance_gauges_are_asked_for_on_each_scrape_and_a_failing_sample_is_left_out() -> None:
    metrics = Metrics()
    cache = {"a": 1}
    metrics.register_instances("aggregate", "account", lambda: {"cached": len(cache)})

    def changed_meanwhile() -> dict[str, int]:
        raise RuntimeError("dictionary changed size during iteration")

    metrics.register_instances("saga", "transfer", changed_meanwhile)
    assert value(metrics, "tidings_instances", kind="aggregate", name="account", state="cached") == 1
    cache["b"] = 2
    scraped = samples(metrics)
    assert scraped[("tidings_instances", frozenset({"kind": "aggregate", "name": "account",
                                                    "state": "cached"}.items()))] == 2
    assert not [key for key in scraped if dict(key[1]).get("kind") == "saga"]


def test_each_metrics_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.transaction("committed")
    assert value(first, "tidings_transactions_total", outcome="committed") == 1
    assert value(second, "tidings_transactions_total", outcome="committed") is None


#: prometheus_client's process collector: the standard names every exporter uses.
PROCESS = {"process_cpu_seconds", "process_max_fds", "process_open_fds", "process_resident_memory_bytes",
           "process_start_time_seconds", "process_virtual_memory_bytes",
           # and its garbage collector's, per generation
           "python_gc_objects_collected", "python_gc_objects_uncollectable", "python_gc_collections"}


def test_every_metric_is_named_tidings_and_documented_in_operations() -> None:
    metrics = Metrics()
    metrics.register_instances("aggregate", "account", lambda: {"cached": 0})
    names = {family.name for family in metrics.registry.collect()}
    assert PROCESS <= names  # the whole process's CPU and memory, for operators and the bench
    assert all(name.startswith("tidings_") for name in names - PROCESS)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    exposed = {name + "_total" if family.type == "counter" else name
               for family in metrics.registry.collect() for name in [family.name]}
    assert [name for name in sorted(exposed) if f"`{name}`" not in docs] == []


def test_partition_owner_reports_each_catch_up_with_its_duration() -> None:
    reported: list[tuple[int, float]] = []

    async def catch_up(partition: int) -> None:
        await asyncio.sleep(0)

    owner = PartitionOwner("workflow enrich", journal=None, partitions=4, catch_up=catch_up,
                           on_recovered=lambda partition, seconds: reported.append((partition, seconds)))
    asyncio.run(owner.ensure_ready([2, 0, 2]))
    assert [partition for partition, _ in reported] == [0, 2]
    assert all(seconds >= 0 for _, seconds in reported)
    assert owner.is_ready(0) and owner.is_ready(2)


def parse_worker(argv: list[str], monkeypatch: pytest.MonkeyPatch, env: str | None = None) -> argparse.Namespace:
    if env is None:
        monkeypatch.delenv("TIDINGS_METRICS_PORT", raising=False)
    else:
        monkeypatch.setenv("TIDINGS_METRICS_PORT", env)
    parser = argparse.ArgumentParser()
    worker_cli.register(parser.add_subparsers())
    return parser.parse_args(["worker", "m:app", *argv])


def test_worker_metrics_port_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_worker([], monkeypatch).metrics_port is None
    assert parse_worker(["--metrics-port", "9100"], monkeypatch).metrics_port == 9100
    assert parse_worker([], monkeypatch, env="9200").metrics_port == 9200
    assert parse_worker(["--metrics-port", "9100"], monkeypatch, env="9200").metrics_port == 9100
    for bad in ("0", "65536", "http"):
        with pytest.raises(SystemExit):
            parse_worker(["--metrics-port", bad], monkeypatch)
