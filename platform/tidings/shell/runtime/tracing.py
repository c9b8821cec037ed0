"""Traces through OpenTelemetry, when the ``tracing`` extra is installed (docs/tracing.md).

The W3C trace context (``traceparent``, ``tracestate``) travels in the ``metadata`` of the
envelopes tidings writes (commands, events, workflow requests) and in a Kafka header of
the same name, so a consumer outside tidings sees it too. A kind holds a ``Tracing`` or
None: with ``opentelemetry-api`` missing, or no tracer provider configured and no
``OTEL_*`` exporter asked for, ``from_environment`` returns None and every call site pays
one ``is None`` check, nothing more.

The import is guarded once, here; nothing else in tidings imports ``opentelemetry``. The
pure core only ever sees the ``traceparent`` string a workflow journals in its
``Started`` record, so a run's later spans resume under it after a restart.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

log = logging.getLogger(__name__)

try:  # the optional extra: `pip install tidings[tracing]`
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by tests/unit/test_tracing.py in a subprocess
    _trace = None  # type: ignore[assignment]
    _context = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

#: The W3C trace context's fields, as metadata keys and Kafka header names.
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
# A traceparent is 55 characters and a tracestate at most 32 members of ~256: anything
# longer is hostile, and is not parsed (the span starts a trace of its own).
_MAX_TRACEPARENT: Final = 128
_MAX_TRACESTATE: Final = 1024
# A batch span links to at most this many of its records' traces (the SDK keeps 128 by
# default, OTEL_SPAN_LINK_COUNT_LIMIT): the rest would be parsed to be dropped.
_MAX_LINKS: Final = 128
# Attribute values that come from records (reasons, ids) are cut to this many characters.
_MAX_ATTRIBUTE: Final = 256

#: Span kinds, by the names tidings' call sites use.
PRODUCER: Final = "producer"
CONSUMER: Final = "consumer"
INTERNAL: Final = "internal"

Carrier = Mapping[str, str]
"""A trace context as text: ``{"traceparent": ..., "tracestate": ...}``."""


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed."""
    return _trace is not None


def carrier_of(metadata: Mapping[str, str] | None, headers: Mapping[str, bytes] | None = None) -> dict[str, str]:
    """The trace context of a record: its envelope's ``metadata``, else its Kafka headers.

    Hostile values are dropped here (too long, not text); a malformed but short one is
    left to the propagator, which ignores what does not parse.
    """
    found: dict[str, str] = {}
    for name, limit in ((TRACEPARENT, _MAX_TRACEPARENT), (TRACESTATE, _MAX_TRACESTATE)):
        value: Any = None if metadata is None else metadata.get(name)
        if value is None and headers is not None:
            raw = headers.get(name)
            if isinstance(raw, bytes):
                try:
                    value = raw.decode("ascii")
                except UnicodeDecodeError:
                    value = None
        if isinstance(value, str) and 0 < len(value) <= limit:
            found[name] = value
    return found


def headers_of(carrier: Carrier) -> tuple[tuple[str, bytes], ...]:
    """The Kafka headers that carry ``carrier`` (for consumers outside tidings)."""
    return tuple((name, value.encode("ascii", "replace")) for name, value in carrier.items())


class Tracing:
    """The tracer tidings' spans go to, and how a trace context travels between records.

    Build it with ``from_environment``; a kind that holds None traces nothing.
    """

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self._propagator = TraceContextTextMapPropagator()
        self._kinds = {
            PRODUCER: _trace.SpanKind.PRODUCER,
            CONSUMER: _trace.SpanKind.CONSUMER,
            INTERNAL: _trace.SpanKind.INTERNAL,
        }

    def start(
        self,
        name: str,
        parent: Carrier | None = None,
        *,
        kind: str = INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Iterable[Carrier] = (),
        start_ns: int | None = None,
    ) -> Any:
        """Start a span under ``parent`` (a carrier; None or empty: the current context,
        which outside a span is a new trace). End it with ``end``."""
        context = self._context(parent)
        span_links = []
        for link in itertools.islice(links, _MAX_LINKS):
            linked = _trace.get_current_span(self._propagator.extract(link)).get_span_context()
            if linked.is_valid:
                span_links.append(_trace.Link(linked))
        return self._tracer.start_span(
            name, context=context, kind=self._kinds[kind], attributes=_attributes(attributes),
            links=span_links, start_time=start_ns,
        )

    @contextmanager
    def span(
        self,
        name: str,
        parent: Carrier | None = None,
        *,
        kind: str = INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Iterable[Carrier] = (),
        start_ns: int | None = None,
    ) -> Iterator[Any]:
        """A span around a block, current inside it; an exception out of it is recorded."""
        span = self.start(name, parent, kind=kind, attributes=attributes, links=links, start_ns=start_ns)
        token = _context.attach(_trace.set_span_in_context(span))
        try:
            yield span
        except BaseException as exc:
            self.end(span, exc)
            raise
        else:
            span.end()
        finally:
            _context.detach(token)

    def end(self, span: Any, error: BaseException | str | None = None, *, end_ns: int | None = None) -> None:
        """End ``span``; with ``error``, its status is ERROR and the error is recorded."""
        if error is not None:
            self.fail(span, error)
        span.end(end_time=end_ns)

    @staticmethod
    def fail(span: Any, error: BaseException | str) -> None:
        """Mark ``span`` as failed with ``error`` (an exception or a reason)."""
        description = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, description[:_MAX_ATTRIBUTE]))
        if isinstance(error, BaseException):
            span.record_exception(error)
            span.set_attribute("error.type", type(error).__name__)

    @staticmethod
    def carrier(span: Any) -> dict[str, str]:
        """``span``'s context as a carrier: what goes in an envelope's metadata and headers.

        Written as the W3C format spells it (what the propagator's ``inject`` writes, at a
        third of its cost: it runs once per traced record)."""
        context = span.get_span_context()
        if not context.is_valid:
            return {}
        carrier = {TRACEPARENT: f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"}
        state = context.trace_state
        if state:
            carrier[TRACESTATE] = state.to_header()
        return carrier

    def current(self) -> dict[str, str]:
        """The current context as a carrier (empty outside any span)."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return carrier

    @contextmanager
    def within(self, parent: Carrier | None) -> Iterator[None]:
        """Make ``parent`` the current context inside a block (user code then sees it)."""
        if not parent:
            yield
            return
        token = _context.attach(self._propagator.extract(parent))
        try:
            yield
        finally:
            _context.detach(token)

    def _context(self, parent: Carrier | None) -> Any:
        if not parent:
            return None  # the current context
        return self._propagator.extract(parent)


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    kept: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, str):
            value = value[:_MAX_ATTRIBUTE]
        kept[key] = value
    return kept


def from_environment(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """The process's ``Tracing``, or None when traces are off.

    On when ``opentelemetry-api`` is installed and either the program has set a tracer
    provider (``trace.set_tracer_provider``) or the standard variables ask for an
    exporter (``OTEL_TRACES_EXPORTER`` other than ``none``, ``OTEL_EXPORTER_OTLP_ENDPOINT``
    or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``): then an SDK provider is set up from the
    ``OTEL_*`` variables. ``OTEL_SDK_DISABLED=true`` turns it off whatever else is set.
    """
    if _trace is None:
        return None
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider):
        if not exporting(env):
            return None
        provider = sdk_provider(env)
        if provider is None:
            return None
        _trace.set_tracer_provider(provider)
    return Tracing(_trace.get_tracer("tidings"))


def exporting(env: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces to be exported."""
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters == "none":
        return False
    return bool(exporters or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def sdk_provider(env: Mapping[str, str]) -> Any:
    """An SDK tracer provider exporting to what ``OTEL_TRACES_EXPORTER`` names (default
    ``otlp``), batched (``OTEL_BSP_*``); the resource from ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES``; the sampler from ``OTEL_TRACES_SAMPLER``. None (with a
    warning) when the SDK or the exporter named is not installed."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        log.warning("OTEL_* variables ask for traces, but opentelemetry-sdk is not installed: no traces "
                    "(install tidings[tracing])")
        return None
    provider = TracerProvider(resource=Resource.create())
    names = [n.strip() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").lower().split(",") if n.strip()]
    for name in names:
        exporter: Any
        if name == "console":
            exporter = ConsoleSpanExporter()
        elif name == "otlp":
            exporter = _otlp_exporter(env)
            if exporter is None:
                continue
        else:
            log.warning("OTEL_TRACES_EXPORTER names %r, which tidings does not know (otlp, console): ignored",
                        name[:50])
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    except ImportError:
        log.warning("traces are to go to OTLP (%s), but its exporter is not installed: no traces "
                    "(install tidings[tracing])", protocol)
        return None
    return OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout) itself


def shutdown() -> None:
    """Flush and stop the SDK's provider, if one is set (the worker is stopping)."""
    if _trace is None:
        return
    provider = _trace.get_tracer_provider()
    stop = getattr(provider, "shutdown", None)
    if callable(stop):
        try:
            stop()
        except Exception:  # noqa: BLE001 - an exporter failing at exit must not fail the stop
            log.warning("the tracer provider failed to shut down", exc_info=True)
