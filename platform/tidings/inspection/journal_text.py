"""A workflow journal as a person reads it: one line per record, times in ISO-8601 UTC.

``tidings journal`` prints this unless ``--json`` asks for the journal's own JSON form.
Each line is the record's time (blank for a record stored without one: a step's end
before ``workflowjournal.v4``), its seq and what happened; a step's end also says how long
the step took (from its ``StepStarted``) and, for an activity, which attempt ended it and
how many failed attempts the journal holds before it (``StepAttemptFailed``, since
``workflowjournal.v5``: one line each, with its error and when the next attempt was due).
Stored values (input, results, payloads) are printed inline as the JSON they are,
shortened past ``MAX_SHOWN`` characters unless ``full``. Tokens are never printed.

Pure: records in, lines out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from ..core.workflow.child_records import ChildOutcome
from ..core.workflow.failures import StepError
from ..core.workflow.journal import (
    CancelRequested,
    ContinuedAsNew,
    Ended,
    JournalRecord,
    SignalReceived,
    Started,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    UpdateAnswered,
    UpdateReceived,
    VersionMarker,
)

MAX_SHOWN: Final = 200  # characters of one stored value
_NO_TIME: Final = " " * len("2026-01-01T00:00:00.000Z")


def instant(ms: int | None) -> str:
    """``ms`` since the epoch as ``2026-11-30T00:13:50.352Z``; blank when unknown."""
    if ms is None:
        return _NO_TIME
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def duration(ms: int) -> str:
    """``ms`` as ``850 ms``, ``3.005 s``, ``4 min 12 s`` or ``2 h 5 min``."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.3f} s"
    if ms < 3_600_000:
        return f"{ms // 60_000} min {ms % 60_000 // 1000} s"
    return f"{ms // 3_600_000} h {ms % 3_600_000 // 60_000} min"


def value(text: str | None, *, full: bool = False) -> str:
    """A stored JSON value inline, shortened past ``MAX_SHOWN`` characters unless ``full``."""
    if text is None:
        return "null"
    flat = " ".join(text.split()) if "\n" in text else text
    if full or len(flat) <= MAX_SHOWN:
        return flat
    return f"{flat[:MAX_SHOWN]}… (+{len(flat) - MAX_SHOWN:,} characters; --full shows all)"


def _error(error: StepError | None) -> str:
    if error is None:
        return "no error stored"
    kind = error.kind.value if error.kind is not None else "error"
    return f"{kind}: {value(error.message)}{_causes(error)}"


def _causes(error: StepError) -> str:
    # Since workflowjournal.v6: the exceptions behind the failure, nearest first, each clipped.
    return "".join(f"; caused by {value(str(cause))}" for cause in error.causes)


def _took(started: StepStarted | None, end_at: int | None, attempt: int | None, failed: int = 0) -> str:
    parts = []
    if started is not None and end_at is not None:
        parts.append(f"took {duration(max(end_at - started.at, 0))}")
    if attempt is not None:
        parts.append(f"attempt {attempt}")
    if failed:
        parts.append(f"{failed} failed attempt{'s' if failed != 1 else ''} journaled before")
    return f"  ({', '.join(parts)})" if parts else ""


def _step(started: StepStarted) -> str:
    what = f"step {started.path} {started.kind}"
    if started.name:
        what += f" {started.name}"
    if started.due is not None:
        what += f", due {instant(started.due)}"
    return what


def _what(record: JournalRecord, steps: dict[str, StepStarted], first: Started | None, full: bool,
          failed: int = 0) -> tuple[int | None, str]:
    """The record's time and its description."""
    if isinstance(record, Started):
        text = f"started with {value(record.input, full=full)}"
        if record.run:
            text = f"run {record.run} " + text
        if record.parent_workflow:
            text += f"  (child of {record.parent_workflow} {record.parent_id}, step {record.parent_path})"
        return record.at, text
    if isinstance(record, StepStarted):
        return record.at, _step(record)
    if isinstance(record, StepCompleted):
        started = steps.get(record.path)
        consumed = f" (signal #{record.signal})" if record.signal is not None else ""
        return record.at, (f"step {record.path} done{consumed}: {value(record.result, full=full)}"
                           + _took(started, record.at, record.attempt, failed))
    if isinstance(record, StepFailed):
        started = steps.get(record.path)
        return record.at, (f"step {record.path} failed, {_error(record.error)}"
                           + _took(started, record.at, record.attempt, failed))
    if isinstance(record, StepAttemptFailed):
        error = record.error.message if record.error.type is None or record.error.message.startswith(
            record.error.type) else f"{record.error.type}: {record.error.message}"
        return record.at, (f"step {record.path} attempt {record.attempt} failed, {value(error)}"
                           f"{_causes(record.error)}; "
                           f"next attempt at {instant(record.retry_at)} "
                           f"(in {duration(max(record.retry_at - record.at, 0))})")
    if isinstance(record, SignalReceived):
        named = f" (id {record.signal_id})" if record.signal_id is not None else ""
        return record.at, f"signal {record.name}{named}: {value(record.payload, full=full)}"
    if isinstance(record, UpdateReceived):
        waits = f", answer to {record.reply_to}" if record.reply_to else ""
        return record.at, f"update {record.name} (id {record.update_id}{waits}): {value(record.payload, full=full)}"
    if isinstance(record, UpdateAnswered):
        if record.error is not None:
            return record.at, f"update {record.update_id} failed, {_error(record.error)}"
        return record.at, f"update {record.update_id} answered: {value(record.result or 'null', full=full)}"
    if isinstance(record, ContinuedAsNew):
        return record.at, f"continued as new: run {record.run} with {value(record.input, full=full)}"
    if isinstance(record, VersionMarker):
        return None, f"version {record.change_id} = {record.version} (at step {record.position})"
    if isinstance(record, CancelRequested):
        return record.at, "cancel requested"
    if isinstance(record, ChildOutcome):
        told = value(record.result, full=full) if record.outcome == "finished" else _error(record.error)
        told = "" if record.outcome == "cancelled" else f": {told}"
        return record.at, f"child of step {record.path} ({record.name}) {record.outcome}{told}"
    if isinstance(record, Ended):
        if record.outcome == "finished":
            told = f": {value(record.result, full=full)}"
        elif record.outcome == "faulted":
            told = f", {_error(record.error)}"
        else:
            told = ""
        after = f"  (after {duration(max(record.at - first.at, 0))})" if first is not None else ""
        return record.at, f"ended {record.outcome}{told}{after}"
    return None, type(record).__name__


def journal_lines(records: Sequence[JournalRecord], *, full: bool = False) -> list[str]:
    """The journal ``records`` (oldest first), one line each, as a person reads them."""
    steps: dict[str, StepStarted] = {}
    first = records[0] if records and isinstance(records[0], Started) else None
    lines = []
    width = len(str(records[-1].seq)) if records else 1
    failed: dict[str, int] = {}
    for record in records:
        if isinstance(record, StepStarted):
            steps[record.path] = record
        elif isinstance(record, StepAttemptFailed):
            failed[record.path] = failed.get(record.path, 0) + 1
        at, text = _what(record, steps, first, full, failed.get(getattr(record, "path", ""), 0)
                         if isinstance(record, (StepCompleted, StepFailed)) else 0)
        lines.append(f"{instant(at)}  #{record.seq:<{width}}  {text}")
    return lines


def summary(workflow: str, instance_id: str, records: Sequence[JournalRecord]) -> str:
    """One line above the journal: the instance, how it stands, and since when."""
    if not records:
        return f"{workflow} {instance_id}: never started"
    last = records[-1]
    first = records[0]
    if isinstance(last, Ended):
        lasted = f" after {duration(max(last.at - first.at, 0))}" if isinstance(first, Started) else ""
        return f"{workflow} {instance_id}: {last.outcome}{lasted}, {len(records)} records"
    ended = {r.path for r in records if isinstance(r, (StepCompleted, StepFailed))}
    waiting = [r for r in records if isinstance(r, StepStarted) and r.path not in ended]
    if not waiting:
        return f"{workflow} {instance_id}: running, {len(records)} records"
    waits = ", ".join(f"step {r.path} {r.kind}{' ' + r.name if r.name else ''} since {instant(r.at)}"
                      for r in waiting[:5])
    more = f" and {len(waiting) - 5} more" if len(waiting) > 5 else ""
    return f"{workflow} {instance_id}: running, waiting on {waits}{more}; {len(records)} records"
