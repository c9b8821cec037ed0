"""The tracing adapter (``shell/runtime/tracing.py``): off unless asked, nothing without the
extra, and what it reads from records (hostile or not) never fails.

What is decided about the process (the global tracer provider) is checked in a fresh
interpreter each time: a provider set once cannot be unset.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tidings.shell.runtime.tracing import TRACEPARENT, TRACESTATE, carrier_of, exporting, headers_of

ROOT = Path(__file__).resolve().parents[2]
VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _run(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter (no OTEL_* variables but ``env``); return its stdout."""
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**clean, **env}, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_opentelemetry_tidings_imports_and_traces_nothing() -> None:
    out = _run("""
        import sys
        sys.modules["opentelemetry"] = None  # as if the tracing extra were not installed
        from tidings import App
        from tidings.shell.runtime import tracing
        from tidings.shell.runtime.requester import Requester
        from tidings.shell.runtime.connection import KafkaConnection
        app = App("t", partitions=1)
        requester = Requester(KafkaConnection.of("127.0.0.1:1"), replies_topic="t.replies")
        print(tracing.available(), tracing.from_environment({"OTEL_TRACES_EXPORTER": "console"}),
              requester._tracing)
        tracing.shutdown()
    """)
    assert out == "False None None"


def test_with_the_api_but_no_provider_and_no_exporter_asked_for_traces_are_off() -> None:
    assert _run("""
        from tidings.shell.runtime import tracing
        print(tracing.available(), tracing.from_environment({}))
    """) == "True None"


def test_a_provider_the_program_set_turns_traces_on_and_otel_sdk_disabled_off() -> None:
    assert _run("""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from tidings.shell.runtime import tracing
        trace.set_tracer_provider(TracerProvider())
        print(tracing.from_environment({}) is not None, tracing.from_environment({"OTEL_SDK_DISABLED": "true"}))
    """) == "True None"


def test_otel_traces_exporter_console_sets_up_the_sdk_and_spans_are_exported() -> None:
    out = _run("""
        from opentelemetry import trace
        from tidings.shell.runtime import tracing
        found = tracing.from_environment()
        span = found.start("decide wallet", {"traceparent": "%s"}, attributes={"tidings.aggregate": "wallet"})
        found.end(span)
        print(type(trace.get_tracer_provider()).__name__)
        tracing.shutdown()
    """ % VALID, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="shop-worker")
    assert "TracerProvider" in out
    assert '"name": "decide wallet"' in out and '"trace_id": "0x0af7651916cd43dd8448eb211c80319c"' in out
    assert '"service.name": "shop-worker"' in out


def test_an_exporter_tidings_does_not_know_is_ignored_with_a_warning() -> None:
    done = subprocess.run([sys.executable, "-c", "from tidings.shell.runtime import tracing; "
                           "print(tracing.from_environment() is not None)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "zipkin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert "OTEL_TRACES_EXPORTER names 'zipkin', which tidings does not know" in done.stderr


@pytest.mark.parametrize(("env", "on"), [
    ({}, False),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
    ({"OTEL_SERVICE_NAME": "shop"}, False),  # a name alone exports nothing
])
def test_which_otel_variables_ask_for_traces(env: dict[str, str], on: bool) -> None:
    assert exporting(env) is on


def test_the_context_is_read_from_metadata_first_then_from_headers() -> None:
    assert carrier_of({TRACEPARENT: VALID}, {TRACEPARENT: b"other"}) == {TRACEPARENT: VALID}
    assert carrier_of({}, {TRACEPARENT: VALID.encode(), TRACESTATE: b"a=1"}) == {TRACEPARENT: VALID, TRACESTATE: "a=1"}
    assert carrier_of(None, None) == {}
    assert headers_of({TRACEPARENT: VALID}) == ((TRACEPARENT, VALID.encode()),)


@pytest.mark.parametrize("metadata, headers", [
    ({TRACEPARENT: VALID + "x" * 200}, {}),  # too long to be one
    ({TRACEPARENT: ""}, {TRACEPARENT: b""}),
    ({}, {TRACEPARENT: b"\xff\xfe" + VALID.encode()}),  # no text
    ({}, {TRACEPARENT: "é".encode() * 10}),  # not ASCII
    ({}, {TRACESTATE: b"k=" + b"v" * 5000}),  # a tracestate far too long
    ({TRACEPARENT: 42}, {TRACEPARENT: 42}),  # not a string (a hostile JSON reader's)
])
def test_hostile_contexts_are_dropped_before_anything_parses_them(
    metadata: dict[str, object], headers: dict[str, object]
) -> None:
    assert carrier_of(metadata, headers) == {}  # type: ignore[arg-type]


def test_a_malformed_context_starts_a_new_trace_and_a_valid_one_is_continued() -> None:
    out = _run("""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from tidings.shell.runtime import tracing
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        trace.set_tracer_provider(provider)
        found = tracing.from_environment({})
        for parent in ({"traceparent": "00-zz-yy-01"}, {"traceparent": "%s"}, None):
            found.end(found.start("s", parent, links=[{"traceparent": "garbage"}, {"traceparent": "%s"}]))
        with found.span("outer") as outer:
            carrier = found.carrier(outer)
            assert found.current() == carrier
        try:
            with found.span("failing"):
                raise ValueError("boom")
        except ValueError:
            pass
        for span in memory.get_finished_spans():
            parent = span.parent
            print(span.name, f"{span.context.trace_id:032x}", None if parent is None else f"{parent.span_id:016x}",
                  len(span.links), span.status.status_code.name)
    """ % (VALID, VALID))
    lines = [line.split() for line in out.splitlines()]
    malformed, valid, root, outer, failing = lines
    assert malformed[2] == "None" and malformed[3] == "1"  # a new trace; the valid link kept
    assert valid[1:3] == ["0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"]
    assert root[2] == "None" and outer[2] == "None"
    assert failing[4] == "ERROR"


def test_the_carrier_is_what_the_w3c_propagator_writes() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from tidings.shell.runtime.tracing import Tracing

    found = Tracing(TracerProvider().get_tracer("test"))  # not the process's provider: none is set
    for parent in ({TRACEPARENT: VALID, TRACESTATE: "a=1,b=2"}, {TRACEPARENT: VALID[:-2] + "00"}, None):
        span = found.start("s", parent)
        written: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(written, context=trace.set_span_in_context(span))
        assert found.carrier(span) == written
        found.end(span)
    assert found.carrier(trace.INVALID_SPAN) == {}
