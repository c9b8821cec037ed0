"""``tidings list MODULE:APP KIND [NAME]``: the instances of a kind, their status, a count per status.

Each kind's index is a topic the app already has (docs/operations.md, "Listing and
describing"): a workflow's compacted status topic (latest status per instance), a saga's
journal (its last record per saga), an aggregate's events topic (its keys
``{id}/{version}``: instances and versions, no value decoded), the dead-letter topic; the
orchestration, schedule and flow readers are in ``list_indexes.py``. Filtering, counting
and printing are in ``listing.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..codec import avro
from ..core.partitioning import partition_for
from ..core.saga_records import SagaJournalEntry
from ..errors import RecordError, UsageError
from ..shell.client.scan import read_topics
from ..shell.kinds.workflow.index import STATUSES, StatusIndex
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.io import Incoming
from ..shell.runtime.topics import deadletter_topic
from .deadletters import dead_letter_line
from .list_indexes import (
    FLOW_STATUSES,
    ORCHESTRATION_STATUSES,
    SCHEDULE_STATUSES,
    flow_rows,
    orchestration_rows,
    schedule_rows,
    schedule_workflows,
)
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .listing import Filters, Row, Selection, counts_json, counts_line, parse_limit, parse_when, row_json, select, table
from .loading import load_app

_DESCRIPTION = """\
List the instances of KIND in the App at MODULE:APP (every one of that kind, or only
NAME's), newest first, with their status and since when, then a count per status:

  NAME    ID        STATUS    SINCE
  enrich  order-18  RUNNING   2026-11-30T00:13:50.352Z
  enrich  order-17  FINISHED  2026-11-30T00:13:53.357Z
  2 instances: RUNNING 1, FINISHED 1

KIND is one of:
  workflow     instances and their latest status (RUNNING, FINISHED, FAULTED, CANCELLED,
               PARKED), from each workflow's compacted status topic; SINCE is when it took
               that status: its start while RUNNING, its end once ended
  saga         sagas and where each stands (RUNNING, ENDED, FAULTED) from the saga's
               journal: the last record of each (keys {id}/{seq}; only that one is
               decoded); SINCE is when it entered its state, DETAIL the transition and state
  aggregate    instances with their version (the number of events stored), from the
               events topic's keys; SINCE is when its last event was stored
  orchestration  instances (RUNNING, FINISHED) from the journal's keys {instance}/{seq}
               and the compacted outcomes topic; SINCE is its last event or its finish
  schedule     the app's schedules (ACTIVE, PAUSED, DELETED; NAME: the workflow they start)
               folded from the schedule aggregate's journal; SINCE is its creation or
               last change, DETAIL its rule and next due time
  flow         the elements in flight: source records after the app's committed offsets
               (WAITING: its workflow not started; RUNNING, PARKED; ENDED: outcome not on
               the sink yet; WRITTEN: on the sink, offset not committed yet); ID is
               topic/partition@offset, SINCE the record's time
  deadletters  the app's dead letters (NAME: only those from that definition's topics);
               STATUS is the error type, DETAIL the reason (tidings deadletters prints them whole)

--since and --until keep rows whose SINCE is in [since, until): a duration back from now
(90s, 30m, 2h, 7d) or an ISO 8601 time (UTC when it names no zone). --started-after,
--started-before, --ended-after and --ended-before do the same with when an instance
started and ended (workflow, saga, orchestration; a row not ended never matches --ended-*).
--type NAME keeps the rows of these definitions (repeat it; NAME keeps one). --limit keeps
the N newest; the count line counts all that matched. --json prints one JSON line per row
instead; --count prints only the counts. It reads the topics as they are now: no worker
needs to run. For example:

  tidings list examples.shop.app:app workflow
  tidings list examples.shop.app:app workflow enrich --status RUNNING --status PARKED --since 1h
  tidings list examples.bank.app:app aggregate account --limit 20
  tidings list examples.bank.app:app saga transfer --status RUNNING
  tidings list examples.bank.app:app deadletters --json | jq -r .detail
  tidings list examples.shop.app:app workflow --count --json
  tidings list examples.shop.app:app workflow --type enrich --type approve --started-after 2026-11-30T08:00Z
  tidings list examples.shop.app:app workflow --status FINISHED --ended-before 1h
  tidings list examples.shop.app:app flow score-orders --status WAITING

Exit status: 0 listed (even if nothing); 1 a topic is missing or Kafka failed; 2 a usage
error (an unknown kind or name, a --status the kind has not, a bad time or --limit).
"""


@dataclass(frozen=True, slots=True)
class Kind:
    """How ``tidings list`` reads one kind: its declared name, statuses, and what a row is called."""

    declared: str | None  # App.declared(kind); None: not declared per name (dead letters, schedules)
    statuses: tuple[str, ...] | None  # None: --status does not apply
    noun: str
    times: bool = False  # whether its rows know when each started and ended (--started-*, --ended-*)


#: A saga's status, from its journal's last record: ended by a fault, ended, or not.
SAGA_STATUSES: Final = ("RUNNING", "ENDED", "FAULTED")

KINDS: Final = {
    "workflow": Kind("workflow", STATUSES, "instance", times=True),
    "saga": Kind("saga", SAGA_STATUSES, "saga", times=True),
    "aggregate": Kind("aggregate", None, "instance"),
    "orchestration": Kind("orchestration", ORCHESTRATION_STATUSES, "instance", times=True),
    "schedule": Kind(None, SCHEDULE_STATUSES, "schedule"),
    "flow": Kind("flow", FLOW_STATUSES, "element"),
    "deadletters": Kind(None, None, "dead letter"),
}
ALIASES: Final = {"workflows": "workflow", "aggregates": "aggregate", "sagas": "saga", "deadletter": "deadletters",
                  "dead-letters": "deadletters", "orchestrations": "orchestration", "schedules": "schedule",
                  "flows": "flow"}


def register(subparsers: Any) -> None:
    """Add the ``list`` command."""
    parser = subparsers.add_parser(
        "list", help="list the instances of a kind with their status and a count per status",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.shop.app:app")
    parser.add_argument("kind", metavar="KIND", help=f"one of: {', '.join(KINDS)}")
    parser.add_argument("name", metavar="NAME", nargs="?", help="only this definition (default: every one)")
    parser.add_argument("--status", action="append", default=[], metavar="STATUS",
                        help="only rows with this status (repeat for several; case does not matter)")
    parser.add_argument("--since", metavar="WHEN", help="only rows whose time is WHEN or later")
    parser.add_argument("--until", metavar="WHEN", help="only rows whose time is before WHEN")
    parser.add_argument("--type", action="append", default=[], metavar="NAME",
                        help="only rows of this definition (a workflow type, say; repeat for several)")
    parser.add_argument("--started-after", metavar="WHEN", help="only instances started at WHEN or later")
    parser.add_argument("--started-before", metavar="WHEN", help="only instances started before WHEN")
    parser.add_argument("--ended-after", metavar="WHEN", help="only instances ended at WHEN or later")
    parser.add_argument("--ended-before", metavar="WHEN", help="only instances ended before WHEN")
    parser.add_argument("--limit", metavar="N", help="print the N newest rows (the counts count all)")
    parser.add_argument("--json", action="store_true", help="one JSON line per row (with --count: one object)")
    parser.add_argument("--count", action="store_true", help="print only the count per status")
    parser.add_argument("--timeout", type=float, help="seconds to wait for Kafka (default 10)")
    add_kafka_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    try:
        kind_name, kind, names, filters = parse(args, app)
    except UsageError as exc:
        print(f"tidings list: {exc}", file=sys.stderr)
        return 2
    kafka = connection(args, app)
    reach_kafka(kafka, args.timeout)
    rows, skipped = READERS[kind_name](app, kafka, names, args.name is not None, timeout=args.timeout or 30.0)
    for topic, count in skipped.items():
        if count:
            print(f"tidings list: skipped {count:,} unreadable records of {topic}", file=sys.stderr)
    print_selection(select(rows, filters), kind, args.json, args.count)
    return 0


def parse(args: argparse.Namespace, app: Any) -> tuple[str, Kind, list[str], Filters]:
    """Check every argument before Kafka is asked; return the kind, the names and the filters.

    Raises:
        UsageError: one of them is wrong (the message says which and what is accepted).
    """
    kind_name = ALIASES.get(args.kind.lower(), args.kind.lower())
    kind = KINDS.get(kind_name)
    if kind is None:
        raise UsageError(f"unknown kind {args.kind!r}; kinds: {', '.join(KINDS)}")
    names = declared_names(app, kind_name, kind)
    if kind_name == "schedule" and not names:
        raise UsageError(f"{app.name} declares no schedules (app.schedules([workflow, ...]))")
    for name in [*([args.name] if args.name is not None else []), *args.type]:
        if name in names:
            continue
        if kind_name == "schedule":
            raise UsageError(f"no schedule of {app.name} may start workflow {name!r} (they may start: "
                             f"{', '.join(names)})")
        what = kind.declared or "definition"
        raise UsageError(f"{app.name} declares no {what} {name!r} (it declares: {', '.join(names) or 'none'})")
    if args.name is not None:
        names = [args.name]
    statuses: set[str] = set()
    for status in args.status:
        if kind_name == "deadletters":  # a dead letter's STATUS is its error type, as written
            statuses.add(status)
            continue
        if kind.statuses is None:
            raise UsageError(f"{kind_name} has no status to filter on")
        if status.upper() not in kind.statuses:
            raise UsageError(f"unknown status {status!r}; {kind_name} statuses: {', '.join(kind.statuses)}")
        statuses.add(status.upper())
    windows = {option: getattr(args, option.replace("-", "_")) for option in
               ("since", "until", "started-after", "started-before", "ended-after", "ended-before")}
    if not kind.times:
        asked = [f"--{option}" for option, text in windows.items() if option.startswith(("started", "ended"))
                 and text is not None]
        if asked:
            raise UsageError(f"{kind_name} rows have no start or end time ({asked[0]}); --since/--until filter "
                             "on their time")
    moments: dict[str, int | None] = {}
    try:
        for option, text in windows.items():
            moments[option] = None if text is None else parse_when(text)
        limit = None if args.limit is None else parse_limit(args.limit)
    except ValueError as exc:
        raise UsageError(f"--{option} {exc}" if "--limit" not in str(exc) else str(exc)) from None
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout:g} is not a number of seconds above 0")
    return kind_name, kind, names, Filters(
        frozenset(statuses), moments["since"], moments["until"], limit, frozenset(args.type),
        moments["started-after"], moments["started-before"], moments["ended-after"], moments["ended-before"])


def declared_names(app: Any, kind_name: str, kind: Kind) -> list[str]:
    """The names NAME may be: the declared definitions of the kind, the workflows a schedule may
    start, or (dead letters) every definition."""
    if kind_name == "schedule":
        return schedule_workflows(app)
    if kind.declared is not None:
        return [handle.name for handle in app.declared(kind.declared)]
    return [handle.name for handle in app.hosted]


def print_selection(selection: Selection, kind: Kind, as_json: bool, count_only: bool) -> None:
    order = kind.statuses or ()
    if count_only:
        print(json.dumps(counts_json(selection)) if as_json else counts_line(selection, order, kind.noun))
        return
    if as_json:
        for row in selection.shown:
            print(json.dumps(row_json(row)))
        return
    if selection.shown:
        for line in table(selection.shown):
            print(line)
    print(counts_line(selection, order, kind.noun))


# -- the readers: one per kind, each returning rows and how many records it skipped per topic --

#: ``(app, kafka, names, named, timeout=)``: ``named`` says NAME was given (so ``names`` is that one).
Reader = Callable[..., tuple[list[Row], dict[str, int]]]


def workflow_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                  timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    handles = [handle for handle in app.declared("workflow") if handle.name in names]
    indexes = [StatusIndex(handle.name, app.partitions) for handle in handles]
    read_topics(kafka, {handle.topics.status: index.take for handle, index in zip(handles, indexes)},
                group_prefix=f"{app.name}.", timeout=timeout)
    rows = [Row("workflow", s.workflow, s.instance_id, s.status, s.at, s.reason or "",
                {"started_at_ms": s.started_at} if s.started_at is not None else {},
                started_at=s.started_at, ended_at=s.ended_at)
            for index in indexes for s in index.latest.values()]
    return rows, {handle.topics.status: index.skipped for handle, index in zip(handles, indexes)}


@dataclass(slots=True)
class _Versions:
    version: int = 0
    events: int = 0
    at: int | None = None


class AggregateIndex:
    """Instances and versions of one aggregate from its events topic's keys ``{id}/{version}``.

    No value is decoded: the key says which instance and version a record is, and the
    record's timestamp when it was stored. A key that is not ``{id}/{whole number}``, or
    that sits on another partition than its id's, is skipped. A tombstone (an erased
    event) counts one event less; the version stays what it was.
    """

    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.partitions = partitions
        self.instances: dict[str, _Versions] = {}
        self.skipped = 0

    def take(self, record: Incoming) -> None:
        aggregate_id, version = _numbered_key(record, self.partitions)
        if version < 0:
            self.skipped += 1
            return
        seen = self.instances.setdefault(aggregate_id, _Versions())
        if record.value is None:
            seen.events = max(seen.events - 1, 0)
            return
        seen.events += 1
        seen.version = max(seen.version, version)
        if record.timestamp_ms is not None and record.timestamp_ms >= 0:
            seen.at = max(seen.at or 0, record.timestamp_ms)

    def rows(self) -> list[Row]:
        return [Row("aggregate", self.name, aggregate_id, None, seen.at, f"version {seen.version}",
                    {"version": seen.version, "events": seen.events})
                for aggregate_id, seen in self.instances.items()]


def aggregate_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                   timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    handles = [handle for handle in app.declared("aggregate") if handle.name in names]
    indexes = [AggregateIndex(handle.name, app.partitions) for handle in handles]
    read_topics(kafka, {handle.topics.events: index.take for handle, index in zip(handles, indexes)},
                group_prefix=f"{app.name}.", timeout=timeout)
    rows = [row for index in indexes for row in index.rows()]
    return rows, {handle.topics.events: index.skipped for handle, index in zip(handles, indexes)}


def origin_name(app_name: str, topic: str | None) -> str | None:
    """The definition whose topic ``{app}.{kind}.{name}.{role}`` is ``topic``; None for any other."""
    prefix = f"{app_name}."
    if not topic or not topic.startswith(prefix):
        return None
    parts = topic[len(prefix):].split(".")
    return parts[1] if len(parts) >= 3 else None


def deadletter_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                    timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    wanted = set(names)
    rows: list[Row] = []

    def take(record: Incoming) -> None:
        line, written_ms = dead_letter_line(record)
        origin = line.get("origin", {}).get("topic")
        name = origin_name(app.name, origin)
        if named and name not in wanted:
            return
        status = line.get("error_type") or ("unreadable" if "unreadable" in line else None)
        detail = line.get("reason") or line.get("unreadable") or ""
        letter = line["letter"]
        rows.append(Row("deadletter", name or "-", f"{letter['partition']}:{letter['offset']}", status, written_ms,
                        detail, {"letter": line}))

    read_topics(kafka, {deadletter_topic(app.name): take}, group_prefix=f"{app.name}.", timeout=timeout)
    return rows, {}


class SagaIndex:
    """Where each saga stands, from its journal (keys ``{saga_id}/{seq}``): its last record.

    Only the highest seq's value is kept while reading, and decoded at the end, so a saga
    of ten records costs one decode. A second record at a seq (a zombie's) is ignored, the
    first in offset order kept, as a worker does. A key that is not ``{id}/{seq}``, on
    another partition than its id's, or whose value does not decode or names another saga,
    id or seq, is skipped.
    """

    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.partitions = partitions
        self.last: dict[str, tuple[int, bytes]] = {}
        self.first_at: dict[str, int] = {}  # the time of seq 1's record: when the saga started
        self.skipped = 0

    def take(self, record: Incoming) -> None:
        saga_id, seq = _numbered_key(record, self.partitions)
        if seq < 1:
            self.skipped += 1
            return
        if record.value is None:
            return
        if seq == 1 and record.timestamp_ms is not None and record.timestamp_ms >= 0:
            self.first_at.setdefault(saga_id, record.timestamp_ms)
        kept = self.last.get(saga_id)
        if kept is None or seq > kept[0]:
            self.last[saga_id] = (seq, record.value)

    def rows(self) -> list[Row]:
        rows = []
        for saga_id, (seq, value) in self.last.items():
            try:
                entry = avro.decode_as(value, SagaJournalEntry)
            except RecordError:
                entry = None
            if entry is None or (entry.saga, entry.saga_id, entry.seq) != (self.name, saga_id, seq):
                self.skipped += 1
                continue
            status = "FAULTED" if entry.transition == "fault" else "ENDED" if entry.ended else "RUNNING"
            state = entry.state.decode("utf-8", "replace") if entry.state is not None else None
            detail = f"{entry.transition}: {entry.reason}" if entry.reason else f"{entry.transition} {state or ''}"
            rows.append(Row("saga", self.name, saga_id, status, entry.entered_at_ms, detail.strip(),
                            {"seq": seq, "transition": entry.transition, "state": state, "reason": entry.reason},
                            started_at=self.first_at.get(saga_id),
                            ended_at=entry.entered_at_ms if entry.ended else None))
        return rows


def saga_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
              timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    handles = [handle for handle in app.declared("saga") if handle.name in names]
    indexes = [SagaIndex(handle.name, app.partitions) for handle in handles]
    read_topics(kafka, {handle.topics.journal: index.take for handle, index in zip(handles, indexes)},
                group_prefix=f"{app.name}.", timeout=timeout)
    rows = [row for index in indexes for row in index.rows()]
    return rows, {handle.topics.journal: index.skipped for handle, index in zip(handles, indexes)}


READERS: Final[dict[str, Reader]] = {
    "workflow": workflow_rows,
    "saga": saga_rows,
    "aggregate": aggregate_rows,
    "orchestration": orchestration_rows,
    "schedule": schedule_rows,
    "flow": flow_rows,
    "deadletters": deadletter_rows,
}


def _numbered_key(record: Incoming, partitions: int) -> tuple[str, int]:
    """A journal key ``{id}/{number}`` on its id's partition as (id, number); -1 when it is not one."""
    try:
        owner, slash, number = (record.key or b"").decode("utf-8").rpartition("/")
    except UnicodeDecodeError:
        return "", -1
    if not slash or not number.isdigit() or not owner or partition_for(owner, partitions) != record.partition:
        return "", -1
    return owner, int(number)

