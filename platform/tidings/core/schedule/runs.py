"""A scheduled run: its input, and its workflow id, which is the schedule's id and the due time.

The run id is ``{schedule}@{due in UTC}``, the due time written as .NET's round-trip
("O") form with seven fractional digits and ``Z``: ``ada-daily@2026-11-15T08:00:00.0000000Z``.
The id is what makes starts idempotent (a second start of an existing workflow stores
nothing), so its form is a persistent contract: one due time always gives one id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Generic, TypeVar

from tidings.core.limits import MAX_ID_BYTES

InputT = TypeVar("InputT")

_DUE_TEXT: Final = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{7})Z")
_DUE_TEXT_LEN: Final = len("2026-11-15T08:00:00.0000000Z")

MAX_SCHEDULE_ID_BYTES: Final = MAX_ID_BYTES - len("@") - _DUE_TEXT_LEN
"""Longest schedule id, in UTF-8 bytes: its run ids must still fit ``MAX_ID_BYTES``."""


@dataclass(frozen=True, slots=True)
class ScheduledRun(Generic[InputT]):
    """The input of a run that a schedule starts.

    A workflow body cannot read its own id, so the run carries its schedule's id and the
    due time it serves (UTC), next to the input stored with the schedule.
    """

    schedule: str
    due: datetime
    input: InputT


def utc(instant: datetime, *, what: str = "an instant") -> datetime:
    """Return ``instant`` in UTC.

    Raises:
        ValueError: ``instant`` is naive, so no one can tell which moment it means.
    """
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{what} must carry a time zone, got the naive {instant.isoformat()}")
    return instant.astimezone(UTC)


def format_due(due: datetime) -> str:
    """Write ``due`` in UTC as ``2026-11-15T08:00:00.0000000Z`` (.NET "O", seven digits)."""
    moment = utc(due, what="a due time")
    # datetime holds microseconds; the seventh digit (100 ns) is always 0.
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond * 10:07d}Z"


def parse_due(text: str) -> datetime:
    """Read a due time written by ``format_due``.

    Raises:
        ValueError: ``text`` is not in that exact form, or names a sub-microsecond instant.
    """
    match = _DUE_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a due time such as 2026-11-15T08:00:00.0000000Z")
    year, month, day, hour, minute, second, ticks = (int(part) for part in match.groups())
    if ticks % 10:
        raise ValueError(f"{text!r} is finer than a microsecond, which no due time is")
    return datetime(year, month, day, hour, minute, second, ticks // 10, tzinfo=UTC)


def run_id(schedule_id: str, due: datetime) -> str:
    """Return the workflow id of the run of ``schedule_id`` for ``due``.

    Idempotent by: the pair (schedule id, due time); a deleted schedule's id is never
    reused, so a run id never belongs to two schedules.

    Raises:
        ValueError: ``due`` is naive, or ``schedule_id`` is empty.
    """
    if not schedule_id:
        raise ValueError("a schedule id is a non-empty string")
    return f"{schedule_id}@{format_due(due)}"


def parse_run_id(text: str) -> tuple[str, datetime]:
    """Split a run id into its schedule id and due time (the schedule id may contain ``@``).

    Raises:
        ValueError: ``text`` is not a run id.
    """
    schedule_id, at, due_text = text.rpartition("@")
    if not at or not schedule_id:
        raise ValueError(f"{text!r} is not a run id such as ada-daily@2026-11-15T08:00:00.0000000Z")
    return schedule_id, parse_due(due_text)
