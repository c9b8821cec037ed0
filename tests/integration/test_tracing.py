"""Traces end to end on a real broker: one trace from a client call through a workflow run,
its activity attempt and ``ctx.send``, the aggregate's decide, the saga's transition and the
saga's command, across a SIGKILL and restart of the worker (docs/tracing.md).

The client's spans are read from the SDK's ``InMemorySpanExporter`` in this process; the
worker's from the JSON lines ``tests/tracing_app.py`` makes its SDK write (an in-memory
exporter cannot be read across processes), each span written the moment it ends.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from confluent_kafka.admin import NewTopic  # noqa: E402

from tidings import App, CatchUp, Finished, ScheduleRule  # noqa: E402
from tidings.codec import avro  # noqa: E402
from tidings.core.records import CommandEnvelope, EventEnvelope  # noqa: E402
from tidings.core.workflow import Started  # noqa: E402
from tidings.core.workflow_records import WorkflowJournalEntry  # noqa: E402
from tidings.testing.eventually import assert_eventually  # noqa: E402
from tidings.testing.topics import read_topic  # noqa: E402

from tests.kafka_clients import kafka  # noqa: E402
from tests.tracing_app import BLOCK_ENV, CALLS_ENV, SPANS_ENV, build, read_spans, source_topic  # noqa: E402
from tests.workers import Workers, applied  # noqa: E402

pytestmark = pytest.mark.integration

Span = dict[str, Any]


@pytest.fixture(scope="module")
def client_spans() -> Iterator[InMemorySpanExporter]:
    """This process's spans, in the SDK's in-memory exporter (the provider is set once per process)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.clear()


@pytest.fixture
def tracing_app(kafka_bootstrap: str, app_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    admin = kafka(kafka_bootstrap).admin()
    for future in admin.create_topics([NewTopic(source_topic(app_id), num_partitions=2)]).values():
        future.result(timeout=30)
    yield from applied(kafka_bootstrap, build(app_id))


def _hex(span: Any) -> tuple[str, str, str | None]:
    """(trace id, span id, parent id) of an SDK span, as the JSON lines spell them."""
    parent = span.parent
    return (f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}",
            None if parent is None else f"{parent.span_id:016x}")


def _one(spans: list[Span], name: str, **where: Any) -> Span:
    found = [s for s in spans if s["name"] == name and all(s.get(k) == v for k, v in where.items())]
    assert len(found) == 1, f"{name} {where}: {len(found)} spans of {[s['name'] for s in spans]}"
    return found[0]


def _started(bootstrap: str, app_id: str) -> list[Started]:
    """The ``Started`` records of instance o-1 on the order workflow's journal."""
    journal = [avro.decode_as(r.value or b"", WorkflowJournalEntry)
               for r in read_topic(bootstrap, f"{app_id}.workflow.order.journal")]
    return [e.record for e in journal if e.instance_id == "o-1" and isinstance(e.record, Started)]


def _traceparent(trace_id: str, span_id: str) -> str:
    """A traceparent without its flags (sampled, and the SDK's random-trace-id flag)."""
    return f"00-{trace_id}-{span_id}"


def _unflagged(traceparent: str | None) -> str | None:
    return None if traceparent is None else traceparent.rsplit("-", 1)[0]


@pytest.mark.chaos
def test_one_trace_spans_client_run_attempt_send_decide_saga_and_its_command_across_a_sigkill(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, tracing_app: App, client_spans: InMemorySpanExporter,
) -> None:
    spans_file, block, calls = tmp_path / "spans.jsonl", tmp_path / "block", tmp_path / "calls"
    block.touch()
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.tracing_app:app",
                      env={SPANS_ENV: str(spans_file), BLOCK_ENV: str(block), CALLS_ENV: str(calls)})
    try:
        first = workers.start("w1")
        order = tracing_app.workflow_handle("order")

        async def start() -> None:
            with trace.get_tracer("tests").start_as_current_span("checkout"):
                await order.start("o-1", "acct-1")

        asyncio.run(start())
        # The attempt runs (and waits on the block file) and the start is journaled (an early
        # activity may start before its journal's ack): kill the worker in the middle of it.
        assert_eventually(lambda: calls.exists() and calls.read_text().strip() != "", timeout=90,
                          message="the first worker starts the activity")
        assert_eventually(lambda: _started(kafka_bootstrap, app_id) != [], timeout=30,
                          message="the start is journaled")
        first_pid = first.pid
        first.kill()
        killed = read_spans(spans_file)
        run = _one(killed, "workflow order")
        assert run["pid"] == first_pid
        # The attempt never ended in the killed worker: no span of it was exported there.
        assert [s for s in killed if s["name"] == "activity prepare"] == []

        block.unlink()
        second = workers.start("w2", data_dir=first.data_dir)
        outcome = asyncio.run(order.result("o-1", timeout=90))
        assert outcome == Finished("prepared acct-1"), workers.log_tail()
        assert_eventually(lambda: any(s["name"] == "decide vault" for s in read_spans(spans_file)), timeout=60,
                          message="the saga's command is decided")
        assert_eventually(lambda: any(s["name"] == "workflow order finished" for s in read_spans(spans_file)),
                          timeout=30, message="the run's end has its span")
        worker_spans = read_spans(spans_file)
    finally:
        workers.kill_all()

    # -- the client: its own span and the request's producer span, parent and child -------
    mine = {span.name: _hex(span) for span in client_spans.get_finished_spans()}
    trace_id, checkout_id, _ = mine["checkout"]
    request_name = f"start {app_id}.workflow.order.inbox"
    assert mine[request_name][0] == trace_id and mine[request_name][2] == checkout_id
    request_id = mine[request_name][1]

    traced = [s for s in worker_spans if s["trace_id"] == trace_id]
    # -- the run: a child of the client's request, its context journaled in Started ----------
    run = _one(traced, "workflow order")
    assert run["parent_id"] == request_id and run["kind"] == "CONSUMER"
    assert run["attributes"]["tidings.instance_id"] == "o-1"
    assert [_unflagged(s.traceparent) for s in _started(kafka_bootstrap, app_id)] == [_traceparent(trace_id, run["span_id"])]

    # -- after the restart: the run's later spans are parented under the journaled context --
    later = [s for s in traced if s["pid"] == second.pid]
    assert {s["name"] for s in later} >= {"activity prepare", "step activity prepare", "send wallet",
                                          "workflow order finished"}
    attempt = _one(later, "activity prepare")
    assert attempt["parent_id"] == run["span_id"]
    assert attempt["attributes"]["tidings.attempt"] == 1 and attempt["status"] == "UNSET"
    assert attempt["attributes"]["tidings.step"] == "1"
    # The activity's own span is the attempt's child (the attempt's span is current in it).
    assert _one(later, "prepare body")["parent_id"] == attempt["span_id"]
    step = _one(later, "step activity prepare")
    assert step["parent_id"] == run["span_id"] and step["attributes"]["tidings.step.kind"] == "activity"
    send = _one(later, "send wallet")
    assert send["parent_id"] == run["span_id"] and send["kind"] == "PRODUCER"
    assert send["attributes"]["tidings.aggregate_id"] == "acct-1"
    assert _one(later, "workflow order finished")["parent_id"] == run["span_id"]

    # -- the send -> the wallet's decide -> the saga's transition -> its command's decide ----
    decide = _one(traced, "decide wallet")
    assert decide["parent_id"] == send["span_id"] and decide["attributes"]["tidings.verdict"] == "accepted"
    assert decide["attributes"]["tidings.command_id"] == send["attributes"]["tidings.command_id"]
    transition = _one(traced, "saga transfer", parent_id=decide["span_id"])
    assert transition["attributes"]["tidings.saga.commands"] == 1
    assert transition["attributes"]["tidings.event_type"] == "Paid"
    take = _one(traced, "decide vault")
    assert take["parent_id"] == transition["span_id"] and take["attributes"]["tidings.command_type"] == "Take"
    # (A batch of more than one record links to the traces of its records: the hostile test.)

    # -- what travels on Kafka: the metadata and a traceparent header outside consumers see --
    commands = [(avro.decode_as(r.value or b"", CommandEnvelope), r.headers)
                for r in read_topic(kafka_bootstrap, f"{app_id}.aggregate.vault.commands")]
    assert [(_unflagged(c.metadata["traceparent"]), _unflagged(h["traceparent"].decode())) for c, h in commands] == [
        (_traceparent(trace_id, transition["span_id"]),) * 2]
    events = [(avro.decode_as(r.value or b"", EventEnvelope), r.headers)
              for r in read_topic(kafka_bootstrap, f"{app_id}.aggregate.wallet.events")]
    assert [(_unflagged(e.metadata["traceparent"]), _unflagged(h["traceparent"].decode())) for e, h in events] == [
        (_traceparent(trace_id, decide["span_id"]),) * 2]


_VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
# (the envelope's metadata value, None: no metadata; the header's bytes). A metadata value
# must pass the envelope's own limits (valid UTF-8, 16 KiB in all: docs/limits.md), or the
# command is dead-lettered for that before any trace is looked at.
HOSTILE_TRACEPARENTS: list[tuple[str | None, bytes]] = [
    ("garbage", b"garbage"),
    ("00-" + "0" * 32 + "-" + "0" * 16 + "-01", b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01"),  # zero ids
    ("ff" + _VALID[2:], b"ff" + _VALID[2:].encode()),  # version ff is forbidden
    (_VALID + "x" * 10_000, _VALID.encode() + b"x" * 100_000),  # far too long
    (_VALID.upper(), _VALID.upper().encode()),  # upper case
    (None, b"\xff\xfe" + _VALID.encode()),  # a header that is no text
    (None, "\ud800".encode("utf-8", "surrogatepass")),  # a lone surrogate
    ("", b""),
]


def test_hostile_trace_contexts_are_ignored_the_commands_decided_and_the_worker_goes_on(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, tracing_app: App,
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.tracing_app:app",
                      env={SPANS_ENV: str(spans_file)})
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    try:
        # Everything is in the topic before the worker starts: its first batches hold many records.
        topic = f"{app_id}.aggregate.wallet.commands"
        sent: list[str] = []
        for n, (value, header) in enumerate(HOSTILE_TRACEPARENTS):
            command_id = f"hostile-{n}-{uuid.uuid4().hex[:6]}"
            envelope: dict[str, Any] = {"command_id": command_id, "aggregate_id": f"h-{n}", "type": "Pay",
                                        "payload": {"amount": 1}}
            if value is not None:
                envelope["metadata"] = {"traceparent": value, "tracestate": value[:500]}
            producer.produce(topic, json.dumps(envelope).encode(), f"h-{n}".encode(),
                             headers=[("content-type", b"application/json"), ("traceparent", header),
                                      ("tracestate", b"\xff\xfe" * 10)])
            sent.append(command_id)
        # A header alone, with no metadata (another producer's JSON): its context is taken.
        outside = [("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"),
                   ("6bf92f3577b34da6a3ce929d0e0e4738", "20f067aa0ba902b9")]
        for n, (trace_id, span_id) in enumerate(outside):
            envelope = {"command_id": f"from-outside-{n}", "aggregate_id": "h-out", "type": "Pay",
                        "payload": {"amount": 1}}
            producer.produce(topic, json.dumps(envelope).encode(), b"h-out",
                             headers=[("content-type", b"application/json"),
                                      ("traceparent", f"00-{trace_id}-{span_id}-01".encode())])
        producer.flush(10)
        worker = workers.start("w1")

        def decided() -> set[str]:
            events = [avro.decode_as(r.value or b"", EventEnvelope) for r in read_topic(kafka_bootstrap,
                      f"{app_id}.aggregate.wallet.events")]
            return {e.command_id for e in events}

        assert_eventually(lambda: decided() >= {*sent, "from-outside-0", "from-outside-1"}, timeout=90,
                          message="every command with a hostile trace context is decided")
        assert worker.running, workers.log_tail()
        assert_eventually(lambda: len([s for s in read_spans(spans_file) if s["name"] == "decide wallet"])
                          >= len(sent) + 2, timeout=30, message="each decide has its span")
        spans = read_spans(spans_file)
        decides = {s["attributes"]["tidings.command_id"]: s for s in spans if s["name"] == "decide wallet"}
        batch_ids = {s["span_id"] for s in spans if s["name"] == "decide batch wallet"}
        for command_id in sent:
            # No hostile context was taken: the decide is a new trace's (under its batch's span).
            assert decides[command_id]["parent_id"] in batch_ids | {None}, command_id
        for n, context in enumerate(outside):
            assert (decides[f"from-outside-{n}"]["trace_id"], decides[f"from-outside-{n}"]["parent_id"]) == context
        # The two came in one batch (one partition, there before the worker): its span links to both.
        links = {f"{trace_id}/{span_id}" for trace_id, span_id in outside}
        assert any(links <= set(s["links"]) for s in spans if s["name"] == "decide batch wallet"), \
            [s["links"] for s in spans if s["name"] == "decide batch wallet"]
        assert [s for s in spans if s["name"].startswith("deadletter")] == []
    finally:
        workers.kill_all()


def test_a_child_workflow_a_schedule_run_a_flow_element_and_a_dead_letter_each_carry_their_trace(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, tracing_app: App, client_spans: InMemorySpanExporter,
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.tracing_app:app",
                      env={SPANS_ENV: str(spans_file)})
    producer = kafka(kafka_bootstrap).producer()
    outside = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    bad = ("5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8")
    try:
        workers.start("w1")
        parent = tracing_app.workflow_handle("parent")

        async def scenario() -> None:
            await parent.start("p-1", "ada")
            assert await parent.result("p-1", timeout=60) == Finished("kid ada")
            flaky = tracing_app.workflow_handle("flaky")
            await flaky.start("f-1", "x")
            assert await flaky.result("f-1", timeout=60) == Finished("attempt 2")
            await tracing_app.schedule_handle().create("every-second", "tick", "x",
                                                       ScheduleRule.every(timedelta(seconds=1)), CatchUp.NONE)

        asyncio.run(scenario())
        # A flow element whose source record carries a traceparent header (an outside producer's).
        producer.produce(source_topic(app_id), b'"bob"', b"bob",
                         headers=[("traceparent", f"00-{outside[0]}-{outside[1]}-01".encode())])
        # A command that does not decode, with a trace context in its header: its dead letter's span.
        producer.produce(f"{app_id}.aggregate.wallet.commands", b"\x00not a command", b"w-1",
                         headers=[("traceparent", f"00-{bad[0]}-{bad[1]}-01".encode())])
        producer.flush(10)

        def names() -> set[str]:
            return {s["name"] for s in read_spans(spans_file)}

        assert_eventually(lambda: {"workflow tick", "flow names", "deadletter aggregate wallet",
                                   "workflow kid finished"} <= names(),
                          timeout=90, message="a run of the schedule, the flow element and the dead letter traced")
        assert_eventually(lambda: sum(s["name"] == "workflow kid" for s in read_spans(spans_file)) >= 2,
                          timeout=60, message="the flow's kid runs")
        spans = read_spans(spans_file)
    finally:
        workers.kill_all()

    by_id = {s["span_id"]: s for s in spans}
    # The child's run is a child of its parent's run, in the client's trace.
    request = next(_hex(s) for s in client_spans.get_finished_spans()
                   if s.name == f"start {app_id}.workflow.parent.inbox")
    parent_run = _one(spans, "workflow parent")
    assert (parent_run["trace_id"], parent_run["parent_id"]) == (request[0], request[1])
    kid_run = _one(spans, "workflow kid", parent_id=parent_run["span_id"])
    assert kid_run["trace_id"] == request[0] and kid_run["attributes"]["tidings.parent_id"] == "p-1"
    assert _one(spans, "workflow kid finished", parent_id=kid_run["span_id"])["trace_id"] == request[0]

    # Each attempt has its span, with its number; the one that failed, its error.
    flaky_run = _one(spans, "workflow flaky")
    attempts = sorted((s for s in spans if s["name"] == "activity flaky"), key=lambda s: s["attributes"]["tidings.attempt"])
    assert [(s["attributes"]["tidings.attempt"], s["status"], s["parent_id"]) for s in attempts] == [
        (1, "ERROR", flaky_run["span_id"]), (2, "UNSET", flaky_run["span_id"])]
    assert attempts[0]["attributes"]["error.type"] == "RuntimeError"
    step = _one(spans, "step activity flaky")
    assert step["attributes"]["tidings.attempt"] == 2 and step["status"] == "UNSET"

    # A schedule's run: its start's producer span is the parent of the run's span.
    tick = next(s for s in spans if s["name"] == "workflow tick")
    schedule = by_id[tick["parent_id"]]
    assert schedule["name"] == "schedule tick" and schedule["kind"] == "PRODUCER"
    assert schedule["attributes"]["tidings.schedule_id"] == "every-second"
    assert schedule["attributes"]["tidings.instance_id"] == tick["attributes"]["tidings.instance_id"]

    # A flow element: under its source record's traceparent; the start it produces, then the run.
    element = _one(spans, "flow names")
    assert (element["trace_id"], element["parent_id"]) == outside
    start = _one(spans, f"start {app_id}.workflow.kid.inbox", parent_id=element["span_id"])
    flow_run = _one(spans, "workflow kid", parent_id=start["span_id"])
    assert flow_run["attributes"]["tidings.instance_id"] == "flow-bob" and flow_run["trace_id"] == outside[0]

    # A dead letter: its span is in the bad record's trace, failed, with the reason.
    letter = _one(spans, "deadletter aggregate wallet")
    assert (letter["trace_id"], letter["parent_id"]) == bad
    assert letter["status"] == "ERROR" and letter["attributes"]["error.type"] == "DecodeError"
    assert letter["attributes"]["tidings.deadletter.reason"]
