"""The pure part of ``tidings list``: rows in, filtered, counted, sorted and printed.

Each kind's reader (``indexes.py``) turns its index into ``Row`` values; everything after that
is here and knows no Kafka: ``--status``, ``--since``/``--until``, ``--limit``, the count per
status, the table a person reads and the JSON lines a machine reads.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from .journal_text import instant

#: ``--since`` durations: a number and a unit.
_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
#: Characters of a detail column (a reason, a dead letter's error) before it is shortened.
DETAIL_WIDTH: Final = 80


@dataclass(frozen=True, slots=True)
class Row:
    """One listed thing: an instance, an aggregate, a dead letter.

    ``at`` is the time the row is sorted and filtered by (ms since the epoch): when a
    workflow instance took its latest status, an aggregate's or saga's last record was
    written, a dead letter was written. ``started_at`` and ``ended_at`` (ms) are when the
    instance started and ended, for the kinds that know (None: unknown, or not ended).
    ``extra`` goes into the JSON line only.
    """

    kind: str
    name: str
    id: str
    status: str | None
    at: int | None
    detail: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    started_at: int | None = None
    ended_at: int | None = None


@dataclass(frozen=True, slots=True)
class Filters:
    """What ``--status``, ``--type``, the time windows and ``--limit`` ask for (None: anything).

    Each window is ``[after, before)`` in ms; a row without the time a window asks about
    (an instance not ended, for ``--ended-*``) does not match it.
    """

    statuses: frozenset[str] = frozenset()
    since: int | None = None
    until: int | None = None
    limit: int | None = None
    names: frozenset[str] = frozenset()
    started_after: int | None = None
    started_before: int | None = None
    ended_after: int | None = None
    ended_before: int | None = None

    def matches(self, row: Row) -> bool:
        if self.statuses and row.status not in self.statuses:
            return False
        if self.names and row.name not in self.names:
            return False
        return (_within(row.at, self.since, self.until)
                and _within(row.started_at, self.started_after, self.started_before)
                and _within(row.ended_at, self.ended_after, self.ended_before))


def _within(at: int | None, after: int | None, before: int | None) -> bool:
    if after is None and before is None:
        return True
    if at is None:
        return False
    return (after is None or at >= after) and (before is None or at < before)


@dataclass(frozen=True, slots=True)
class Selection:
    """The rows to print (newest first, at most ``limit``), and the count per status of all that matched."""

    shown: list[Row]
    counts: Counter[str]
    matched: int


def select(rows: Iterable[Row], filters: Filters) -> Selection:
    """Filter ``rows``, count them per status, keep the ``limit`` newest."""
    matched = [row for row in rows if filters.matches(row)]
    counts = Counter(row.status for row in matched if row.status is not None)
    matched.sort(key=lambda row: (-(row.at or 0), row.name, row.id))
    shown = matched if filters.limit is None else matched[: filters.limit]
    return Selection(shown, counts, len(matched))


def counts_line(selection: Selection, order: Sequence[str], noun: str) -> str:
    """``3 instances: RUNNING 1, FINISHED 2`` (statuses in ``order``, then any other), and how many are shown."""
    known = [status for status in order if selection.counts.get(status)]
    others = sorted(status for status in selection.counts if status not in order)
    parts = ", ".join(f"{status} {selection.counts[status]:,}" for status in [*known, *others])
    plural = noun if selection.matched == 1 else f"{noun}s"
    line = f"{selection.matched:,} {plural}" + (f": {parts}" if parts else "")
    if len(selection.shown) < selection.matched:
        line += f" (showing the {len(selection.shown):,} newest; --limit)"
    return line


def counts_json(selection: Selection) -> dict[str, Any]:
    """The counts as one JSON object: ``{"total": 3, "counts": {"RUNNING": 1, ...}}``."""
    return {"total": selection.matched, "counts": dict(sorted(selection.counts.items()))}


def printable(text: str) -> str:
    """``text`` with control and other unprintable characters escaped: ids come from any producer."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def shorten(text: str, width: int = DETAIL_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else f"{flat[: width - 1]}…"


def table(rows: Sequence[Row], *, name_header: str = "NAME", at_header: str = "SINCE") -> list[str]:
    """The rows as aligned columns, a header first; empty columns (no status, no detail) left out."""
    columns: list[tuple[str, list[str]]] = [
        (name_header, [printable(row.name) for row in rows]),
        ("ID", [printable(row.id) for row in rows]),
        ("STATUS", [row.status or "-" for row in rows]),
        (at_header, [instant(row.at).strip() or "-" for row in rows]),
        ("DETAIL", [printable(shorten(row.detail)) for row in rows]),
    ]
    columns = [(header, cells) for header, cells in columns
               if header not in ("STATUS", "DETAIL") or any(cell not in ("", "-") for cell in cells)]
    widths = [max([len(header), *map(len, cells)]) for header, cells in columns]
    lines = ["  ".join(header.ljust(width) for (header, _), width in zip(columns, widths)).rstrip()]
    for index in range(len(rows)):
        lines.append("  ".join(cells[index].ljust(width) for (_, cells), width in zip(columns, widths)).rstrip())
    return lines


def row_json(row: Row) -> dict[str, Any]:
    """One JSON line: the kind, name, id, status, time (ISO-8601 UTC and ms), detail and extras."""
    line: dict[str, Any] = {"kind": row.kind, "name": row.name, "id": row.id, "status": row.status,
                            "at": instant(row.at).strip() or None, "at_ms": row.at}
    if row.started_at is not None:
        line["started_at"] = instant(row.started_at).strip()
    if row.ended_at is not None:
        line["ended_at"] = instant(row.ended_at).strip()
    if row.detail:
        line["detail"] = row.detail
    line.update(row.extra)
    return line


def parse_when(text: str, *, now: datetime | None = None) -> int:
    """``--since``/``--until WHEN`` as ms since the epoch: a duration back from now (90s, 30m,
    2h, 7d) or an ISO 8601 time (UTC when it names no zone).

    Raises:
        ValueError: neither; the message says what is accepted.
    """
    now = now or datetime.now(UTC)
    duration = _DURATION.match(text.strip())
    if duration:
        amount, unit = duration.groups()
        try:
            return int((now - timedelta(**{_UNITS[unit]: float(amount)})).timestamp() * 1000)
        except OverflowError:
            raise ValueError(f"{text!r} reaches back before the year 1") from None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (90s, 30m, 2h, 7d) nor an ISO 8601 time (2026-11-30T08:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_limit(text: str) -> int:
    """``--limit N``: a whole number of at least 1.

    Raises:
        ValueError: anything else.
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--limit {text!r} is not a whole number of at least 1")
    return value
