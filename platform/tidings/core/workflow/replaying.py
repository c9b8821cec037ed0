"""Replay's bookkeeping: the cursor over the stored journal and how records are matched.

While replaying, the body produces its records again; each is matched against the stored
record at the cursor (``same_record``) and the stored one wins. A mismatch raises
``tidings.errors.JournalMismatch``, which the interpreter turns into parking.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidings.core.workflow.journal import (
    Ended,
    JournalRecord,
    StepCompleted,
    StepFailed,
    StepStarted,
    VersionMarker,
)
from tidings.core.workflow.paths import split_path


class JournalCursor:
    """The journal being replayed, and what ``version`` needs to know about it."""

    __slots__ = ("records", "pos", "versions", "max_step")

    def __init__(self, records: Sequence[JournalRecord]) -> None:
        self.records = records
        self.pos = 0
        self.versions: dict[tuple[str, str], int] = {}
        # Per branch prefix, the highest step number the journal holds: "had passed".
        self.max_step: dict[str, int] = {}
        for record in records:
            kind = type(record)
            if kind is StepStarted:
                prefix, number = split_path(record.path)  # type: ignore[union-attr]
                if number > self.max_step.get(prefix, 0):
                    self.max_step[prefix] = number
            elif kind is VersionMarker:
                self.versions[(record.position, record.change_id)] = record.version  # type: ignore[union-attr]

    def peek(self) -> JournalRecord | None:
        """Return the stored record at the cursor, skipping version markers; None at the end.

        Version markers are found through ``versions``, never in order: a marker may have
        been appended after later records when it was new in the middle of a replay.
        """
        records = self.records
        while self.pos < len(records) and type(records[self.pos]) is VersionMarker:
            self.pos += 1
        return records[self.pos] if self.pos < len(records) else None


def same_record(stored: JournalRecord, produced: JournalRecord) -> bool:
    """Whether a produced record is the stored one (values and times excepted: stored wins)."""
    kind = type(produced)
    if type(stored) is not kind:
        return False
    if kind is StepStarted:
        return (
            stored.path == produced.path  # type: ignore[union-attr]
            and stored.kind == produced.kind  # type: ignore[union-attr]
            and stored.name == produced.name  # type: ignore[union-attr]
        )
    if kind is StepCompleted or kind is StepFailed:
        return stored.path == produced.path and stored.signal == produced.signal  # type: ignore[union-attr]
    if kind is Ended:
        return stored.outcome == produced.outcome  # type: ignore[union-attr]
    return True


def describe_record(record: JournalRecord) -> str:
    """Describe a record for a parking reason."""
    if isinstance(record, StepStarted):
        return f"step {record.path} ({record.kind} {record.name!r})".replace(" ''", "")
    if isinstance(record, (StepCompleted, StepFailed)):
        return f"the end of step {record.path}"
    return type(record).__name__
