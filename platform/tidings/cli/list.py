"""``tidings list MODULE:APP KIND [NAME]``: the instances of a kind, their status, a count per status.

Each kind's index is a topic the app already has (docs/operations.md, "Listing and
describing"): a workflow's compacted status topic (latest status per instance), a saga's
journal (its last record per saga), an aggregate's events topic (its keys
``{id}/{version}``: instances and versions, no value decoded), the dead-letter topic, and
for orchestrations, schedules and flows what ``tidings.inspection.kind_indexes`` says.
Reading them is ``tidings.inspection.indexes``; filtering and counting
``tidings.inspection.listing``; this module parses the arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import UsageError
from ..inspection.indexes import ALIASES, KINDS, READERS, Kind, declared_names
from ..inspection.listing import Filters, Selection, counts_json, counts_line, parse_limit, parse_when, row_json, select, table
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
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


