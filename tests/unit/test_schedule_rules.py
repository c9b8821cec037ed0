"""Schedule rules, run ids and due times (SPEC §6): pure, so every instant is an argument."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from tidings.core.schedule import (
    MAX_CATCH_UP_RUNS,
    MAX_SCHEDULE_ID_BYTES,
    CatchUp,
    FireDecision,
    FireRefused,
    Pause,
    ScheduledRun,
    ScheduleRule,
    Weekday,
    decide_fire,
    due_after,
    due_at_or_before,
    due_times,
    next_due,
    parse_run_id,
    run_id,
)
from tidings.core.limits import MAX_ID_BYTES

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def z(text: str) -> datetime:
    """An instant written as in the seed: 2026-03-29T01:00:00Z."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def dues(rule: ScheduleRule, start: str, end: str, *, anchor: datetime = LONG_AGO) -> list[str]:
    return [
        d.isoformat().replace("+00:00", "Z")
        for d in due_times(rule, z(start), z(end), anchor=anchor)
    ]


def fired(decision: FireDecision | FireRefused) -> FireDecision:
    assert isinstance(decision, FireDecision), decision
    return decision


# --- rules: construction and errors ------------------------------------------------------


def test_rules_with_equal_fields_are_equal_so_a_repeated_create_is_recognised() -> None:
    assert ScheduleRule.daily("09:00", "Europe/Oslo") == ScheduleRule.daily(time(9), "Europe/Oslo")
    assert ScheduleRule.weekly(["mon", Weekday.FRIDAY, 0], "09:00", "UTC") == ScheduleRule.weekly(
        [Weekday.FRIDAY, Weekday.MONDAY], time(9), "UTC"
    )
    assert ScheduleRule.daily("09:00", "Europe/Oslo") != ScheduleRule.daily("09:00", "Europe/Berlin")


@pytest.mark.parametrize("zone", ["Europe/Atlantis", "", "../../etc/passwd", "/etc/localtime", "utc+1"])
def test_an_unknown_zone_is_refused_with_its_name(zone: str) -> None:
    with pytest.raises(ValueError, match="unknown time zone"):
        ScheduleRule.daily("09:00", zone)
    with pytest.raises(ValueError, match="unknown time zone"):
        ScheduleRule.weekly(["mon"], "09:00", zone)


def test_weekly_without_days_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one day"):
        ScheduleRule.weekly([], "09:00", "Europe/Oslo")


@pytest.mark.parametrize(
    ("day", "error"),
    [(7, ValueError), (-1, ValueError), ("funday", ValueError), (True, TypeError), (1.0, TypeError)],
)
def test_a_day_that_is_no_weekday_is_refused(day: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        ScheduleRule.weekly([day], "09:00", "Europe/Oslo")  # type: ignore[list-item]


def test_a_string_of_days_is_refused_rather_than_read_letter_by_letter() -> None:
    with pytest.raises(TypeError):
        ScheduleRule.weekly("mon", "09:00", "UTC")


@pytest.mark.parametrize("interval", [timedelta(0), timedelta(seconds=-5)])
def test_a_non_positive_interval_is_refused(interval: timedelta) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ScheduleRule.every(interval)


def test_an_interval_below_a_second_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 0:00:01"):
        ScheduleRule.every(timedelta(milliseconds=500))
    with pytest.raises(TypeError):
        ScheduleRule.every(60)  # type: ignore[arg-type]


@pytest.mark.parametrize("at", ["25:00", "nine", time(9, tzinfo=UTC)])
def test_a_bad_local_time_is_refused(at: object) -> None:
    with pytest.raises(ValueError):
        ScheduleRule.daily(at, "Europe/Oslo")  # type: ignore[arg-type]


def test_a_rule_built_directly_must_still_make_sense() -> None:
    with pytest.raises(ValueError):
        ScheduleRule("daily", interval=timedelta(hours=1))
    with pytest.raises(ValueError):
        ScheduleRule("hourly")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rule",
    [
        ScheduleRule.daily("02:30", "Europe/Oslo"),
        ScheduleRule.weekly(["sun", "wed"], "23:15:30", "America/New_York"),
        ScheduleRule.every(timedelta(minutes=90, microseconds=7)),
    ],
)
def test_the_stored_form_of_a_rule_reads_back_as_the_same_rule(rule: ScheduleRule) -> None:
    assert ScheduleRule.from_data(rule.to_data()) == rule


def test_a_stored_form_that_is_no_rule_is_refused() -> None:
    for data in ({"kind": "hourly"}, {"kind": "daily"}, {"kind": "every", "interval_us": "5"}):
        with pytest.raises(ValueError):
            ScheduleRule.from_data(data)


# --- run ids -------------------------------------------------------------------------------


def test_the_run_id_is_the_schedule_and_the_due_time_in_dotnet_round_trip_form() -> None:
    due = due_after(ScheduleRule.daily("09:00", "Europe/Oslo"), z("2026-11-15T00:00:00Z"), anchor=LONG_AGO)
    assert run_id("ada-daily", due) == "ada-daily@2026-11-15T08:00:00.0000000Z"
    assert run_id("x", z("2026-01-02T03:04:05.123456Z")) == "x@2026-01-02T03:04:05.1234560Z"


def test_the_run_id_is_the_same_for_the_same_instant_in_any_zone() -> None:
    oslo = datetime(2026, 11, 15, 9, 0, tzinfo=ScheduleRule.daily("09:00", "Europe/Oslo").tz)
    assert run_id("ada-daily", oslo) == "ada-daily@2026-11-15T08:00:00.0000000Z"


def test_a_run_id_needs_an_aware_due_time_and_a_schedule() -> None:
    with pytest.raises(ValueError, match="naive"):
        run_id("ada-daily", datetime(2026, 11, 15, 8))
    with pytest.raises(ValueError):
        run_id("", z("2026-11-15T08:00:00Z"))


def test_a_run_id_parses_back_even_when_the_schedule_id_holds_an_at_sign() -> None:
    assert parse_run_id("a@b@2026-11-15T08:00:00.0000000Z") == ("a@b", z("2026-11-15T08:00:00Z"))
    for bad in ("ada-daily", "ada@2026-11-15T08:00:00Z", "@2026-11-15T08:00:00.0000000Z"):
        with pytest.raises(ValueError):
            parse_run_id(bad)


def test_the_longest_schedule_id_still_gives_a_run_id_within_the_id_limit() -> None:
    longest = "s" * MAX_SCHEDULE_ID_BYTES
    assert len(run_id(longest, z("2026-11-15T08:00:00Z")).encode()) == MAX_ID_BYTES


def test_a_scheduled_run_carries_schedule_due_and_input() -> None:
    run = ScheduledRun("ada-daily", z("2026-11-15T08:00:00Z"), "Drink water")
    assert (run.schedule, run.due, run.input) == ("ada-daily", z("2026-11-15T08:00:00Z"), "Drink water")


# --- daily and weekly due times across clock changes ----------------------------------------


def test_daily_follows_the_zone_through_winter_and_summer() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    assert dues(rule, "2026-01-10T00:00:00Z", "2026-01-11T00:00:00Z") == ["2026-01-10T08:00:00Z"]
    assert dues(rule, "2026-07-10T00:00:00Z", "2026-07-11T00:00:00Z") == ["2026-07-10T07:00:00Z"]


def test_a_local_time_skipped_by_spring_forward_runs_at_the_next_local_time_that_exists() -> None:
    # Oslo 2026-03-29: 02:00 jumps to 03:00 (01:00Z); 02:30 does not exist that day.
    oslo = ScheduleRule.daily("02:30", "Europe/Oslo")
    assert dues(oslo, "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z") == [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-30T00:30:00Z",
    ]
    # New York 2026-03-08: 02:00 jumps to 03:00 EDT (07:00Z).
    new_york = ScheduleRule.daily("02:15", "America/New_York")
    assert dues(new_york, "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z") == ["2026-03-08T07:00:00Z"]


def test_a_local_time_repeated_by_fall_back_runs_once_at_its_first_occurrence() -> None:
    # Berlin 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens at 00:30Z and 01:30Z.
    berlin = ScheduleRule.daily("02:30", "Europe/Berlin")
    assert dues(berlin, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z") == [
        "2026-10-25T00:30:00Z",
        "2026-10-26T01:30:00Z",
    ]
    oslo = ScheduleRule.daily("02:30", "Europe/Oslo")
    assert dues(oslo, "2026-10-25T00:00:00Z", "2026-10-25T23:00:00Z") == ["2026-10-25T00:30:00Z"]
    # New York 2026-11-01: 01:30 happens at 05:30Z (EDT) and 06:30Z (EST).
    new_york = ScheduleRule.daily("01:30", "America/New_York")
    assert dues(new_york, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z") == ["2026-11-01T05:30:00Z"]


def test_the_second_occurrence_of_a_repeated_time_is_not_due_again() -> None:
    oslo = ScheduleRule.daily("02:30", "Europe/Oslo")
    # Asked between the two occurrences, the next due time is the next day's.
    assert due_after(oslo, z("2026-10-25T00:30:00Z"), anchor=LONG_AGO) == z("2026-10-26T01:30:00Z")


def test_a_date_a_zone_skips_entirely_runs_at_the_next_local_time() -> None:
    # Samoa skipped 2011-12-30; the next local time that exists is 2011-12-31 00:00 (+14).
    apia = ScheduleRule.daily("09:00", "Pacific/Apia")
    since = z("2011-01-01T00:00:00Z")
    assert dues(apia, "2011-12-29T12:00:00Z", "2011-12-31T00:00:00Z", anchor=since) == [
        "2011-12-29T19:00:00Z",
        "2011-12-30T10:00:00Z",
        "2011-12-30T19:00:00Z",
    ]


def test_weekly_runs_on_its_local_days_across_both_clock_changes() -> None:
    # Sundays 02:30 Oslo: the spring change's Sunday is skipped to 03:00, the autumn one's
    # runs once, at the first 02:30; weekday is the local one.
    rule = ScheduleRule.weekly([Weekday.SUNDAY], "02:30", "Europe/Oslo")
    assert dues(rule, "2026-03-20T00:00:00Z", "2026-04-06T00:00:00Z") == [
        "2026-03-22T01:30:00Z",
        "2026-03-29T01:00:00Z",
        "2026-04-05T00:30:00Z",
    ]
    assert dues(rule, "2026-10-17T00:00:00Z", "2026-11-02T00:00:00Z") == [
        "2026-10-18T00:30:00Z",
        "2026-10-25T00:30:00Z",
        "2026-11-01T01:30:00Z",
    ]


def test_weekly_days_are_local_days_not_utc_days() -> None:
    # Monday 00:30 in Auckland is still Sunday in UTC.
    rule = ScheduleRule.weekly(["monday"], "00:30", "Pacific/Auckland")
    assert dues(rule, "2026-06-01T00:00:00Z", "2026-06-08T00:00:00Z") == ["2026-06-07T12:30:00Z"]


def test_weekly_with_several_days_yields_them_in_order() -> None:
    rule = ScheduleRule.weekly(["fri", "mon", "wed"], "09:00", "America/New_York")
    assert dues(rule, "2026-03-06T00:00:00Z", "2026-03-12T00:00:00Z") == [
        "2026-03-06T14:00:00Z",  # Friday, EST
        "2026-03-09T13:00:00Z",  # Monday, EDT after 8 March
        "2026-03-11T13:00:00Z",
    ]


def test_due_at_or_before_is_the_mirror_of_due_after() -> None:
    rule = ScheduleRule.daily("02:30", "Europe/Oslo")
    assert due_at_or_before(rule, z("2026-03-29T12:00:00Z"), anchor=LONG_AGO) == z("2026-03-29T01:00:00Z")
    assert due_at_or_before(rule, z("2026-03-29T01:00:00Z"), anchor=LONG_AGO) == z("2026-03-29T01:00:00Z")
    assert due_at_or_before(rule, z("2026-03-29T00:59:59Z"), anchor=LONG_AGO) == z("2026-03-28T01:30:00Z")
    assert due_at_or_before(rule, z("2026-03-29T12:00:00Z"), anchor=z("2026-03-29T01:00:00Z")) is None


# --- every, anchors and changes --------------------------------------------------------------


def test_every_counts_from_the_creation() -> None:
    rule = ScheduleRule.every(timedelta(minutes=10))
    created = z("2026-05-01T12:03:07Z")
    assert dues(rule, "2026-05-01T00:00:00Z", "2026-05-01T12:33:07Z", anchor=created) == [
        "2026-05-01T12:13:07Z",
        "2026-05-01T12:23:07Z",
        "2026-05-01T12:33:07Z",
    ]


def test_every_after_a_change_counts_from_the_change() -> None:
    rule = ScheduleRule.every(timedelta(hours=1))
    changed = z("2026-05-01T12:20:00Z")
    assert due_after(rule, z("2026-05-01T12:20:00Z"), anchor=changed) == z("2026-05-01T13:20:00Z")
    fire = fired(
        decide_fire(
            rule, CatchUp.ALL, due=z("2026-05-01T13:00:00Z"), now=z("2026-05-01T13:00:00Z"),
            anchor=changed, handled_through=z("2026-05-01T12:00:00Z"),
        )
    )
    # The index's stale 13:00 (the old grid) runs nothing; the schedule waits for 13:20.
    assert fire.runs == ()
    assert fire.next_due == z("2026-05-01T13:20:00Z")


def test_every_ignores_clock_changes() -> None:
    rule = ScheduleRule.every(timedelta(hours=1))
    anchor = z("2026-03-29T00:00:00Z")
    assert dues(rule, "2026-03-29T00:00:00Z", "2026-03-29T03:00:00Z", anchor=anchor) == [
        "2026-03-29T01:00:00Z",
        "2026-03-29T02:00:00Z",
        "2026-03-29T03:00:00Z",
    ]


def test_no_due_time_at_or_before_a_change_runs() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    changed = z("2026-11-15T08:00:00Z")  # exactly at a due time
    fire = fired(
        decide_fire(
            rule, CatchUp.ALL, due=z("2026-11-15T08:00:00Z"), now=z("2026-11-17T08:00:00Z"),
            anchor=changed,
        )
    )
    assert fire.runs == (z("2026-11-16T08:00:00Z"), z("2026-11-17T08:00:00Z"))


# --- fires: on time, early, repeated ----------------------------------------------------------


def test_an_on_time_fire_runs_its_due_time_and_names_the_next() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    for policy in CatchUp:
        fire = fired(
            decide_fire(
                rule, policy, due=z("2026-11-15T08:00:00Z"), now=z("2026-11-15T08:00:00.2Z"),
                anchor=LONG_AGO, handled_through=z("2026-11-14T08:00:00Z"),
            )
        )
        assert fire.runs == (z("2026-11-15T08:00:00Z"),)
        assert fire.next_due == z("2026-11-16T08:00:00Z")


def test_a_fire_more_than_a_second_early_is_refused_with_a_reason() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    refused = decide_fire(
        rule, CatchUp.LATEST, due=z("2026-11-15T08:00:00Z"), now=z("2026-11-15T07:59:58.5Z"),
        anchor=LONG_AGO,
    )
    assert isinstance(refused, FireRefused)
    assert "1.5 s before its due time 2026-11-15T08:00:00.0000000Z" in refused.reason
    assert "more than 1 s early is refused" in refused.reason


def test_a_fire_up_to_a_second_early_runs_its_due_time() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    fire = fired(
        decide_fire(
            rule, CatchUp.LATEST, due=z("2026-11-15T08:00:00Z"), now=z("2026-11-15T07:59:59Z"),
            anchor=LONG_AGO, handled_through=z("2026-11-14T08:00:00Z"),
        )
    )
    assert fire.runs == (z("2026-11-15T08:00:00Z"),)
    assert fire.through == z("2026-11-15T08:00:00Z")


def test_a_repeated_fire_decides_no_second_run() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    first = fired(
        decide_fire(rule, CatchUp.ALL, due=z("2026-11-15T08:00:00Z"), now=z("2026-11-15T08:00:01Z"),
                    anchor=LONG_AGO, handled_through=z("2026-11-14T08:00:00Z"))
    )
    again = fired(
        decide_fire(rule, CatchUp.ALL, due=z("2026-11-15T08:00:00Z"), now=z("2026-11-15T08:00:03Z"),
                    anchor=LONG_AGO, handled_through=first.through)
    )
    assert first.runs == (z("2026-11-15T08:00:00Z"),)
    assert again.runs == ()


# --- catch-up after downtime --------------------------------------------------------------------

EVERY_SECOND = ScheduleRule.every(timedelta(seconds=1))
DOWN_FROM = z("2026-05-01T00:00:00Z")  # created here; due at 00:00:01, 00:00:02, ...
WAKE = DOWN_FROM + timedelta(seconds=1500)  # 1,500 due times missed


def wake(policy: CatchUp, *, now: datetime = WAKE, pauses: tuple[Pause, ...] = ()) -> FireDecision:
    return fired(
        decide_fire(EVERY_SECOND, policy, due=DOWN_FROM + timedelta(seconds=1), now=now,
                    anchor=DOWN_FROM, pauses=pauses)
    )


def test_catch_up_latest_runs_one_run_for_the_most_recent_missed_due_time() -> None:
    fire = wake(CatchUp.LATEST)
    assert fire.runs == (WAKE,)
    assert fire.next_due == WAKE + timedelta(seconds=1)


def test_catch_up_all_runs_the_1000_most_recent_oldest_first() -> None:
    fire = wake(CatchUp.ALL)
    assert len(fire.runs) == MAX_CATCH_UP_RUNS == 1000
    assert fire.runs[0] == DOWN_FROM + timedelta(seconds=501)
    assert fire.runs[-1] == WAKE
    assert list(fire.runs) == sorted(fire.runs)
    assert fire.through == WAKE


def test_catch_up_all_runs_every_missed_due_time_when_fewer_than_the_cap() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    fire = fired(
        decide_fire(rule, CatchUp.ALL, due=z("2026-03-27T08:00:00Z"), now=z("2026-03-31T12:00:00Z"),
                    anchor=LONG_AGO, handled_through=z("2026-03-26T08:00:00Z"))
    )
    assert fire.runs == (
        z("2026-03-27T08:00:00Z"),
        z("2026-03-28T08:00:00Z"),
        z("2026-03-29T07:00:00Z"),  # summer time from here
        z("2026-03-30T07:00:00Z"),
        z("2026-03-31T07:00:00Z"),
    )


def test_catch_up_none_runs_nothing_missed_and_waits_for_the_next_due_time() -> None:
    fire = wake(CatchUp.NONE)
    assert fire.runs == ()
    assert fire.through == WAKE
    assert fire.next_due == WAKE + timedelta(seconds=1)


def test_catch_up_none_still_runs_a_fire_up_to_a_minute_late() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")

    def late_by(delay: timedelta) -> tuple[datetime, ...]:
        return fired(
            decide_fire(rule, CatchUp.NONE, due=z("2026-11-15T08:00:00Z"),
                        now=z("2026-11-15T08:00:00Z") + delay, anchor=LONG_AGO,
                        handled_through=z("2026-11-14T08:00:00Z"))
        ).runs

    assert late_by(timedelta(seconds=50)) == (z("2026-11-15T08:00:00Z"),)
    assert late_by(timedelta(minutes=1)) == (z("2026-11-15T08:00:00Z"),)
    assert late_by(timedelta(minutes=1, microseconds=1)) == ()


def test_a_fire_at_most_a_minute_late_runs_each_due_time_it_serves_whatever_the_policy() -> None:
    # The oldest due time (second 1) is 49 s old: nothing was missed, so all 50 run.
    for policy in CatchUp:
        fire = wake(policy, now=DOWN_FROM + timedelta(seconds=50))
        assert fire.runs == tuple(DOWN_FROM + timedelta(seconds=s) for s in range(1, 51)), policy


def test_catch_up_none_runs_nothing_once_the_oldest_due_time_is_over_a_minute_old() -> None:
    # Second 1 is 61 s old: the worker was down, so even the recent due times were missed.
    assert wake(CatchUp.NONE, now=DOWN_FROM + timedelta(seconds=62)).runs == ()
    assert wake(CatchUp.LATEST, now=DOWN_FROM + timedelta(seconds=62)).runs == (
        DOWN_FROM + timedelta(seconds=62),
    )


# --- pauses --------------------------------------------------------------------------------------


def test_nothing_inside_a_pause_runs_whatever_the_policy() -> None:
    # Paused from second 100 to second 1,400 of the downtime, both included.
    pause = Pause(DOWN_FROM + timedelta(seconds=100), DOWN_FROM + timedelta(seconds=1400))
    all_runs = wake(CatchUp.ALL, pauses=(pause,)).runs
    assert len(all_runs) == 99 + 100
    assert all(not pause.covers(d) for d in all_runs)
    assert all_runs[98] == DOWN_FROM + timedelta(seconds=99)
    assert all_runs[99] == DOWN_FROM + timedelta(seconds=1401)
    assert wake(CatchUp.LATEST, pauses=(pause,)).runs == (WAKE,)


def test_a_due_time_at_the_resume_does_not_run_the_next_one_does() -> None:
    rule = ScheduleRule.daily("09:00", "Europe/Oslo")
    pause = Pause(z("2026-11-10T12:00:00Z"), z("2026-11-15T08:00:00Z"))
    fire = fired(
        decide_fire(rule, CatchUp.ALL, due=z("2026-11-11T08:00:00Z"), now=z("2026-11-16T08:00:00Z"),
                    anchor=LONG_AGO, handled_through=z("2026-11-10T08:00:00Z"), pauses=(pause,))
    )
    assert fire.runs == (z("2026-11-16T08:00:00Z"),)


def test_a_fire_while_paused_runs_nothing_and_names_no_next_due_time() -> None:
    pause = Pause(DOWN_FROM + timedelta(seconds=10))
    fire = wake(CatchUp.ALL, pauses=(pause,))
    assert fire.runs == tuple(DOWN_FROM + timedelta(seconds=s) for s in range(1, 10))
    assert fire.next_due is None


def test_next_due_skips_pauses() -> None:
    rule = ScheduleRule.every(timedelta(hours=1))
    anchor = z("2026-05-01T00:00:00Z")
    pauses = (Pause(z("2026-05-01T00:30:00Z"), z("2026-05-01T02:30:00Z")),
              Pause(z("2026-05-01T02:45:00Z"), z("2026-05-01T03:00:00Z")))
    # 01:00 and 02:00 are inside the first pause, 03:00 at the second's resume.
    assert next_due(rule, z("2026-05-01T00:10:00Z"), anchor=anchor, pauses=pauses) == z("2026-05-01T04:00:00Z")


def test_a_pause_needs_aware_instants_in_order() -> None:
    with pytest.raises(ValueError, match="naive"):
        Pause(datetime(2026, 5, 1))
    with pytest.raises(ValueError, match="before its pause"):
        Pause(z("2026-05-02T00:00:00Z"), z("2026-05-01T00:00:00Z"))


def test_decisions_refuse_naive_instants() -> None:
    with pytest.raises(ValueError, match="naive"):
        decide_fire(EVERY_SECOND, CatchUp.ALL, due=WAKE, now=datetime(2026, 5, 1), anchor=DOWN_FROM)
    with pytest.raises(ValueError, match="naive"):
        due_after(EVERY_SECOND, datetime(2026, 5, 1), anchor=DOWN_FROM)
