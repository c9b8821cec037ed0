"""``tidings schedule create|change|pause|resume|delete|show|list MODULE:APP ...``: schedules from a shell.

Every action but ``list`` is a command to the app's schedule aggregate (``app.schedules``),
answered by a running worker through the app's replies topic, exactly as the handle's calls
in a program are (``tidings.shell.kinds.schedule.handle.ScheduleHandle``). ``list`` needs no worker: it
reads the aggregate's journal (``{app}.aggregate.schedule.events``) from its beginning to its
end and folds each schedule's events as a worker's recovery does.

The rule syntax (``--daily``, ``--weekly`` + ``--at``, ``--every``, ``--zone``) is parsed by
the pure functions ``parse_rule``, ``parse_interval`` and ``parse_days`` here, which say what
they accept when they refuse a value.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ..core.schedule import (
    MIN_INTERVAL,
    ON_TIME_GRACE,
    CatchUp,
    ScheduleRule,
    Weekday,
    format_due,
    load_zone,
    run_id,
)
from ..core.schedule.aggregate import ScheduleState
from ..shell.kinds.aggregate.handle import AggregateHandle
from ..shell.client.client import Client
from ..shell.runtime.connection import KafkaConnection
from ..shell.kinds.schedule.handle import ScheduleHandle
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from ..inspection import schedules
from ..inspection.schedules import read_schedules
from ..inspection.schedule_words import day_runs, interval_text, rule_words
from .loading import load_app

# -- the rule syntax (pure) -------------------------------------------------------------------

RULE_SYNTAX: Final = """\
A rule is one of:
  --daily HH:MM --zone ZONE               every day at a local time, e.g. --daily 09:00 --zone Europe/Oslo
  --weekly DAYS --at HH:MM --zone ZONE    on some days, e.g. --weekly mon,fri --at 09:00 --zone Europe/Oslo
                                          (DAYS: mon,tue,wed,thu,fri,sat,sun, full names, or ranges mon-fri)
  --every INTERVAL                        from the creation or last change, e.g. --every 90s, 10m, 1h30m, 1d
                                          (units d, h, m, s; at least 1s)
ZONE is an IANA time-zone name (Europe/Oslo, America/New_York, UTC)."""

_INTERVAL: Final = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_LOCAL_TIME: Final = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?")


def parse_interval(text: str) -> timedelta:
    """Read ``--every``'s interval: a count and unit per part, largest first (``90s``, ``1h30m``).

    Raises:
        ValueError: the text is no such interval, or it is shorter than a second.
    """
    match = _INTERVAL.fullmatch(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise ValueError(
            f"--every {text!r} is not an interval: write a count and a unit, largest unit first, "
            "e.g. 90s, 10m, 1h, 1h30m or 1d (units d, h, m, s)"
        )
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    interval = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    if interval < MIN_INTERVAL:
        raise ValueError(f"--every {text!r} is shorter than the shortest interval, 1s")
    return interval


def parse_local_time(text: str, option: str) -> str:
    """Check a local time ``HH:MM`` or ``HH:MM:SS`` (24 h) and return it as ``ScheduleRule`` takes it.

    Raises:
        ValueError: the text is no such time.
    """
    match = _LOCAL_TIME.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{option} {text!r} is not a local time: write HH:MM or HH:MM:SS on a 24-hour clock, "
            "e.g. 09:00 or 17:30:15"
        )
    hour, minute, second = match.groups()
    return f"{int(hour):02d}:{minute}" + (f":{second}" if second else "")


def parse_days(text: str) -> tuple[Weekday, ...]:
    """Read ``--weekly``'s days: names (``mon``, ``monday``) or ranges (``mon-fri``), comma-separated.

    Raises:
        ValueError: a part names no day, or a range runs backwards.
    """
    days: set[Weekday] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            start = Weekday.parse(first)
            end = Weekday.parse(last) if dash else start
        except ValueError:
            raise ValueError(
                f"--weekly {text!r}: {part.strip()!r} is not a day; write days as mon,tue,wed,thu,fri,sat,sun "
                "(or full names), comma-separated, or a range such as mon-fri"
            ) from None
        if end < start:
            raise ValueError(
                f"--weekly {text!r}: the range {part.strip()!r} runs backwards; weeks start on Monday, "
                "so write sat,sun,mon rather than sat-mon"
            )
        days.update(Weekday(day) for day in range(start, end + 1))
    return tuple(sorted(days))


def parse_rule(
    *, daily: str | None = None, weekly: str | None = None, at: str | None = None,
    every: str | None = None, zone: str | None = None,
) -> ScheduleRule:
    """Build the rule the options name: exactly one of ``daily``, ``weekly`` (with ``at``) and ``every``.

    Raises:
        ValueError: the options name no rule, more than one, or one with a wrong part
            (the message says which part and what is accepted).
    """
    given = [option for option, value in (("--daily", daily), ("--weekly", weekly), ("--every", every))
             if value is not None]
    if len(given) != 1:
        said = "none" if not given else " and ".join(given)
        raise ValueError(f"give exactly one of --daily, --weekly and --every (got {said})\n{RULE_SYNTAX}")
    if every is not None:
        if zone is not None or at is not None:
            raise ValueError(
                "--every counts from the schedule's creation or last change, so it takes no "
                f"{'--zone' if zone is not None else '--at'}; use --daily or --weekly for local times"
            )
        return ScheduleRule.every(parse_interval(every))
    if daily is not None and at is not None:
        raise ValueError(f"--daily takes its time itself (--daily {at} --zone ...); --at goes with --weekly")
    if weekly is not None and at is None:
        raise ValueError("--weekly needs --at, the local time, e.g. --weekly mon,fri --at 09:00 --zone Europe/Oslo")
    option = "--daily" if daily is not None else "--weekly"
    if zone is None:
        raise ValueError(
            f"{option} needs --zone, the IANA time zone its local time is in, e.g. --zone Europe/Oslo "
            "(or --zone UTC)"
        )
    try:
        load_zone(zone)
    except ValueError:
        raise ValueError(
            f"--zone {zone!r} is not a time zone this machine knows: give an IANA name such as "
            "Europe/Oslo, America/New_York or UTC"
        ) from None
    if daily is not None:
        return ScheduleRule.daily(parse_local_time(daily, "--daily"), zone)
    assert weekly is not None and at is not None
    return ScheduleRule.weekly(parse_days(weekly), parse_local_time(at, "--at"), zone)


# -- the rule and the state in words (pure) -------------------------------------------------------


def _day_options(days: Sequence[Weekday]) -> str:
    parts: list[str] = []
    for first, last in day_runs(days):
        names = [Weekday(day).name[:3].lower() for day in range(first, last + 1)]
        parts += [f"{names[0]}-{names[-1]}"] if len(names) >= 3 else names
    return ",".join(parts)


def rule_options(rule: ScheduleRule) -> str:
    """The rule as this command's options, to paste into ``tidings schedule change``."""
    if rule.kind == "every":
        assert rule.interval is not None
        return f"--every {interval_text(rule.interval)}"
    assert rule.at is not None
    at = rule.at.strftime("%H:%M:%S" if rule.at.second else "%H:%M")
    if rule.kind == "daily":
        return f"--daily {at} --zone {rule.zone}"
    return f"--weekly {_day_options(rule.days)} --at {at} --zone {rule.zone}"


_CATCH_UP_WORDS: Final = {
    CatchUp.LATEST: "after missed due times, one run for the most recent",
    CatchUp.ALL: "after missed due times, one run for each, oldest first (at most the 1,000 most recent)",
    CatchUp.NONE: "missed due times do not run (a fire up to a minute late still counts)",
}


def _local(instant: datetime, zone: str | None) -> str:
    if zone is None:
        return ""
    moment = instant.astimezone(load_zone(zone))
    offset = f"{moment:%z}"  # +0100; %:z (+01:00) needs Python 3.12
    return f"{moment:%a %Y-%m-%d %H:%M:%S} {zone} (UTC{offset[:3]}:{offset[3:]})"


def _instant(instant: datetime) -> str:
    return format_due(instant)


def describe(schedule_id: str, state: ScheduleState, now: datetime) -> list[str]:
    """``show``'s lines: the state of one schedule in words, next due time in UTC and in its zone."""
    if state.status == "absent":
        return [f"schedule {schedule_id}: no such schedule (never created)"]
    lines = [f"schedule   {schedule_id}", f"status     {state.status}"]
    if state.status == "deleted":
        lines.append("           deleted for ever: the id cannot be created again")
    rule = state.schedule_rule
    zone = rule.zone if rule is not None else None
    lines += [f"workflow   {state.workflow}", f"input      {json.dumps(state.input)}"]
    if rule is not None:
        lines.append(f"rule       {rule_words(rule)}   ({rule_options(rule)})")
    lines.append(f"catch-up   {state.catch_up.value}: {_CATCH_UP_WORDS[state.catch_up]}")
    if state.anchor is not None:
        lines.append(f"since      {_instant(state.anchor)} (created or last changed; no earlier due time runs)")
    due = state.next_due()
    if due is not None:
        lines.append(f"next due   {_instant(due)}" + (f"   {_local(due, zone)}" if zone else ""))
        lines.append(f"           run id {run_id(schedule_id, due)}")
        if now - due > ON_TIME_GRACE:
            lines.append("           overdue: no dispatcher has fired it yet (is a worker running?); "
                         f"catch-up {state.catch_up.value} decides what runs when one does")
    elif state.status == "paused":
        lines.append("next due   none while paused: the first due time after the resume runs")
    elif state.status == "active":
        lines.append("next due   none (the rule has no due time after the last one handled)")
    if state.handled_through is not None and state.anchor is not None and state.handled_through > state.anchor:
        lines.append(f"handled    every due time through {_instant(state.handled_through)}")
    if state.pending:
        lines.append(f"pending    {len(state.pending)} run(s) decided, start not yet reported:")
        for run in state.pending:
            lines.append(f"           {run_id(schedule_id, run.due)}  {run.workflow}  {json.dumps(run.input)}")
    else:
        lines.append("pending    none")
    if state.pauses:
        lines.append("pauses     nothing due inside a pause runs:")
        for span in state.pauses:
            end = "still paused" if span.end is None else f"resumed {_instant(span.end)}"
            lines.append(f"           paused {_instant(span.start)}, {end}")
    return lines


def state_json(schedule_id: str, state: ScheduleState) -> dict[str, Any]:
    """``show --json`` and ``list --json``: the stored state, plus the rule in words and the next due time."""
    out: dict[str, Any] = {"schedule": schedule_id, **state.model_dump(mode="json")}
    rule = state.schedule_rule
    due = state.next_due()
    out["rule_text"] = None if rule is None else rule_words(rule)
    out["next_due"] = None if due is None else format_due(due)
    out["next_run_id"] = None if due is None else run_id(schedule_id, due)
    return out


def list_lines(states: dict[str, ScheduleState], *, include_deleted: bool) -> list[str]:
    """``list``'s table: one line per schedule, sorted by id."""
    rows = [("ID", "STATUS", "WORKFLOW", "NEXT DUE (UTC)", "PENDING", "RULE")]
    hidden = 0
    for schedule_id in sorted(states):
        state = states[schedule_id]
        if state.status == "deleted" and not include_deleted:
            hidden += 1
            continue
        rule = state.schedule_rule
        due = state.next_due()
        rows.append((
            schedule_id, state.status, state.workflow or "-", "-" if due is None else format_due(due),
            str(len(state.pending)), "-" if rule is None else rule_words(rule),
        ))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
             for row in rows]
    if len(rows) == 1:
        lines = ["no schedules"]
    if hidden:
        lines.append(f"({hidden} deleted schedule(s) not shown; --all lists them)")
    return lines


# -- finding the app's schedules ----------------------------------------------------------------


def schedule_aggregate(app: Any) -> AggregateHandle[Any, Any, ScheduleState]:
    """The app's schedule aggregate.

    Raises:
        SystemExit: the app declares no schedules, with what to add.
    """
    try:
        return schedules.schedule_aggregate(app)
    except LookupError as exc:
        raise SystemExit(f"tidings: {exc}") from None


def schedule_handle(app: Any, client: Client, timeout: float | None) -> ScheduleHandle:
    """A handle like the one ``app.schedules`` returned to the program, sending through ``client``.

    Raises:
        SystemExit: the app declares no schedules, with what to add.
    """
    schedule_aggregate(app)
    return schedules.schedule_handle(app, client, timeout)


# -- the command --------------------------------------------------------------------------------

_DESCRIPTION = """\
Create, change, pause, resume, delete, show and list the schedules of an app that declares
them with `schedules = app.schedules([workflow, ...])` (docs/schedules.md). Every action but
`list` is a command answered by a running worker (`tidings worker MODULE:APP`); `list` reads
the schedules' journal and needs none. For example:

  tidings schedule create examples.reminder.app:app ada-daily reminder --input '"Drink water"' --daily 09:00 --zone Europe/Oslo
  tidings schedule create examples.reminder.app:app standup reminder --input '"Stand-up"' --weekly mon-fri --at 09:15 --zone Europe/Oslo --catch-up none
  tidings schedule create examples.reminder.app:app stretch reminder --input '"Stretch"' --every 1h30m
  tidings schedule show examples.reminder.app:app ada-daily
  tidings schedule pause examples.reminder.app:app ada-daily
  tidings schedule resume examples.reminder.app:app ada-daily
  tidings schedule change examples.reminder.app:app ada-daily reminder --input '"Drink tea"' --daily 08:30 --zone Europe/Oslo
  tidings schedule delete examples.reminder.app:app ada-daily
  tidings schedule list examples.reminder.app:app

""" + RULE_SYNTAX + """

Each run of a schedule is the workflow instance `{schedule}@{due in UTC}`, e.g.
ada-daily@2026-11-15T08:00:00.0000000Z, started with ScheduledRun(schedule, due, input).

Exit status: 0 done; 1 refused (the message says why: e.g. the id exists with other content,
was deleted, or is not paused); 2 no worker answered in time (the command may still be stored).
"""

_ACTIONS: Final = (
    ("create", "create a schedule (the same create again stores nothing)"),
    ("change", "replace a schedule's workflow, input, rule and catch-up"),
    ("pause", "pause a schedule: nothing due until the resume runs"),
    ("resume", "resume a paused schedule from the first due time after now"),
    ("delete", "delete a schedule for ever"),
    ("show", "print a schedule's state"),
    ("list", "list every schedule of the app (reads the journal; no worker needed)"),
)


def register(subparsers: Any) -> None:
    """Add the ``schedule`` command and its actions."""
    parser = subparsers.add_parser(
        "schedule", help="create, change, pause, resume, delete, show or list schedules",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text in _ACTIONS:
        sub = actions.add_parser(action, help=help_text, description=_DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=EXIT_STATUS_EPILOG)
        sub.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.reminder.app:app")
        if action != "list":
            sub.add_argument("schedule_id", metavar="ID", help="the schedule id, e.g. ada-daily")
        if action in ("create", "change"):
            sub.add_argument("workflow", metavar="WORKFLOW",
                             help="the workflow each run starts (one app.schedules lists), e.g. reminder")
            sub.add_argument("--input", default="null", metavar="JSON",
                             help="the input every run gets as ScheduledRun.input (default null)")
            rule = sub.add_argument_group("rule (exactly one of --daily, --weekly, --every)")
            rule.add_argument("--daily", metavar="HH:MM", help="every day at this local time (needs --zone)")
            rule.add_argument("--weekly", metavar="DAYS", help="on these days, e.g. mon,fri or mon-fri (needs --at, --zone)")
            rule.add_argument("--at", metavar="HH:MM", help="the local time of --weekly")
            rule.add_argument("--every", metavar="INTERVAL", help="every interval, e.g. 90s, 10m, 1h30m, 1d")
            rule.add_argument("--zone", metavar="ZONE", help="the IANA time zone of --daily/--weekly, e.g. Europe/Oslo")
            sub.add_argument("--catch-up", choices=[c.value for c in CatchUp], default=CatchUp.LATEST.value,
                             help="which missed due times run after downtime: latest (default: one, the most "
                                  "recent), all (each, oldest first, at most 1,000) or none")
        if action in ("show", "list"):
            sub.add_argument("--json", action="store_true", help="print JSON instead of text")
        if action == "list":
            sub.add_argument("--all", action="store_true", help="list deleted schedules too")
        add_kafka_arguments(sub)
        if action != "list":
            sub.add_argument("--timeout", type=float,
                             help="seconds to wait for the worker's answer (default the app's command_timeout)")
        sub.set_defaults(run=run)


def rule_from_args(args: argparse.Namespace) -> ScheduleRule:
    """The rule ``create``/``change`` name, or exit saying what is wrong and what is accepted."""
    try:
        return parse_rule(daily=args.daily, weekly=args.weekly, at=args.at, every=args.every, zone=args.zone)
    except ValueError as exc:
        raise SystemExit(f"tidings: {exc}") from None


def run(args: argparse.Namespace) -> int:
    # Check what needs no app or broker first, so a typo is reported at once.
    rule = rule_from_args(args) if args.action in ("create", "change") else None
    value: Any = None
    if args.action in ("create", "change"):
        try:
            value = json.loads(args.input)
        except ValueError as exc:
            raise SystemExit(f"tidings: --input is not JSON: {exc} (a string is quoted: --input '\"Drink water\"')") from None
    app = load_app(args.app)
    kafka = connection(args, app)
    reach_kafka(kafka, getattr(args, "timeout", None))
    if args.action == "list":
        return _list(app, kafka, args)
    client = Client(kafka, app=app)
    try:
        handle = schedule_handle(app, client, args.timeout)
        return asyncio.run(_act(handle, args, rule, value))
    except TimeoutError as exc:
        print(f"tidings: {exc}: no worker answered; is `tidings worker {args.app}` running? "
              "(`tidings schedule list` reads the journal without one)", file=sys.stderr)
        return 2
    finally:
        client.close()


async def _act(handle: ScheduleHandle, args: argparse.Namespace, rule: ScheduleRule | None, value: Any) -> int:
    schedule_id: str = args.schedule_id
    action: str = args.action
    try:
        if action in ("create", "change"):
            assert rule is not None
            call = handle.create if action == "create" else handle.change
            await call(schedule_id, args.workflow, value, rule, CatchUp(args.catch_up))
            state = await handle.state(schedule_id)
            done = "created" if action == "create" else "changed"
            print(json.dumps({done: schedule_id, "workflow": state.workflow, "rule": rule_words(rule),
                              "catch_up": state.catch_up.value,
                              "next_due": None if (due := state.next_due()) is None else format_due(due)}))
            return 0
        if action == "show":
            state = await handle.state(schedule_id)
            if args.json:
                print(json.dumps(state_json(schedule_id, state)))
            else:
                print("\n".join(describe(schedule_id, state, datetime.now(UTC))))
            return 0 if state.status != "absent" else 1
    except ValueError as exc:
        # The handle speaks to a program; here the way out is a command.
        message = str(exc).replace("change it with change()", f"`tidings schedule change {args.app} {schedule_id} ...` changes it")
        print(f"tidings: {message}", file=sys.stderr)
        return 1
    step = {"pause": handle.pause, "resume": handle.resume, "delete": handle.delete}[action]
    if await step(schedule_id):
        print(json.dumps({f"{action}d": schedule_id}))  # paused, resumed, deleted
        return 0
    state = await handle.state(schedule_id)
    print(f"tidings: {_refusal(action, schedule_id, state.status)}", file=sys.stderr)
    return 1


def _refusal(action: str, schedule_id: str, status: str) -> str:
    """Why ``action`` stored nothing, from the schedule's status, and what to do instead."""
    if status == "absent":
        return f"schedule {schedule_id!r} does not exist (`tidings schedule list` shows the app's schedules)"
    if status == "deleted":
        return f"schedule {schedule_id!r} was deleted; a deleted schedule cannot be {action}d"
    if action == "pause":
        return f"schedule {schedule_id!r} is paused already; `tidings schedule resume` resumes it"
    if action == "resume":
        return f"schedule {schedule_id!r} is not paused (it is {status})"
    return f"{action} of schedule {schedule_id!r} stored nothing (it is {status})"


def _list(app: Any, connection: KafkaConnection, args: argparse.Namespace) -> int:
    aggregate = schedule_aggregate(app)
    states = asyncio.run(read_schedules(aggregate, connection, progress=lambda line: print(
        f"tidings: {line}", file=sys.stderr, flush=True)))
    if args.json:
        for schedule_id in sorted(states):
            if states[schedule_id].status != "deleted" or args.all:
                print(json.dumps(state_json(schedule_id, states[schedule_id])), flush=True)
    else:
        print("\n".join(list_lines(states, include_deleted=args.all)), flush=True)
    return 0
