"""A workflow instance's journal as the console's timeline: one entry per step, pure.

The journal holds a step's start (``StepStarted``: kind, name, when, a timer's due time) and
its end (``StepCompleted`` with the stored result or ``StepFailed`` with the error, each with
the attempt that ended it); between them the step runs or waits. Signals, a cancel request,
a child's report and the end are entries of their own, so the page shows the whole story in
order. An activity's attempts before the last are not journaled (the owning worker retries in
memory): ``attempts`` is the attempt that ended the step, None while it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.workflow.child_records import ChildOutcome
from ..core.workflow.failures import StepError
from ..core.workflow.journal import (
    CancelRequested,
    Ended,
    JournalRecord,
    SignalReceived,
    Started,
    StepCompleted,
    StepFailed,
    StepStarted,
    UpdateAnswered,
    UpdateReceived,
    VersionMarker,
)
from ..inspection.journal_text import instant


def _iso(ms: int | None) -> str | None:
    return instant(ms).strip() or None


def _error(error: StepError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"kind": error.kind.value if error.kind is not None else None, "message": error.message}


def timeline(records: Sequence[JournalRecord], now_ms: int) -> list[dict[str, Any]]:
    """The entries of the page's timeline, in journal order (a step where it started).

    Each step: ``{"type": "step", "step", "kind", "name", "state": running|completed|failed,
    "started_at", "ended_at", "duration_ms", "attempts", "result", "error", "due_at",
    "signal_seq"}``; a running step's ``duration_ms`` is how long it has run until ``now_ms``.
    Values are the JSON text the worker stored, as stored.
    """
    entries: list[dict[str, Any]] = []
    steps: dict[str, dict[str, Any]] = {}
    started_at: int | None = None
    for record in records:
        if isinstance(record, Started):
            started_at = record.at
            parent = None if not record.parent_workflow else {
                "workflow": record.parent_workflow, "id": record.parent_id, "step": record.parent_path}
            entries.append({"type": "started", "seq": record.seq, "at": _iso(record.at), "input": record.input,
                            "parent": parent})
        elif isinstance(record, StepStarted):
            step: dict[str, Any] = {"type": "step", "seq": record.seq, "step": record.path, "kind": record.kind,
                    "name": record.name or None, "state": "running", "started_at": _iso(record.at),
                    "ended_at": None, "duration_ms": max(now_ms - record.at, 0), "attempts": None,
                    "result": None, "error": None, "due_at": _iso(record.due), "signal_seq": None,
                    "_at": record.at}
            steps[record.path] = step
            entries.append(step)
        elif isinstance(record, (StepCompleted, StepFailed)):
            found = steps.get(record.path)
            if found is not None:
                step = found
            else:  # an end without its start: shown on its own, not dropped
                step = {"type": "step", "seq": record.seq, "step": record.path, "kind": None, "name": None,
                        "started_at": None, "duration_ms": None, "due_at": None, "_at": None}
                entries.append(step)
            step["state"] = "completed" if isinstance(record, StepCompleted) else "failed"
            step["ended_at"] = _iso(record.at)
            step["duration_ms"] = (max(record.at - step["_at"], 0)
                                   if record.at is not None and step["_at"] is not None else None)
            step["attempts"] = record.attempt
            step["result"] = record.result if isinstance(record, StepCompleted) else None
            step["error"] = _error(record.error) if isinstance(record, StepFailed) else None
            step["signal_seq"] = record.signal
        elif isinstance(record, SignalReceived):
            entries.append({"type": "signal", "seq": record.seq, "at": _iso(record.at), "name": record.name,
                            "payload": record.payload})
        elif isinstance(record, UpdateReceived):
            entries.append({"type": "update", "seq": record.seq, "at": _iso(record.at), "name": record.name,
                            "update_id": record.update_id, "payload": record.payload})
        elif isinstance(record, UpdateAnswered):
            entries.append({"type": "update_answered", "seq": record.seq, "at": _iso(record.at),
                            "update_id": record.update_id, "result": record.result, "error": _error(record.error)})
        elif isinstance(record, CancelRequested):
            entries.append({"type": "cancel_requested", "seq": record.seq, "at": _iso(record.at)})
        elif isinstance(record, ChildOutcome):
            entries.append({"type": "child_outcome", "seq": record.seq, "at": _iso(record.at), "step": record.path,
                            "name": record.name, "outcome": record.outcome, "result": record.result,
                            "error": _error(record.error)})
        elif isinstance(record, VersionMarker):
            entries.append({"type": "version", "seq": record.seq, "at": None, "change_id": record.change_id,
                            "version": record.version, "step": record.position})
        elif isinstance(record, Ended):
            entries.append({"type": "ended", "seq": record.seq, "at": _iso(record.at), "outcome": record.outcome,
                            "result": record.result, "error": _error(record.error),
                            "duration_ms": None if started_at is None else max(record.at - started_at, 0)})
    for step in steps.values():
        step.pop("_at", None)
    for entry in entries:
        entry.pop("_at", None)
    return entries
