"""A schedule's rule in words (pure): what ``tidings schedule show``, ``tidings list KIND
schedule`` and the console print."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from ..core.schedule import ScheduleRule, Weekday


def interval_text(interval: timedelta) -> str:
    """An interval as ``--every`` writes it (``1h30m``); sub-second parts as ``500ms``."""
    micros = interval // timedelta(microseconds=1)
    parts = []
    for unit, size in (("d", 86_400_000_000), ("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000)):
        count, micros = divmod(micros, size)
        if count:
            parts.append(f"{count}{unit}")
    if micros:
        parts.append(f"{micros / 1000:g}ms")
    return "".join(parts) or "0s"


def day_runs(days: Sequence[Weekday]) -> list[tuple[Weekday, Weekday]]:
    """Consecutive days as (first, last) runs: Monday..Friday is one run."""
    runs: list[tuple[Weekday, Weekday]] = []
    for day in sorted(days):
        if runs and day == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], day)
        else:
            runs.append((day, day))
    return runs


def _day_words(days: Sequence[Weekday]) -> str:
    parts: list[str] = []
    for first, last in day_runs(days):
        names = [Weekday(day).name.capitalize() for day in range(first, last + 1)]
        # Three or more days in a row read better as a range: "Monday to Friday".
        parts += [f"{names[0]} to {names[-1]}"] if len(names) >= 3 else names
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def rule_words(rule: ScheduleRule) -> str:
    """The rule in words: ``every day at 09:00 in Europe/Oslo``."""
    if rule.kind == "every":
        assert rule.interval is not None
        return f"every {interval_text(rule.interval)}, counted from the creation or last change"
    assert rule.at is not None
    when = "every day" if rule.kind == "daily" else f"every {_day_words(rule.days)}"
    at = rule.at.strftime("%H:%M:%S" if rule.at.second else "%H:%M")
    return f"{when} at {at} in {rule.zone}"
