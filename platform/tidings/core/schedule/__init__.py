"""Schedules, pure: rules, run ids and due times (SPEC §6). Time always comes in as an argument.

- ``rules``: ``ScheduleRule`` (daily, weekly, every), ``CatchUp``, ``Weekday``;
- ``runs``: ``ScheduledRun``, ``run_id`` and the due-time text it contains;
- ``due_times``: ``due_after``, ``next_due`` and ``decide_fire`` (catch-up, pauses, early
  fires).
"""

from tidings.core.schedule.due_times import (
    EARLY_TOLERANCE as EARLY_TOLERANCE,
    MAX_CATCH_UP_RUNS as MAX_CATCH_UP_RUNS,
    ON_TIME_GRACE as ON_TIME_GRACE,
    FireDecision as FireDecision,
    FireRefused as FireRefused,
    Pause as Pause,
    decide_fire as decide_fire,
    due_after as due_after,
    due_at_or_before as due_at_or_before,
    due_times as due_times,
    next_due as next_due,
)
from tidings.core.schedule.rules import (
    MIN_INTERVAL as MIN_INTERVAL,
    CatchUp as CatchUp,
    ScheduleRule as ScheduleRule,
    Weekday as Weekday,
    load_zone as load_zone,
)
from tidings.core.schedule.runs import (
    MAX_SCHEDULE_ID_BYTES as MAX_SCHEDULE_ID_BYTES,
    ScheduledRun as ScheduledRun,
    format_due as format_due,
    parse_due as parse_due,
    parse_run_id as parse_run_id,
    run_id as run_id,
)

__all__ = [
    "EARLY_TOLERANCE",
    "MAX_CATCH_UP_RUNS",
    "MAX_SCHEDULE_ID_BYTES",
    "MIN_INTERVAL",
    "ON_TIME_GRACE",
    "CatchUp",
    "FireDecision",
    "FireRefused",
    "Pause",
    "ScheduleRule",
    "ScheduledRun",
    "Weekday",
    "decide_fire",
    "due_after",
    "due_at_or_before",
    "due_times",
    "format_due",
    "load_zone",
    "next_due",
    "parse_due",
    "parse_run_id",
    "run_id",
]
