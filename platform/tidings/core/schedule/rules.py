"""When a schedule is due, and what it does about due times it missed.

A rule is stored in the schedule's journal, so its kinds and fields are a persistent
contract: ``to_data`` and ``ScheduleRule.from_data`` are its stored form, and a zone is
kept by its IANA name (``Europe/Oslo``), never by an offset, so a later change of a
zone's rules (a country dropping summer time) moves the due times with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import time, timedelta
from enum import IntEnum, StrEnum
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MIN_INTERVAL: Final = timedelta(seconds=1)
"""Shortest ``every`` interval. A schedule promises no precision below a second, and a
shorter interval would only make the dispatcher decide runs it cannot start on time."""

RuleKind = Literal["daily", "weekly", "every"]


class CatchUp(StrEnum):
    """Which missed due times run when the dispatcher fires late, for example after downtime.

    The values are stored in the schedule's journal and must not change.
    """

    LATEST = "latest"
    """One run, for the most recent missed due time (the default)."""
    ALL = "all"
    """One run for each missed due time, oldest first, at most for the 1,000 most recent."""
    NONE = "none"
    """No run for a missed due time; one at most a minute late still counts as on time."""


class Weekday(IntEnum):
    """A day of the week, numbered as ``datetime.weekday()`` numbers them."""

    MONDAY = 0
    TUESDAY = 1
    WEDNESDAY = 2
    THURSDAY = 3
    FRIDAY = 4
    SATURDAY = 5
    SUNDAY = 6

    @classmethod
    def parse(cls, value: Weekday | int | str) -> Weekday:
        """Read a weekday from a ``Weekday``, its number 0-6, or its name ("monday", "mon").

        Raises:
            ValueError: the value names no weekday.
            TypeError: the value is neither an int nor a str.
        """
        if isinstance(value, bool):  # bool is an int, and True would silently mean Tuesday
            raise TypeError(f"a weekday is a Weekday, 0-6 or a name, not {value!r}")
        if isinstance(value, int):
            if not 0 <= value <= 6:
                raise ValueError(f"weekday number {value} is outside 0 (Monday) to 6 (Sunday)")
            return cls(value)
        if isinstance(value, str):
            name = value.strip().upper()
            for day in cls:
                if name in (day.name, day.name[:3]):
                    return day
            raise ValueError(f"{value!r} is not a weekday name such as 'monday' or 'mon'")
        raise TypeError(f"a weekday is a Weekday, 0-6 or a name, not {type(value).__name__}")


_ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*")


def load_zone(name: str) -> ZoneInfo:
    """Return the IANA time zone ``name`` (``Europe/Oslo``).

    Raises:
        ValueError: ``name`` is not the name of a zone this machine's tz database holds.
        TypeError: ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"a time zone is an IANA name such as 'Europe/Oslo', not {type(name).__name__}")
    # zoneinfo opens files named by the key: refuse paths ("../x", "/etc/x") before it does.
    if not _ZONE_NAME.fullmatch(name):
        raise ValueError(f"unknown time zone {name!r}: expected an IANA name such as 'Europe/Oslo'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValueError(
            f"unknown time zone {name!r}: expected an IANA name such as 'Europe/Oslo'"
        ) from exc


def _local_time(value: time | str) -> time:
    if isinstance(value, str):
        try:
            value = time.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a local time such as '09:00' or '09:00:30'") from exc
    if not isinstance(value, time):
        raise TypeError(f"a local time is a datetime.time or 'HH:MM', not {type(value).__name__}")
    if value.tzinfo is not None:
        raise ValueError(
            f"the local time {value} carries its own zone; pass a naive time and the zone separately"
        )
    # fold picks an occurrence of a repeated local time; the rule always means the first.
    return value.replace(fold=0)


@dataclass(frozen=True, slots=True)
class ScheduleRule:
    """When a schedule is due. Build one with ``daily``, ``weekly`` or ``every``.

    ``daily`` and ``weekly`` take a local time and an IANA zone: due times are computed in
    the zone and stored in UTC, so 09:00 Europe/Oslo is 08:00 UTC in winter and 07:00 UTC
    in summer. ``every`` counts ``interval`` from the schedule's creation or last change.
    Two rules with the same fields are equal, so a repeated create can store nothing.
    """

    kind: RuleKind
    at: time | None = None
    zone: str | None = None
    days: tuple[Weekday, ...] = ()
    interval: timedelta | None = None

    def __post_init__(self) -> None:
        # The constructors validate; this keeps a directly built rule from being nonsense.
        if self.kind in ("daily", "weekly"):
            if self.at is None or self.zone is None or self.interval is not None:
                raise ValueError(f"a {self.kind} rule has a local time and a zone, and no interval")
            if (self.kind == "weekly") != bool(self.days):
                raise ValueError("a weekly rule names at least one day; a daily rule names none")
        elif self.kind == "every":
            if self.interval is None or self.at is not None or self.zone is not None or self.days:
                raise ValueError("an every rule has an interval and nothing else")
        else:
            raise ValueError(f"unknown rule kind {self.kind!r}: expected daily, weekly or every")

    @classmethod
    def daily(cls, at: time | str, zone: str) -> ScheduleRule:
        """Due every day at the local time ``at`` in ``zone``.

        A local time that a clock change skips is due at the next local time that exists;
        one that occurs twice is due once, at its first occurrence.

        Raises:
            ValueError: ``at`` is not a naive local time, or ``zone`` is no IANA zone.
        """
        load_zone(zone)
        return cls("daily", at=_local_time(at), zone=zone)

    @classmethod
    def weekly(cls, days: Iterable[Weekday | int | str], at: time | str, zone: str) -> ScheduleRule:
        """Due on each of ``days`` (local days in ``zone``) at the local time ``at``.

        Raises:
            ValueError: no day, a day that is no weekday, a bad local time or an unknown zone.
        """
        if isinstance(days, (str, bytes)):
            raise TypeError("days is a collection of weekdays, such as [Weekday.MONDAY]")
        parsed = tuple(sorted({Weekday.parse(day) for day in days}))
        if not parsed:
            raise ValueError("a weekly rule needs at least one day")
        load_zone(zone)
        return cls("weekly", at=_local_time(at), zone=zone, days=parsed)

    @classmethod
    def every(cls, interval: timedelta) -> ScheduleRule:
        """Due every ``interval``, counted from the schedule's creation or last change.

        Raises:
            ValueError: ``interval`` is not positive, or shorter than one second.
            TypeError: ``interval`` is not a ``timedelta``.
        """
        if not isinstance(interval, timedelta):
            raise TypeError(f"an interval is a datetime.timedelta, not {type(interval).__name__}")
        if interval <= timedelta(0):
            raise ValueError(f"an interval must be positive, not {interval}")
        if interval < MIN_INTERVAL:
            raise ValueError(f"an interval must be at least {MIN_INTERVAL}, not {interval}")
        return cls("every", interval=interval)

    @property
    def tz(self) -> ZoneInfo:
        """The zone of a daily or weekly rule (zoneinfo caches it per name)."""
        if self.zone is None:
            raise ValueError("an every rule has no zone")
        return load_zone(self.zone)

    def to_data(self) -> dict[str, Any]:
        """Return the stored, JSON-ready form of the rule (a persistent contract)."""
        if self.kind == "every":
            assert self.interval is not None
            micros = self.interval // timedelta(microseconds=1)
            return {"kind": "every", "interval_us": micros}
        assert self.at is not None
        data: dict[str, Any] = {"kind": self.kind, "at": self.at.isoformat(), "zone": self.zone}
        if self.kind == "weekly":
            data["days"] = [day.name.lower() for day in self.days]
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ScheduleRule:
        """Read a rule from its stored form, checking it as the constructors do.

        Raises:
            ValueError: the data is not a rule's stored form.
        """
        try:
            kind = data["kind"]
            if kind == "daily":
                return cls.daily(data["at"], data["zone"])
            if kind == "weekly":
                return cls.weekly(data["days"], data["at"], data["zone"])
            if kind == "every":
                micros = data["interval_us"]
                if not isinstance(micros, int) or isinstance(micros, bool):
                    raise ValueError(f"interval_us must be an integer, not {micros!r}")
                return cls.every(timedelta(microseconds=micros))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a stored schedule rule: {dict(data)!r} ({exc})") from exc
        raise ValueError(f"unknown rule kind {kind!r}: expected daily, weekly or every")

    def __str__(self) -> str:
        if self.kind == "every":
            return f"every {self.interval}"
        days = "" if self.kind == "daily" else " " + ",".join(d.name[:3].lower() for d in self.days)
        return f"{self.kind}{days} {self.at} {self.zone}"
