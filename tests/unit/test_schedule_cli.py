"""``tidings schedule``'s rule syntax, its words for a state, and its journal fold: no broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest

from tidings import App, CatchUp, ScheduleRule, Weekday
from tidings.cli.main import build_parser, main
from tidings.cli.schedule import (
    describe,
    interval_text,
    list_lines,
    parse_days,
    parse_interval,
    parse_rule,
    rule_options,
    rule_words,
    state_json,
)
from tidings.codec import avro
from tidings.inspection.schedules import fold_journal
from tidings.codec.payloads import payload_of
from tidings.core.aggregate import AggregateDefinition, AggregateInstance
from tidings.core.partitioning import partition_for
from tidings.core.records import EventEnvelope
from tidings.core.schedule.aggregate import (
    PauseSpan,
    PendingRun,
    RunsDecided,
    ScheduleCreated,
    ScheduleDeleted,
    SchedulePaused,
    ScheduleState,
)
from tidings.shell.runtime.io import Incoming

OSLO_9 = ScheduleRule.daily("09:00", "Europe/Oslo")


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- the rule syntax ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "interval"), [
    ("90s", timedelta(seconds=90)), ("10m", timedelta(minutes=10)), ("1h", timedelta(hours=1)),
    ("1h30m", timedelta(minutes=90)), ("1d", timedelta(days=1)), ("2d3h4m5s", timedelta(days=2, seconds=11045)),
    ("1s", timedelta(seconds=1)),
])
def test_every_reads_a_count_and_unit_per_part(text: str, interval: timedelta) -> None:
    assert parse_interval(text) == interval
    assert parse_interval(interval_text(interval)) == interval  # show prints what --every reads


@pytest.mark.parametrize("text", ["10", "10 minutes", "m", "", "1m1h", "-5s", "1.5h", "10min", "PT10M"])
def test_every_refuses_other_forms_and_says_what_it_accepts(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 90s, 10m, 1h, 1h30m or 1d"):
        parse_interval(text)


def test_every_refuses_zero_and_says_the_shortest() -> None:
    with pytest.raises(ValueError, match="shortest interval, 1s"):
        parse_interval("0s")


def test_days_take_names_and_ranges() -> None:
    assert parse_days("mon,fri") == (Weekday.MONDAY, Weekday.FRIDAY)
    assert parse_days("Friday, monday") == (Weekday.MONDAY, Weekday.FRIDAY)
    assert parse_days("mon-fri") == tuple(Weekday(d) for d in range(5))
    assert parse_days("sat,sun,mon") == (Weekday.MONDAY, Weekday.SATURDAY, Weekday.SUNDAY)
    with pytest.raises(ValueError, match="'funday' is not a day"):
        parse_days("mon,funday")
    with pytest.raises(ValueError, match="runs backwards"):
        parse_days("sat-mon")
    with pytest.raises(ValueError, match="is not a day"):
        parse_days("1")


def test_the_options_build_each_kind_of_rule() -> None:
    assert parse_rule(daily="09:00", zone="Europe/Oslo") == OSLO_9
    assert parse_rule(daily="9:00", zone="Europe/Oslo") == OSLO_9
    assert parse_rule(weekly="mon,fri", at="09:00:30", zone="Europe/Oslo") == ScheduleRule.weekly(
        [Weekday.MONDAY, Weekday.FRIDAY], time(9, 0, 30), "Europe/Oslo")
    assert parse_rule(every="10m") == ScheduleRule.every(timedelta(minutes=10))


@pytest.mark.parametrize(("options", "message"), [
    ({}, "exactly one of --daily, --weekly and --every \\(got none\\)"),
    ({"daily": "09:00", "every": "1h", "zone": "UTC"}, "got --daily and --every"),
    ({"daily": "09:00"}, "--daily needs --zone"),
    ({"weekly": "mon", "zone": "UTC"}, "--weekly needs --at"),
    ({"weekly": "mon", "at": "9", "zone": "UTC"}, "--at '9' is not a local time: write HH:MM"),
    ({"daily": "25:00", "zone": "UTC"}, "--daily '25:00' is not a local time"),
    ({"daily": "09:00", "at": "09:00", "zone": "UTC"}, "--at goes with --weekly"),
    ({"daily": "09:00", "zone": "Europe/Olso"}, "--zone 'Europe/Olso' is not a time zone"),
    ({"daily": "09:00", "zone": "../../etc/passwd"}, "give an IANA name"),
    ({"every": "1h", "zone": "Europe/Oslo"}, "--every counts from the schedule's creation .* no --zone"),
])
def test_a_wrong_rule_says_what_is_wrong(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rule(**options)


def test_no_rule_lists_the_accepted_syntax() -> None:
    with pytest.raises(ValueError) as raised:
        parse_rule()
    assert "--weekly DAYS --at HH:MM --zone ZONE" in str(raised.value)


def test_the_command_line_exits_with_the_rule_error_before_loading_the_app(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The app does not exist: the rule is checked first, so the rule's error is what is said.
    with pytest.raises(SystemExit) as exited:
        main(["schedule", "create", "no.such.module:app", "s", "w", "--daily", "09:00"])
    assert "--daily needs --zone" in str(exited.value.code)
    with pytest.raises(SystemExit) as exited:
        main(["schedule", "create", "no.such.module:app", "s", "w", "--every", "1h", "--input", "{nope"])
    assert "--input is not JSON" in str(exited.value.code)


def test_the_parser_takes_each_action() -> None:
    parser = build_parser()
    args = parser.parse_args(["schedule", "create", "m:app", "ada-daily", "reminder", "--input", '"x"',
                              "--weekly", "mon-fri", "--at", "09:15", "--zone", "Europe/Oslo", "--catch-up", "none"])
    assert (args.action, args.schedule_id, args.workflow, args.catch_up) == ("create", "ada-daily", "reminder", "none")
    for action in ("pause", "resume", "delete", "show"):
        assert parser.parse_args(["schedule", action, "m:app", "ada-daily"]).schedule_id == "ada-daily"
    assert parser.parse_args(["schedule", "list", "m:app", "--all"]).all is True
    with pytest.raises(SystemExit):
        parser.parse_args(["schedule", "create", "m:app", "s", "w", "--every", "1h", "--catch-up", "some"])


# -- the state in words ---------------------------------------------------------------------------


def test_rules_in_words_and_as_options() -> None:
    assert rule_words(OSLO_9) == "every day at 09:00 in Europe/Oslo"
    weekly = ScheduleRule.weekly(["mon", "wed", "fri"], "17:30:15", "UTC")
    assert rule_words(weekly) == "every Monday, Wednesday and Friday at 17:30:15 in UTC"
    assert rule_options(weekly) == "--weekly mon,wed,fri --at 17:30:15 --zone UTC"
    workdays = ScheduleRule.weekly(["mon", "tue", "wed", "thu", "fri", "sun"], "09:15", "Europe/Oslo")
    assert rule_words(workdays) == "every Monday to Friday and Sunday at 09:15 in Europe/Oslo"
    assert rule_options(workdays) == "--weekly mon-fri,sun --at 09:15 --zone Europe/Oslo"
    assert rule_words(ScheduleRule.every(timedelta(minutes=90))).startswith("every 1h30m, counted from")
    for rule in (OSLO_9, weekly, workdays, ScheduleRule.every(timedelta(seconds=90))):
        # What show prints as options reads back as the same rule.
        words = rule_options(rule).split()
        options = dict(zip((w.lstrip("-") for w in words[::2]), words[1::2], strict=True))
        assert parse_rule(**options) == rule


def created_state(**update: Any) -> ScheduleState:
    state = ScheduleState(status="active", workflow="reminder", input="Drink water", rule=OSLO_9.to_data(),
                          catch_up=CatchUp.LATEST, anchor=z("2026-11-14T12:00:00Z"),
                          handled_through=z("2026-11-14T12:00:00Z"))
    return state.model_copy(update=update)


def test_show_gives_the_next_due_time_in_utc_in_the_zone_and_its_run_id() -> None:
    text = "\n".join(describe("ada-daily", created_state(), now=z("2026-11-14T13:00:00Z")))
    assert "status     active" in text
    assert 'input      "Drink water"' in text
    assert "rule       every day at 09:00 in Europe/Oslo   (--daily 09:00 --zone Europe/Oslo)" in text
    assert "catch-up   latest: after missed due times, one run for the most recent" in text
    assert ("next due   2026-11-15T08:00:00.0000000Z   Sun 2026-11-15 09:00:00 Europe/Oslo (UTC+01:00)"
            in text)
    assert "run id ada-daily@2026-11-15T08:00:00.0000000Z" in text
    assert "overdue" not in text
    assert "pending    none" in text


def test_show_says_overdue_pending_runs_and_pauses() -> None:
    state = created_state(
        pending=(PendingRun(due=z("2026-11-15T08:00:00Z"), workflow="reminder", input="Old text"),),
        handled_through=z("2026-11-15T08:00:00Z"),
        pauses=(PauseSpan(start=z("2026-11-20T10:00:00Z"), end=z("2026-11-21T10:00:00Z")),),
    )
    text = "\n".join(describe("ada-daily", state, now=z("2026-11-18T08:00:00Z")))
    assert "next due   2026-11-16T08:00:00.0000000Z" in text
    assert "overdue: no dispatcher has fired it yet" in text
    assert 'ada-daily@2026-11-15T08:00:00.0000000Z  reminder  "Old text"' in text
    assert "paused 2026-11-20T10:00:00.0000000Z, resumed 2026-11-21T10:00:00.0000000Z" in text


def test_show_of_paused_deleted_and_absent_schedules() -> None:
    paused = created_state(status="paused", pauses=(PauseSpan(start=z("2026-11-14T13:00:00Z")),))
    text = "\n".join(describe("ada-daily", paused, now=z("2026-11-14T13:00:00Z")))
    assert "next due   none while paused" in text and "still paused" in text
    deleted = "\n".join(describe("ada-daily", created_state(status="deleted"), now=z("2026-11-14T13:00:00Z")))
    assert "cannot be created again" in deleted
    assert describe("nobody", ScheduleState(), now=z("2026-11-14T13:00:00Z")) == [
        "schedule nobody: no such schedule (never created)"]


def test_json_state_is_json_with_the_next_run() -> None:
    out = json.loads(json.dumps(state_json("ada-daily", created_state())))
    assert out["next_run_id"] == "ada-daily@2026-11-15T08:00:00.0000000Z"
    assert out["rule"] == {"kind": "daily", "at": "09:00:00", "zone": "Europe/Oslo"}
    assert out["status"] == "active" and out["input"] == "Drink water"


def test_list_is_a_table_sorted_by_id_and_hides_deleted_ones() -> None:
    states = {"b": created_state(), "a": created_state(status="paused"), "gone": created_state(status="deleted")}
    lines = list_lines(states, include_deleted=False)
    assert lines[0].split() == ["ID", "STATUS", "WORKFLOW", "NEXT", "DUE", "(UTC)", "PENDING", "RULE"]
    assert [line.split()[:2] for line in lines[1:3]] == [["a", "paused"], ["b", "active"]]
    assert "2026-11-15T08:00:00.0000000Z" in lines[2]
    assert lines[-1] == "(1 deleted schedule(s) not shown; --all lists them)"
    assert any(line.startswith("gone ") for line in list_lines(states, include_deleted=True))
    assert list_lines({}, include_deleted=False) == ["no schedules"]


# -- the journal fold -----------------------------------------------------------------------------

PARTITIONS = 4
# Declaring does no I/O: the definition a worker folds the journal with.
AGGREGATE = App("cli-fold", partitions=PARTITIONS).schedules(["reminder"]).aggregate
DEFINITION: AggregateDefinition[Any, Any, ScheduleState] = AGGREGATE.definition


def journal_record(schedule_id: str, version: int, event: Any, *, partition: int | None = None,
                   offset: int = 0) -> Incoming:
    type_name, payload = payload_of(event)
    envelope = EventEnvelope(
        event_id=f"e-{schedule_id}-{version}", command_id=f"c-{schedule_id}-{version}",
        correlation_id="c", aggregate_id=schedule_id, version=version, type=type_name,
        payload=payload, timestamp_ms=0,
    )
    home = partition_for(schedule_id, PARTITIONS)
    return Incoming(AGGREGATE.topics.events, home if partition is None else partition, offset,
                    f"{schedule_id}/{version}".encode(), avro.encode(envelope))


CREATED = ScheduleCreated(workflow="reminder", input="Drink water", rule=OSLO_9.to_data(),
                          catch_up=CatchUp.LATEST, at=z("2026-11-14T12:00:00Z"))


def test_the_journal_folds_per_schedule_as_a_workers_recovery_does() -> None:
    records = [
        journal_record("ada-daily", 1, CREATED, offset=0),
        journal_record("tick", 1, CREATED, offset=1),
        journal_record("ada-daily", 2, SchedulePaused(at=z("2026-11-14T13:00:00Z")), offset=2),
        # Written by another producer: a repeated version, a record off its home partition,
        # bytes that are no envelope. None changes a schedule.
        journal_record("ada-daily", 2, ScheduleDeleted(at=z("2026-11-14T14:00:00Z")), offset=3),
        journal_record("tick", 2, ScheduleDeleted(at=z("2026-11-14T14:00:00Z")),
                       partition=(partition_for("tick", PARTITIONS) + 1) % PARTITIONS, offset=4),
        Incoming(AGGREGATE.topics.events, 0, 5, b"x/1", b"not an envelope"),
        journal_record("tick", 2, RunsDecided(runs=(z("2026-11-15T08:00:00Z"),), through=z("2026-11-15T08:00:00Z"),
                                              workflow="reminder", input="Drink water"), offset=6),
    ]
    instances: dict[str, AggregateInstance[ScheduleState]] = {}
    # In two chunks, as the follower hands them.
    skipped = fold_journal(records[:3], DEFINITION, PARTITIONS, instances)
    skipped += fold_journal(records[3:], DEFINITION, PARTITIONS, instances)
    assert skipped == 3
    assert instances["ada-daily"].state.status == "paused" and instances["ada-daily"].version == 2
    tick = instances["tick"].state
    assert tick.status == "active" and [run.due for run in tick.pending] == [z("2026-11-15T08:00:00Z")]
    assert set(instances) == {"ada-daily", "tick"}
