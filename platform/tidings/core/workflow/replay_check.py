"""The replay checker: would the code now on disk park an instance with this journal?

``check_journal(definition, instance_id, records, now)`` replays one journal with the
interpreter the worker runs (``WorkflowInstance.replay``), so the verdict cannot drift from
what a worker would do after a deploy; ``check_journals`` does it for many and returns a
``ReplayReport``. Nothing runs: activities, timers and sends are effects, which are dropped.

For an instance that would park it says where the body and its journal part (the first
mismatch: the path, what the journal holds there, what the code now produces) and the
``ctx.version`` change that keeps such instances on the old steps. The interpreter raises the
mismatch and parks; to keep the two records it compared, the checker replays through
``_Probe``, which notes them as the interpreter's own ``_record`` and ``_apply_stored`` see
them and changes nothing else (the parking reason is the interpreter's own text).

Pure: journals in, a report out. ``tidings replay`` and ``tidings.testing.replay`` read the
journals (the journal topic, or an export file) and print the report.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings.core.workflow.definition import WorkflowDefinition
from tidings.core.workflow.effects import ReportParked
from tidings.core.workflow.interpreter import WorkflowInstance
from tidings.core.workflow.journal import (
    Ended,
    JournalRecord,
    Started,
    StepCompleted,
    StepFailed,
    StepStarted,
)
from tidings.core.workflow.outcomes import WorkflowStatus
from tidings.core.workflow.paths import split_path
from tidings.core.workflow.replaying import same_record
from tidings.errors import JournalMismatch

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called every ``PROGRESS_EVERY`` instances and at the end."""

PROGRESS_EVERY = 1_000


def _no_entropy(n: int) -> bytes:
    # Values drawn after a journal's end are never stored by the checker: no randomness needed.
    return bytes(n)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Where a body and its journal part.

    Attributes:
        path: The step's path (``2``, or ``3.1.2`` inside branch 1 of the parallel step 3);
            empty when the record the journal holds there belongs to no step.
        expected: What the journal holds there, e.g. ``activity 'charge'``.
        found: What the code now produces there, e.g. ``activity 'reserve'``, or
            ``the end of the body``; None when the code produced nothing the journal could
            be compared with (a stored result it cannot read, a step it no longer waits on).
        reason: The interpreter's parking reason, as the worker would log it.
    """

    path: str
    expected: str
    found: str | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The mismatch as a JSON object."""
        return {"path": self.path, "expected": self.expected, "found": self.found, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Finding:
    """An instance the code now would not resume: it would park (or fault at once).

    Attributes:
        instance_id: The instance.
        verdict: ``parks`` or ``faults`` (the body raises where it ran before).
        mismatch: The first mismatch (a fault's ``reason`` is its error).
        suggestion: The ``ctx.version`` change that keeps such instances on the old steps.
    """

    instance_id: str
    verdict: str
    mismatch: Mismatch
    suggestion: str

    def to_json(self) -> dict[str, Any]:
        """The finding as a JSON object."""
        return {"instance_id": self.instance_id, "verdict": self.verdict, **self.mismatch.to_json(),
                "suggestion": self.suggestion}


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What replaying every instance's journal against the code now found.

    Attributes:
        workflow: The workflow's name.
        checked: Instances replayed (running or parked ones: an ended instance's body never
            runs again, so it is counted in ``ended`` and not replayed).
        ended: Instances whose journal ends with their outcome.
        findings: Each instance that would park or fault, in the order checked.
        errors: One line per record or journal that could not be read or is incomplete
            (its instance is not checked).
    """

    workflow: str
    checked: int
    ended: int
    findings: tuple[Finding, ...]
    errors: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when no instance would park or fault and every record was read."""
        return not self.findings and not self.errors

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (``tidings replay --json``)."""
        return {"workflow": self.workflow, "ok": self.ok, "checked": self.checked, "ended": self.ended,
                "would_park": sum(1 for f in self.findings if f.verdict == "parks"),
                "would_fault": sum(1 for f in self.findings if f.verdict == "faults"),
                "findings": [f.to_json() for f in self.findings], "errors": list(self.errors)}

    def lines(self, *, each: int = 20) -> list[str]:
        """The report for people: a summary, up to ``each`` instances per distinct mismatch, and
        each distinct mismatch's suggestion once."""
        parks = sum(1 for f in self.findings if f.verdict == "parks")
        faults = len(self.findings) - parks
        head = (f"{self.workflow}: {self.checked:,} running instance{'s' if self.checked != 1 else ''} replayed, "
                f"{self.ended:,} ended (not replayed); ")
        if self.ok:
            return [head + "none would park."]
        lines = [head + f"{parks:,} would park, {faults:,} would fault"
                 + (f", {len(self.errors):,} unreadable record{'s' if len(self.errors) != 1 else ''}"
                    if self.errors else "") + "."]
        groups: dict[tuple[str, str, str, str | None], list[Finding]] = {}
        for finding in self.findings:
            m = finding.mismatch
            groups.setdefault((finding.verdict, m.path, m.expected, m.found), []).append(finding)
        for (verdict, path, expected, found), found_in in groups.items():
            where = f"step {path}" if path else "its journal"
            now = f"the code now has {found}" if found is not None else found_in[0].mismatch.reason
            lines.append("")
            would = "would park" if verdict == "parks" else "would fault"
            lines.append(f"{len(found_in):,} instance{'s' if len(found_in) != 1 else ''} {would} at {where}: "
                         f"the journal holds {expected}, {now}")
            more = f" and {len(found_in) - each:,} more (--json lists every one)" if len(found_in) > each else ""
            lines.append("  " + ", ".join(f.instance_id for f in found_in[:each]) + more)
            lines.append(f"  the worker would say: {found_in[0].mismatch.reason}")
            lines.append("  fix: " + found_in[0].suggestion.replace("\n", "\n  "))
        if self.errors:
            lines.append("")
            lines.append(f"{len(self.errors):,} unreadable (their instances were not checked):")
            lines.extend(f"  {error}" for error in self.errors[:each])
            if len(self.errors) > each:
                lines.append(f"  ... and {len(self.errors) - each:,} more (--json lists every one)")
        return lines


class _Probe(WorkflowInstance):
    """The interpreter, noting the first two records it found unequal (nothing else changes)."""

    __slots__ = ("first",)

    def __init__(self, definition: WorkflowDefinition, instance_id: str, **kwargs: Any) -> None:
        super().__init__(definition, instance_id, **kwargs)
        self.first: tuple[JournalRecord, JournalRecord | None] | None = None

    def _record(self, record: JournalRecord) -> JournalRecord:
        replay = self._replay
        if replay is not None and self.first is None:
            stored = replay.peek()
            if stored is not None and not same_record(stored, record):
                self.first = (stored, record)
        return super()._record(record)

    def _apply_stored(self, record: JournalRecord) -> None:
        try:
            super()._apply_stored(record)
        except JournalMismatch:
            if self.first is None:
                self.first = (record, None)
            raise


def _what(record: JournalRecord) -> str:
    """A journal record as the report names it."""
    if isinstance(record, StepStarted):
        return f"{record.kind} {record.name!r}" if record.name else record.kind
    if isinstance(record, (StepCompleted, StepFailed)):
        return f"the end of step {record.path}"
    if isinstance(record, Ended):
        return f"the end of the body ({record.outcome})"
    return {"SignalReceived": "a signal", "CancelRequested": "the cancel request", "Started": "the start",
            "ChildOutcome": "a child's end"}.get(type(record).__name__, type(record).__name__)


def _change_id(path: str, found: JournalRecord | None, expected: JournalRecord) -> str:
    named = found if isinstance(found, StepStarted) and found.name else expected
    name = named.name if isinstance(named, StepStarted) and named.name else getattr(named, "kind", "change")
    return re.sub(r"[^A-Za-z0-9]+", "-", f"{name}-at-{path or 'start'}").strip("-").lower()


def suggest(path: str, expected: JournalRecord, found: JournalRecord | None) -> str:
    """The ``ctx.version`` change that keeps instances already past ``path`` on the old code.

    ``ctx.version(change_id, 2)`` placed where the steps changed gives 1 to an instance whose
    journal holds a step of that branch at or after the position (it had passed it: exactly
    the instances that park) and 2 to every other, which stores it: docs/workflows.md.
    """
    prefix, number = split_path(path) if path else ("", 1)
    change = _change_id(path, found, expected)
    where = "in the body" if not prefix else f"in branch {prefix.rstrip('.').rsplit('.', 1)[-1]} of the parallel step {prefix.rstrip('.').rsplit('.', 1)[0]}"
    after = f"right after step {prefix}{number - 1}" if number > 1 else "before its first step"
    old = _what(expected)
    if isinstance(found, Ended):
        return (f"{where}, {after}, keep the steps the code no longer has for instances that had reached them:\n"
                f"    if await ctx.version({change!r}, 2) == 1:\n"
                f"        ...  # the old steps, from {old} on\n"
                f"(instances past step {path} get 1; new ones get 2 and skip them)")
    if found is None:
        return (f"{where}, {after}, run the old step ({old}) for instances that had passed it:\n"
                f"    if await ctx.version({change!r}, 2) >= 2:\n"
                f"        ...  # the new code\n"
                f"    else:\n"
                f"        ...  # the old code, with {old} as before (same kind, name and result type)\n"
                f"(instances past step {path} get 1; new ones get 2)")
    return (f"{where}, {after}, branch on a version so instances that had passed it keep the old steps:\n"
            f"    if await ctx.version({change!r}, 2) >= 2:\n"
            f"        ...  # the new code, from {_what(found)} on\n"
            f"    else:\n"
            f"        ...  # the old code, from {old} on\n"
            f"(instances past step {path} get 1; new ones get 2)")


def check_journal(
    definition: WorkflowDefinition, instance_id: str, records: Sequence[JournalRecord], now: int
) -> Finding | None:
    """Replay one running instance's journal against ``definition``; a ``Finding`` if it would not resume.

    Args:
        definition: The workflow, with the code now on disk.
        instance_id: The instance's id.
        records: Its journal in seq order, from ``Started`` (seq 1) on.
        now: The time the replay runs at (ms since the epoch): a step whose deadline passed
            fails there as it would on a worker.
    """
    instance, decision = _Probe.replay(definition, instance_id, records, now, entropy=_no_entropy)
    status = decision.status
    if status is WorkflowStatus.PARKED:
        reason = next((e.reason for e in decision.effects if isinstance(e, ReportParked)), "parked")
        first = instance.first  # type: ignore[attr-defined]
        if first is None:
            return Finding(instance_id, "parks", Mismatch("", "its records", None, reason),
                           "the interpreter parked it without a step mismatch; see the reason")
        expected, found = first
        path = getattr(expected, "path", None) or getattr(found, "path", None) or ""
        return Finding(instance_id, "parks",
                       Mismatch(path, _what(expected), None if found is None else _what(found), reason),
                       suggest(path, expected, found))
    if status is WorkflowStatus.FAULTED and not any(isinstance(r, Ended) for r in records):
        error = getattr(instance.outcome, "error", None)
        message = getattr(error, "message", "faulted")
        last = next((r for r in reversed(records) if isinstance(r, StepStarted)), None)
        path = last.path if last is not None else ""
        return Finding(instance_id, "faults",
                       Mismatch(path, "a running instance", "the body raising", f"the body now raises: {message}"),
                       "the body raises where it ran before: a changed type or code after the journal's "
                       "end; fix the code, or keep the old behaviour under a ctx.version branch")
    return None


def incomplete(records: Sequence[JournalRecord]) -> str | None:
    """Why a journal cannot be replayed as it is (no start, missing seqs), or None."""
    if not records:
        return "an empty journal"
    first = records[0]
    # A run that continued as new starts at the seq after its predecessor's last record.
    start = first.seq if isinstance(first, Started) and (first.run or 1) > 1 else 1
    if not isinstance(first, Started) or first.seq != start:
        return f"it starts with seq {first.seq} ({type(first).__name__}), not with its start (seq 1)"
    for expected, record in enumerate(records, start):
        if record.seq != expected:
            return f"seq {expected} is missing (the next record has seq {record.seq})"
    return None


def check_journals(
    definition: WorkflowDefinition,
    journals: Iterable[tuple[str, Sequence[JournalRecord]]],
    now: int,
    *,
    limit: int | None = None,
    errors: Sequence[str] = (),
    progress: Progress | None = None,
    total: int = 0,
) -> ReplayReport:
    """Replay every journal of ``journals`` (instance id, records) and report the instances that
    would not resume.

    Args:
        definition: The workflow, with the code now on disk.
        journals: Each instance's id and journal in seq order.
        now: The time the replays run at (ms since the epoch).
        limit: Check at most this many running instances (None: all).
        errors: Lines about records already found unreadable by the reader (kept in the report).
        progress: Called with (instances done, ``total``) every ``PROGRESS_EVERY`` instances.
        total: How many instances ``journals`` holds, for ``progress``.
    """
    found: list[Finding] = []
    problems = list(errors)
    checked = ended = done = 0
    for instance_id, records in journals:
        if limit is not None and checked >= limit:
            break
        done += 1
        if progress is not None and done % PROGRESS_EVERY == 0:
            progress(done, total)
        why = incomplete(records)
        if why is not None:
            problems.append(f"{instance_id}: not checked: {why}")
            continue
        if isinstance(records[-1], Ended):
            ended += 1
            continue
        checked += 1
        finding = check_journal(definition, instance_id, records, now)
        if finding is not None:
            found.append(finding)
    if progress is not None:
        progress(done, total)
    return ReplayReport(definition.name, checked, ended, tuple(found), tuple(problems))
