"""``tidings describe MODULE:APP workflow|saga NAME ID``: how one instance stands, and where it waits.

Read from the topics, no worker asked: the instance's journal (``read_journal``), its latest
status and its children's (the status topics, only the partitions their ids live on). What
is said and what the journal cannot say: ``tidings.inspection.describe_text``.
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

A running activity's attempts before the one that ends its step are not journaled (the
owning worker retries in memory, and starts again at attempt 1 after a restart), so it
shows since when the step runs. --json prints one JSON object instead. For example:

  tidings describe examples.shop.app:app workflow enrich order-17
  tidings describe examples.shop.app:app workflow approve order-9 --json | jq .waiting
  tidings describe examples.bank.app:app saga transfer t-1

A saga (KIND saga) shows its status (RUNNING, ENDED, FAULTED) and since when, its state,
the commands its state sent and the replies it expects with their due times, then one
line per journal record.

Exit status: 0 described; 1 a topic is missing or Kafka failed; 2 a usage error (an unknown
kind or name, an instance never started, an id breaking the id limits).
"""

KINDS = ("workflow", "saga")


def register(subparsers: Any) -> None:
    """Add the ``describe`` command."""
    parser = subparsers.add_parser(
        "describe", help="describe one instance: status, where it waits, failures, parent and children",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.shop.app:app")
    parser.add_argument("kind", metavar="KIND", help="workflow or saga")
    parser.add_argument("name", metavar="NAME", help="the definition's name, e.g. enrich")
    parser.add_argument("instance_id", metavar="ID", help="the instance id, e.g. order-17")
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
    handles = {handle.name: handle for handle in app.declared(kind)}
    handle = handles.get(args.name)
    if handle is None:
        return _usage(f"{app.name} declares no {kind} {args.name!r} (it declares: {', '.join(handles) or 'none'})")
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
