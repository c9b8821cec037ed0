"""The App of the tracing tests (``tests.tracing_app:app``), and the span files they read.

One worker process runs all of it: the ``order`` workflow runs the ``prepare`` activity, then
``ctx.send``s ``Pay`` to a ``wallet``; ``Paid`` starts the ``transfer`` saga, which sends
``Take`` to a ``vault`` and ends on ``Taken``. So one trace goes client -> workflow run ->
activity attempt -> send -> wallet decide -> saga transition -> the saga's Take -> vault decide.

With ``TIDINGS_TEST_SPANS`` set (a file path), the module sets up the OpenTelemetry SDK before
the worker reads it: an ``InMemorySpanExporter`` and an exporter that appends each finished
span to that file as one JSON line, at once (a ``SimpleSpanProcessor``), so a SIGKILLed worker
has written every span it ended. ``TIDINGS_TEST_BLOCK`` names a file: while it exists, the
activity sleeps (the test kills the worker then); ``TIDINGS_TEST_CALLS`` names a file the
activity appends one line to per attempt.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tidings import App, Attempt, Persist, Retry, SagaEvent, ScheduledRun, Send, Stay, Stop, WorkflowContext

PARTITIONS = 2
SPANS_ENV = "TIDINGS_TEST_SPANS"
BLOCK_ENV = "TIDINGS_TEST_BLOCK"
CALLS_ENV = "TIDINGS_TEST_CALLS"


def span_record(span: Any) -> dict[str, Any]:
    """One finished SDK span as the JSON the tests read."""
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "kind": span.kind.name,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "links": [f"{link.context.trace_id:032x}/{link.context.span_id:016x}" for link in span.links],
        "pid": os.getpid(),
    }


def install_span_files(path: str) -> Any:
    """Set the process's tracer provider: in memory, and one JSON line per span in ``path``.

    Returns the ``InMemorySpanExporter``."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class JsonLines(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            with open(path, "a", encoding="utf-8") as out:
                for span in spans:
                    out.write(json.dumps(span_record(span)) + "\n")
            return SpanExportResult.SUCCESS

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(JsonLines()))
    trace.set_tracer_provider(provider)
    return memory


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Every span the processes wrote to ``path``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Pay(BaseModel):
    amount: int


class Paid(BaseModel):
    amount: int


class Take(BaseModel):
    amount: int


class Taken(BaseModel):
    amount: int


class Transfer(BaseModel):
    phase: str = "new"
    amount: int = 0


def start_on(event: SagaEvent) -> bool:
    return isinstance(event.value, Paid)


def handle(event: Any, state: Transfer) -> Transfer | None:
    value = getattr(event, "value", None)
    if state.phase == "new" and isinstance(value, Paid):
        return Transfer(phase="taking", amount=value.amount)
    if state.phase == "taking" and isinstance(value, Taken):
        return state.model_copy(update={"phase": "done"})
    return None


async def prepare(attempt: Attempt, order: str) -> str:
    """The activity: notes its call, waits while the block file exists, and opens a span of
    its own (the attempt's child: the attempt's span is current in an async activity)."""
    calls = os.environ.get(CALLS_ENV)
    if calls:
        with open(calls, "a", encoding="utf-8") as out:
            out.write(f"{order} {attempt.number} {os.getpid()}\n")
    block = os.environ.get(BLOCK_ENV)
    while block and os.path.exists(block):
        await asyncio.sleep(0.1)  # the test kills the worker meanwhile
    from opentelemetry import trace

    with trace.get_tracer("tests.tracing_app").start_as_current_span("prepare body"):
        return f"prepared {order}"


def source_topic(app_id: str) -> str:
    """The flow stage's source topic (the test creates it: it belongs to its producer)."""
    return f"{app_id}.names.in"


def sink_topic(app_id: str) -> str:
    return f"{app_id}.names.out"


def flaky(attempt: Attempt) -> str:
    """An activity whose first attempt fails (its span records the error), the second works."""
    if attempt.number == 1:
        raise RuntimeError("the first attempt fails")
    return f"attempt {attempt.number}"


def build(app_id: str) -> App:
    """Return the tracing test App named ``app_id``: the order workflow, the saga and its
    aggregates, a parent workflow with a child (``kid``), schedules of ``tick``, and a flow
    stage of ``kid`` from ``source_topic``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=20)
    wallets = app.aggregate("wallet", 0, lambda c, s: Persist(Paid(amount=c.amount)),
                            lambda e, s: s - e.amount, command=Pay, event=Paid)
    vaults = app.aggregate("vault", 0, lambda c, s: Persist(Taken(amount=c.amount)),
                           lambda e, s: s + e.amount, command=Take, event=Taken)

    def on_enter(state: Transfer, recovering: bool) -> tuple[Any, list[Send]]:
        if state.phase == "taking":
            return Stay(), [Send(vaults, "vault-1", Take(amount=state.amount))]
        if state.phase == "done":
            return Stop(), []
        return Stay(), []

    app.saga("transfer", subscribe=[wallets, vaults], start_on=start_on, initial=Transfer(),
             handle=handle, on_enter=on_enter)

    @app.workflow("order")
    async def order(ctx: WorkflowContext, account: str) -> str:
        prepared = await ctx.activity("prepare", Retry.times(3), functools.partial(prepare, order=account), type=str)
        await ctx.send(wallets, account, Pay(amount=5))
        return prepared

    @app.workflow("kid")
    async def kid(ctx: WorkflowContext, name: str) -> str:
        return f"kid {name}"

    @app.workflow("parent")
    async def parent(ctx: WorkflowContext, name: str) -> str:
        return str(await ctx.child(kid, name, type=str))

    @app.workflow("flaky")
    async def flaky_run(ctx: WorkflowContext, name: str) -> str:
        return str(await ctx.activity("flaky", Retry.times(3), flaky, type=str))

    @app.workflow("tick")
    async def tick(ctx: WorkflowContext, run: ScheduledRun[Any]) -> str:
        return f"tick {run.input}"

    app.schedules([tick])
    app.workflow_flow("names", source_topic(app_id), kid, lambda name: f"flow-{name}", sink_topic(app_id),
                      parallelism=4, timeout=60)

    return app


if os.environ.get(SPANS_ENV):
    install_span_files(os.environ[SPANS_ENV])

app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
