"""The App a saga bench worker runs: the bank's account aggregate and its transfer saga.

A worker subprocess imports ``bench.saga_apps:app``; ``BENCH_SAGA_APP_ID`` names it, so
every run gets fresh topics and a fresh consumer group. The bench builds the same App
in-process with ``build(app_id)`` to talk to it. ``BENCH_PROFILE=PATH`` profiles the
worker as in ``bench.apps``. ``BENCH_TRACING=1`` turns traces on in the worker: the
OpenTelemetry SDK with a batch span processor whose exporter counts the spans and drops them
(the cost measured is tidings' spans and the SDK's, not a collector's network).
"""

from __future__ import annotations

import os

from examples.bank import account, transfer
from tidings import App

PARTITIONS = 8


def build(app_id: str) -> App:
    """Return the saga bench App named ``app_id``: accounts and the transfer saga."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=120)
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)
    transfer.declare(app, accounts)
    return app


def _trace() -> None:
    """Set the process's tracer provider: batched, to an exporter that drops every span."""
    from collections.abc import Sequence
    from typing import Any

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        spans = 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            Dropped.spans += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            print(f"bench: {Dropped.spans} spans exported (dropped)", flush=True)

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)


if os.environ.get("BENCH_TRACING"):
    _trace()
app = build(os.environ["BENCH_SAGA_APP_ID"]) if "BENCH_SAGA_APP_ID" in os.environ else None
if app is not None and os.environ.get("BENCH_PROFILE"):
    from .apps import _profile

    _profile(os.environ["BENCH_PROFILE"])
