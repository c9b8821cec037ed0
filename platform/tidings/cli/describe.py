"""``tidings describe MODULE:APP workflow|saga|aggregate NAME ID`` (``schedule ID``): how one instance stands.

Read from the topics, no worker asked: the instance's journal (``read_journal``), its latest
status and its children's (the status topics, only the partitions their ids live on). What
is said and what the journal cannot say: ``tidings.inspection.describe_text``; aggregates and
schedules: ``describe_kinds.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core.limits import check_id
from ..errors import LimitError
from ..inspection.describe_text import describe_lines, saga_lines
from ..inspection.instances import read_saga, read_workflow, saga_record_json, shown
from .describe_kinds import (
    aggregate_lines,
    describe_aggregate,
    describe_schedule,
    dumps,
    read_events,
    schedule_describe_lines,
)
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Describe the instance ID of the workflow NAME: its status and since when, its start and
input, its parent, the steps it waits on (a timer with its due time, a signal wait, a
running activity, a child) and since when, signals received and not yet consumed, the
last step that failed (with the attempt that ended it), its children with their status,
then the last lines of its journal (--journal: all of them):

  enrich order-17: running, waiting on step 2 timer since 2026-11-30T00:13:50.357Z; 4 records
    status          RUNNING since 2026-11-30T00:13:50.352Z
    started         2026-11-30T00:13:50.352Z with "ABC"
    waiting on      step 2 timer since 2026-11-30T00:13:50.357Z (1.204 s), due ... (in 1.796 s)
  journal:
    ...

--json prints one JSON object instead. For example:

  tidings describe examples.shop.app:app workflow enrich order-17
  tidings describe examples.shop.app:app workflow approve order-9 --json | jq .waiting
  tidings describe examples.bank.app:app saga transfer t-1

A running activity shows its attempts that failed and will be retried (journaled since
workflowjournal.v5): how many, the last one's error, and when the next attempt is due. The
owning worker counts attempts in memory: after a restart it begins at attempt 1 again (the
attempts journaled before stay, and describe says a worker began again).

A saga (KIND saga) shows its status (RUNNING, ENDED, FAULTED) and since when, its state,
the commands its state sent and the replies it expects with their due times, then one
line per journal record.

An aggregate (KIND aggregate NAME ID) shows its version, its last events (version, type,
time, payload) and its state folded from them when the state reads as JSON. A schedule
(KIND schedule ID) shows its rule, whether it is paused, its next due time and its last
runs (decided when, start reported or not), from the schedule aggregate's journal:

  tidings describe examples.bank.app:app aggregate account alice
  tidings describe examples.shop.app:app schedule nightly-report

Exit status: 0 described; 1 a topic is missing or Kafka failed; 2 a usage error (an unknown
kind or name, an instance never started, an id breaking the id limits).
"""

KINDS = ("workflow", "saga", "aggregate", "schedule")


def register(subparsers: Any) -> None:
    """Add the ``describe`` command."""
    parser = subparsers.add_parser(
        "describe", help="describe one instance: status, where it waits, failures, parent and children",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.shop.app:app")
    parser.add_argument("kind", metavar="KIND", help=f"one of: {', '.join(KINDS)}")
    parser.add_argument("name", metavar="NAME", help="the definition's name, e.g. enrich (a schedule: its id)")
    parser.add_argument("instance_id", metavar="ID", nargs="?", help="the instance id, e.g. order-17")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines for people")
    parser.add_argument("--journal", action="store_true", help="print the whole journal, not its last lines")
    parser.add_argument("--full", action="store_true", help="print long stored values whole, not shortened")
    parser.add_argument("--timeout", type=float, help="seconds to wait for Kafka (default 30)")
    add_kafka_arguments(parser)
    parser.set_defaults(run=run)


def _usage(message: str) -> int:
    print(f"tidings describe: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    kind = args.kind.lower().rstrip("s")
    if kind not in KINDS:
        return _usage(f"describing {args.kind!r} is not there; kinds: {', '.join(KINDS)}")
    if kind == "schedule":
        try:
            schedules = app.schedule_handle()
        except LookupError as exc:
            return _usage(str(exc))
        if args.instance_id is None:
            args.name, args.instance_id = schedules.aggregate.name, args.name
        handles = {schedules.aggregate.name: schedules.aggregate}
        if args.name not in handles:
            return _usage(f"describe a schedule as `describe MODULE:APP schedule ID` (not {args.name!r})")
    else:
        handles = {handle.name: handle for handle in app.declared(kind)}
    handle = handles.get(args.name)
    if handle is None:
        return _usage(f"{app.name} declares no {kind} {args.name!r} (it declares: {', '.join(handles) or 'none'})")
    if args.instance_id is None:
        return _usage(f"describe {kind} needs NAME and ID, e.g. describe MODULE:APP {kind} {args.name} ID")
    try:
        check_id(args.instance_id, f"{kind} id")
    except LimitError as exc:
        return _usage(str(exc))
    if args.timeout is not None and not args.timeout > 0:
        return _usage(f"--timeout {args.timeout:g} is not a number of seconds above 0")
    timeout = args.timeout or 30.0
    kafka = connection(args, app)
    reach_kafka(kafka, timeout)
    if kind == "saga":
        return _saga(args, handle, kafka, timeout)
    if kind in ("aggregate", "schedule"):
        return _aggregate(args, kind, handle, kafka, timeout, app.partitions, f"{app.name}.")
    read = read_workflow(app, kafka, args.name, args.instance_id, timeout=timeout)
    if read is None:
        return _usage(f"no {args.name} instance {args.instance_id!r} was started (its journal is empty)")
    described, records = read.described, read.records
    if args.json:
        print(json.dumps(shown(described)))
        return 0
    for line in describe_lines(described, records, whole_journal=args.journal, full=args.full):
        print(line)
    return 0


def _saga(args: argparse.Namespace, handle: Any, kafka: Any, timeout: float) -> int:
    read = read_saga(handle, kafka, args.instance_id, timeout=timeout)
    if read is None:
        return _usage(f"no {args.name} saga {args.instance_id!r} was started (its journal is empty)")
    if args.json:
        print(json.dumps({**read.described, "journal": [saga_record_json(entry) for entry in read.entries]}))
        return 0
    for line in saga_lines(read.described, read.entries, full=args.full):
        print(line)
    return 0


def _aggregate(args: argparse.Namespace, kind: str, handle: Any, kafka: Any, timeout: float, partitions: int,
               prefix: str) -> int:
    records, events = read_events(kafka, handle.topics.events, partitions, args.instance_id, timeout=timeout,
                                  group_prefix=prefix)
    if not events:
        what = f"schedule {args.instance_id!r} was created" if kind == "schedule" else \
            f"{args.name} instance {args.instance_id!r} stored an event"
        return _usage(f"no {what} (its journal holds no event)")
    if kind == "schedule":
        state, described = describe_schedule(handle, args.instance_id, records, events, partitions)
        lines = schedule_describe_lines(args.instance_id, state, described)
    else:
        described = describe_aggregate(handle, args.instance_id, records, events, partitions)
        lines = aggregate_lines(described, events, whole=args.journal, full=args.full)
    if args.json:
        print(dumps(described))
        return 0
    for line in lines:
        print(line)
    return 0

