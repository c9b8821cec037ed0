"""Due times: when a rule is due, and which due times a fire runs. Pure: time is an argument.

The schedule aggregate calls ``decide_fire`` when the dispatcher fires it, with the
instant of the fire; the dispatcher calls ``next_due`` to know when to wake. The rules:

- daily and weekly due times are computed in the rule's zone and returned in UTC; a local
  time skipped by a clock change is due at the next local time that exists (the end of the
  gap), and one that occurs twice is due once, at its first occurrence;
- ``every`` is due at ``anchor + k * interval`` for k >= 1, the anchor being the schedule's
  creation or last change;
- no due time at or before the anchor is due (a change never runs a due time it predates);
- nothing inside a pause (from the pause to the resume, both included) runs;
- a fire more than ``EARLY_TOLERANCE`` before the due time it names is refused;
- a fire is on time when the oldest due time it serves is at most ``ON_TIME_GRACE`` old;
  it then runs each due time it serves, whatever the policy. Later than that, the due times
  were missed: ``CatchUp.LATEST`` runs the most recent, ``ALL`` runs each, oldest first, at
  most the ``MAX_CATCH_UP_RUNS`` most recent, and ``NONE`` runs none.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from tidings.core.schedule.rules import CatchUp, ScheduleRule
from tidings.core.schedule.runs import format_due, utc

EARLY_TOLERANCE: Final = timedelta(seconds=1)
"""How early a fire may be: one more than this before its due time is refused, so a fault
in a dispatcher (or a clock) cannot start a run more than a second early."""

ON_TIME_GRACE: Final = timedelta(minutes=1)
"""How late a fire may be and still count as on time: its due times are not missed, so they
run whatever the catch-up policy (this is what lets ``CatchUp.NONE`` run a fire 50 s late)."""

MAX_CATCH_UP_RUNS: Final = 1000
"""Most runs ``CatchUp.ALL`` starts for missed due times: the most recent ones."""

# Daily and weekly due times are found by walking local dates; a weekly rule with one day
# has a due time within eight dates of any instant, and a zone may skip a whole date.
_DATES_SEARCHED: Final = 16
_MICROSECOND: Final = timedelta(microseconds=1)
_SECOND: Final = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Pause:
    """A pause of a schedule: due times from ``start`` to ``end`` (both included) never run.

    ``end`` is the resume, or ``None`` while the schedule is still paused.
    """

    start: datetime
    end: datetime | None = None

    def __post_init__(self) -> None:
        start = utc(self.start, what="a pause's start")
        end = None if self.end is None else utc(self.end, what="a resume")
        if end is not None and end < start:
            raise ValueError(f"a resume at {end} is before its pause at {start}")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    def covers(self, due: datetime) -> bool:
        """Whether ``due`` (UTC) falls inside the pause."""
        return self.start <= due and (self.end is None or due <= self.end)


@dataclass(frozen=True, slots=True)
class FireDecision:
    """What a fire decides.

    Attributes:
        runs: the due times to run, oldest first, in UTC.
        through: every due time at or before this instant is now handled (run or dropped);
            the schedule stores it and passes it back as ``handled_through``.
        next_due: the first due time after ``through`` outside every pause, or ``None``
            while the schedule is paused; the dispatcher wakes for it.
    """

    runs: tuple[datetime, ...]
    through: datetime
    next_due: datetime | None


@dataclass(frozen=True, slots=True)
class FireRefused:
    """A fire more than ``EARLY_TOLERANCE`` before its due time: nothing is decided."""

    due: datetime
    now: datetime
    reason: str


def _first_occurrence(day: date, at: time, zone: ZoneInfo) -> datetime:
    """Return the UTC instant of local ``day`` ``at`` in ``zone``, resolving clock changes."""
    local = datetime.combine(day, at, tzinfo=zone)  # fold=0: the first of a repeated time
    moment = local.astimezone(UTC)
    if moment.astimezone(zone).replace(tzinfo=None) == local.replace(tzinfo=None):
        return moment
    # The local time does not exist. fold=0 read it with the offset before the change and
    # fold=1 with the one after, so the change lies between the two readings; the first
    # instant on the new offset is the next local time that exists. tzdata changes fall on
    # whole seconds, so a bisection over seconds finds it exactly.
    after_offset = moment.astimezone(zone).utcoffset()
    low = local.replace(fold=1).astimezone(UTC).replace(microsecond=0)
    high = moment.replace(microsecond=0) + _SECOND
    while high - low > _SECOND:
        middle = low + _SECOND * ((high - low) // _SECOND // 2)
        if middle.astimezone(zone).utcoffset() == after_offset:
            high = middle
        else:
            low = middle
    return high


def _local_due_times(rule: ScheduleRule, around: datetime, step: int) -> Iterator[datetime]:
    """Yield the rule's daily or weekly due times from a date before ``around``, in order of
    ``step`` (+1 forwards, -1 backwards), over ``_DATES_SEARCHED`` local dates."""
    assert rule.at is not None
    zone = rule.tz
    start = around.astimezone(zone).date() - timedelta(days=step)
    for offset in range(_DATES_SEARCHED):
        day = start + timedelta(days=offset * step)
        if rule.kind == "weekly" and day.weekday() not in rule.days:
            continue
        yield _first_occurrence(day, rule.at, zone)


def due_after(rule: ScheduleRule, instant: datetime, *, anchor: datetime) -> datetime:
    """Return the first due time of ``rule`` after ``instant`` and after ``anchor``, in UTC.

    Args:
        rule: the schedule's rule.
        instant: due times at or before it are not returned.
        anchor: the schedule's creation or last change; ``every`` counts from it, and no
            due time at or before it is due.

    Raises:
        ValueError: ``instant`` or ``anchor`` is naive.
    """
    anchor = utc(anchor, what="the anchor")
    bound = max(utc(instant), anchor)
    if rule.kind == "every":
        assert rule.interval is not None
        return anchor + rule.interval * ((bound - anchor) // rule.interval + 1)
    for due in _local_due_times(rule, bound, +1):
        if due > bound:
            return due
    raise AssertionError(f"{rule} has no due time within {_DATES_SEARCHED} days of {bound}")


def due_at_or_before(rule: ScheduleRule, instant: datetime, *, anchor: datetime) -> datetime | None:
    """Return the last due time of ``rule`` at or before ``instant`` and after ``anchor``.

    Returns:
        The due time in UTC, or ``None`` when no due time lies in ``(anchor, instant]``.

    Raises:
        ValueError: ``instant`` or ``anchor`` is naive.
    """
    anchor = utc(anchor, what="the anchor")
    instant = utc(instant)
    if instant <= anchor:
        return None
    if rule.kind == "every":
        assert rule.interval is not None
        steps = (instant - anchor) // rule.interval
        return anchor + rule.interval * steps if steps >= 1 else None
    for due in _local_due_times(rule, instant, -1):
        if due <= instant:
            return due if due > anchor else None
    raise AssertionError(f"{rule} has no due time within {_DATES_SEARCHED} days of {instant}")


def _covering(pauses: Sequence[Pause], due: datetime) -> Pause | None:
    return next((pause for pause in pauses if pause.covers(due)), None)


def next_due(
    rule: ScheduleRule, instant: datetime, *, anchor: datetime, pauses: Sequence[Pause] = ()
) -> datetime | None:
    """Return the first due time after ``instant`` and ``anchor`` that no pause covers.

    Returns:
        The due time in UTC, or ``None`` when a pause not yet resumed covers every later one.
    """
    due = due_after(rule, instant, anchor=anchor)
    # Each turn moves past the end of a pause, so the loop ends within len(pauses) turns.
    while (pause := _covering(pauses, due)) is not None:
        if pause.end is None:
            return None
        due = due_after(rule, pause.end, anchor=anchor)
    return due


def due_times(rule: ScheduleRule, start: datetime, end: datetime, *, anchor: datetime) -> Iterator[datetime]:
    """Yield every due time in ``(start, end]`` after ``anchor``, oldest first, in UTC."""
    end = utc(end)
    due = due_after(rule, start, anchor=anchor)
    while due <= end:
        yield due
        due = due_after(rule, due, anchor=anchor)


def _latest_due_times(
    rule: ScheduleRule,
    *,
    anchor: datetime,
    floor: datetime,
    horizon: datetime,
    pauses: Sequence[Pause],
    limit: int,
) -> list[datetime]:
    """Return at most ``limit`` due times in ``(floor, horizon]`` outside pauses, newest first."""
    found: list[datetime] = []
    cursor = horizon
    while len(found) < limit:
        # The anchor, not the floor, places an every rule's due times on their grid.
        due = due_at_or_before(rule, cursor, anchor=anchor)
        if due is None or due <= floor:
            break
        pause = _covering(pauses, due)
        if pause is None:
            found.append(due)
            cursor = due - _MICROSECOND
        else:  # jump over the whole pause instead of walking its due times one by one
            cursor = pause.start - _MICROSECOND
    return found


def decide_fire(
    rule: ScheduleRule,
    catch_up: CatchUp,
    *,
    due: datetime,
    now: datetime,
    anchor: datetime,
    handled_through: datetime | None = None,
    pauses: Sequence[Pause] = (),
) -> FireDecision | FireRefused:
    """Decide which due times a fire runs, from the schedule's own state.

    The dispatcher fires for the due time its index holds, which is only a hint: the due
    times that run are those of ``rule`` after ``anchor`` and ``handled_through``, up to
    the later of ``now`` and ``due``, outside every pause; when the oldest of them is more
    than ``ON_TIME_GRACE`` old they were missed, and ``catch_up`` chooses among them. A fire
    for a due time already handled (a repeated or stale fire) decides no run.

    Args:
        rule: the schedule's current rule.
        catch_up: the schedule's catch-up policy.
        due: the due time the dispatcher fires for.
        now: the instant of the fire.
        anchor: the schedule's creation or last change; nothing at or before it runs.
        handled_through: the ``through`` of the schedule's last fire, if any.
        pauses: the schedule's pauses (at least those after ``handled_through``).

    Returns:
        ``FireRefused`` when ``now`` is more than ``EARLY_TOLERANCE`` before ``due``;
        otherwise the runs, the new ``through`` and the next due time.

    Raises:
        ValueError: an instant is naive.
    """
    due = utc(due, what="a fire's due time")
    now = utc(now, what="a fire's instant")
    anchor = utc(anchor, what="the anchor")
    if due - now > EARLY_TOLERANCE:
        return FireRefused(
            due=due,
            now=now,
            reason=(
                f"fire at {format_due(now)} is {(due - now).total_seconds():g} s before its due "
                f"time {format_due(due)}; a fire more than {EARLY_TOLERANCE.total_seconds():g} s "
                "early is refused"
            ),
        )
    floor = anchor if handled_through is None else max(anchor, utc(handled_through))
    horizon = max(now, due)
    if horizon <= floor:
        return FireDecision((), floor, next_due(rule, floor, anchor=anchor, pauses=pauses))
    oldest = next_due(rule, floor, anchor=anchor, pauses=pauses)
    if oldest is None or oldest > horizon:
        newest_first: list[datetime] = []
    else:
        # A fire is on time when the oldest due time it serves is at most a minute old: a
        # dispatcher that fell a little behind runs each due time. Later than that, the due
        # times were missed (the worker was down) and the policy chooses among them.
        on_time = now - oldest <= ON_TIME_GRACE
        if on_time or catch_up is CatchUp.ALL:
            limit = MAX_CATCH_UP_RUNS
        elif catch_up is CatchUp.LATEST:
            limit = 1
        else:
            limit = 0
        newest_first = _latest_due_times(
            rule, anchor=anchor, floor=floor, horizon=horizon, pauses=pauses, limit=limit
        )
    return FireDecision(
        tuple(reversed(newest_first)), horizon, next_due(rule, horizon, anchor=anchor, pauses=pauses)
    )
