"""``python -m bench.codec``: µs per Avro encode and decode of each hot-path envelope family.

No broker: a micro-benchmark of ``tidings.codec.avro.encode`` and ``decode_as`` on the
envelopes the worker's hot paths write and read, built like the worker builds them (the
bank example's deposit command with a trace context, its event and its accepted reply, a
workflow start request, the journal records of a one-activity step, a finished outcome).

Each figure is the best of ``--repeat`` timed loops of ``--number`` calls, in µs per call
(the best, not the mean: on a shared 2-core machine the others only add noise). The
``fastavro reference`` columns encode and decode the same record the way the codec did
before issue 11 (``BytesIO`` + ``fastavro.schemaless_writer`` / ``schemaless_reader`` on
the catalogue's parsed schema, dict built from ``__slots__``), so one run shows the ratio
on this machine at this moment. ``--profile`` prints cProfile's top functions of the
codec's own encode + decode of every family.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from tidings.codec import avro
from tidings.codec.avro import CATALOGUE, MAGIC
from tidings.core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from tidings.core.workflow.journal import StepCompleted, StepStarted, record_to_json
from tidings.core.workflow_records import WorkflowInbox, WorkflowJournalEntry, WorkflowOutcomeRecord

_TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
_NOW = 1_767_225_600_000
_EVENT = EventEnvelope(
    event_id="3f2b9c1e-8d4a-4c55-9e61-0b7f2a9d1c44", command_id="c-3f2b9c1e-8d4a-4c55-9e61-0b7f2a9d1c44",
    correlation_id="c-3f2b9c1e-8d4a-4c55-9e61-0b7f2a9d1c44", aggregate_id="account-421", version=17,
    type="bank.Deposited", payload=b'{"amount":125,"balance":2125}', timestamp_ms=_NOW, metadata=dict(_TRACE),
)

#: (family, record) in the order of the table.
FAMILIES: tuple[tuple[str, Any], ...] = (
    ("aggregate command", CommandEnvelope(
        command_id="c-3f2b9c1e-8d4a-4c55-9e61-0b7f2a9d1c44", correlation_id="c-3f2b9c1e-8d4a-4c55-9e61-0b7f2a9d1c44",
        aggregate_id="account-421", type="bank.Deposit", payload=b'{"amount":125}', timestamp_ms=_NOW,
        reply_to="bench.aggregate.account.replies", metadata=dict(_TRACE),
    )),
    ("event (events topic, journal)", _EVENT),
    ("reply, accepted with 1 event", ReplyEnvelope(
        command_id=_EVENT.command_id, correlation_id=_EVENT.correlation_id, aggregate_id="account-421",
        status="accepted", version=17, timestamp_ms=_NOW, events=(_EVENT,),
    )),
    ("workflow inbox, start", WorkflowInbox(
        request_id="start:flow-1207:1767225600000", instance_id="flow-1207", kind="start", timestamp_ms=_NOW,
        payload=b"1207", reply_to="bench.workflow.one-activity.replies", metadata=dict(_TRACE),
    )),
    ("workflow journal, step started", WorkflowJournalEntry(
        "flow-1207", StepStarted(seq=2, path="1", kind="activity", name="add_one", at=_NOW),
    )),
    ("workflow journal, step completed", WorkflowJournalEntry("flow-1207", StepCompleted(seq=3, path="1", result="1208"))),
    ("workflow outcome, finished", WorkflowOutcomeRecord(
        instance_id="flow-1207", workflow="one-activity", outcome="finished", at=_NOW, result="1208",
    )),
)


def _reference_fields(record: Any) -> dict[str, Any]:
    """The dict the codec handed fastavro before issue 11 (for these families)."""
    if isinstance(record, WorkflowJournalEntry):
        fields: dict[str, Any] = dict.fromkeys(
            f["name"] for f in CATALOGUE.newest[WorkflowJournalEntry].parsed["fields"]
        )
        fields.update(record_to_json(record.record))
        fields["instance_id"] = record.instance_id
        return fields
    fields = {name: getattr(record, name) for name in record.__slots__}
    if isinstance(record, ReplyEnvelope):
        fields["events"] = [{n: getattr(e, n) for n in e.__slots__} for e in record.events]
    if "error" in fields and fields["error"] is not None:
        fields["error"] = fields["error"].to_json()
    return fields


def reference_encode(record: Any) -> bytes:
    """Encode ``record`` with plain fastavro, as the codec did before issue 11."""
    schema = CATALOGUE.newest[type(record)]
    out = BytesIO()
    out.write(MAGIC)
    out.write(schema.fingerprint)
    schemaless_writer(out, schema.parsed, _reference_fields(record))
    return out.getvalue()


def reference_read(data: bytes) -> Any:
    """Read the fields of ``data`` with plain fastavro (no record built), as before issue 11."""
    writer = CATALOGUE.by_fingerprint[bytes(data[2:10])]
    body = BytesIO(data)
    body.seek(10)
    return schemaless_reader(body, writer.parsed, None)


def best_us(call: Callable[[], object], number: int, repeat: int) -> float:
    """Return the best of ``repeat`` loops of ``number`` calls, in µs per call."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            call()
        best = min(best, time.perf_counter() - start)
    return best / number * 1e6


def measure(number: int, repeat: int) -> list[tuple[str, int, float, float, float, float]]:
    """Return (family, bytes, encode µs, decode µs, reference encode µs, reference read µs) per family."""
    rows = []
    for family, record in FAMILIES:
        data = avro.encode(record)
        record_type = type(record)
        assert data == reference_encode(record), f"{family}: the codec's bytes differ from fastavro's"
        assert avro.decode_as(data, record_type) == record, f"{family}: does not round-trip"
        rows.append((
            family, len(data),
            best_us(lambda: avro.encode(record), number, repeat),
            best_us(lambda: avro.decode_as(data, record_type), number, repeat),
            best_us(lambda: reference_encode(record), number, repeat),
            best_us(lambda: reference_read(data), number, repeat),
        ))
    return rows


def profile(number: int) -> None:
    """Print cProfile's top functions by own time for ``number`` encode + decode of each family."""
    encoded = [(record, avro.encode(record), type(record)) for _, record in FAMILIES]
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(number):
        for record, data, record_type in encoded:
            avro.decode_as(avro.encode(record), record_type)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(18)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.codec", description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per timed loop")
    parser.add_argument("--repeat", type=int, default=5, help="timed loops; the best is printed")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of encode + decode instead")
    args = parser.parse_args()
    if args.profile:
        profile(args.number)
        return
    print("| envelope | bytes | encode µs | decode µs | fastavro reference encode µs | fastavro reference read µs |")
    print("|---|---:|---:|---:|---:|---:|")
    for family, size, encode_us, decode_us, ref_encode_us, ref_read_us in measure(args.number, args.repeat):
        print(f"| {family} | {size} | {encode_us:.2f} | {decode_us:.2f} | {ref_encode_us:.2f} | {ref_read_us:.2f} |")


if __name__ == "__main__":
    main()
