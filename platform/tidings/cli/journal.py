"""``tidings journal MODULE:APP WORKFLOW ID``: print an instance's journal as JSON lines;
``tidings journal MODULE:APP WORKFLOW --export FILE``: write every instance's journal to a file.

The records the worker journaled for one instance, oldest first, each in the journal's own
JSON form (``record_to_json``): what a stored golden journal holds, so a line can be read
back with ``record_from_json`` and replayed in a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..core.workflow.journal import record_to_json
from ..inspection.instances import shown
from ..inspection.journals import read_topic_journals, write_export
from ..shell.kinds.workflow.journal import read_journal
from ..inspection.journal_text import journal_lines, summary
from .kafka import connection
from .start import add_workflow_parser, workflow_handle

_DESCRIPTION = """\
Print the journal of the instance ID, oldest record first: a line that says how it stands,
then one line per record with its time (ISO-8601 UTC), its seq and what happened, each
step's end with how long the step took and which attempt of an activity ended it, each
failed attempt that was retried with its error and when the next was due (journaled
since workflowjournal.v5; attempts count from 1 again after a worker restart):

  enrich order-17: finished after 3.005 s, 8 records
  2026-11-30T00:13:50.352Z  #1  started with "ABC"
  2026-11-30T00:13:50.352Z  #2  step 1 activity score
  2026-11-30T00:13:50.357Z  #3  step 1 attempt 1 failed, ConnectionError: down; next attempt at ... (in 1.000 s)
  2026-11-30T00:13:51.362Z  #4  step 1 done: 30  (took 1.010 s, attempt 2, 1 failed attempt journaled before)
  ...
  2026-11-30T00:13:53.357Z  #8  ended finished: {"points":30,...}  (after 3.005 s)

Stored values are the JSON the worker stored, inline; past 200 characters they are
shortened unless --full. --json prints one JSON line per record instead, in the journal's
own form (record_to_json), which record_from_json reads back for a golden replay test:

  {"type": "started", "seq": 1, "input": "\\"ABC\\"", "at": 1767225600000, ...}

The tokens a parent and its child use to tell the child's reports from forged ones (token,
parent_token) are never shown: --json prints them as "hidden", since whoever holds one
could end that parent's step. It reads the journal topic as it is now; an instance never
started prints "never started" (--json: nothing). For example:

  tidings journal examples.shop.app:app enrich order-17 --json | jq -c 'select(.type == "step_started")'

--export FILE (no ID) writes every instance's journal instead, for `tidings replay --file`
to check new code against before a deploy (docs/testing.md, "Replay before a deploy"): JSON
lines, a header line, then one line per record, {"instance_id": ..., "record": {...}} with the
record in the journal's own form (tokens "hidden"); - writes to standard output. A record of
the topic that cannot be read is reported on stderr, and its instance left out of the file:

  tidings journal examples.shop.app:app enrich --export enrich.jsonl

Exit status: 0 read (even if empty); 1 the topic is missing or Kafka did not answer, or
(--export) records could not be read; 2 neither ID nor --export, or both.
"""


def register(subparsers: Any) -> None:
    """Add the ``journal`` command."""
    parser = add_workflow_parser(
        subparsers, "journal", "print a workflow instance's journal, or --export every instance's",
        _DESCRIPTION, instance=False,
    )
    parser.add_argument("instance_id", metavar="ID", nargs="?", help="the instance id, e.g. order-17")
    parser.add_argument("--export", metavar="FILE",
                        help="write every instance's journal to FILE (JSON lines; - for stdout) instead of one")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default 30)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON line per record (the journal's own form) instead of lines for people")
    parser.add_argument("--full", action="store_true", help="print long stored values whole, not shortened")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if (args.instance_id is None) == (args.export is None):
        print("tidings: give either an instance ID or --export FILE", file=sys.stderr)
        return 2
    handle = workflow_handle(args)
    if args.export is not None:
        return export(args, handle)
    records = read_journal(
        connection(args, handle.context), handle.topics.journal, handle.context.partitions, args.instance_id,
        timeout=args.timeout, group_prefix=f"{handle.context.name}.",
    )
    if args.json:
        for record in records:
            print(json.dumps(shown(record_to_json(record))), flush=True)
        return 0
    print(summary(args.workflow, args.instance_id, records))
    for line in journal_lines(records, full=args.full):
        print(line)
    return 0


def export(args: argparse.Namespace, handle: Any) -> int:
    """Write every instance's journal to ``args.export``; 1 when records could not be read."""
    journals = read_topic_journals(connection(args, handle.context), handle.topics.journal,
                                   group_prefix=f"{handle.context.name}.", timeout=args.timeout)
    for line in [*journals.errors, *journals.skipped()]:
        print(f"tidings: {line}", file=sys.stderr)
    now = int(time.time() * 1000)
    if args.export == "-":
        written = write_export(sys.stdout, handle.context.name, handle.name, journals, now)
    else:
        try:
            with open(args.export, "w", encoding="utf-8") as out:
                written = write_export(out, handle.context.name, handle.name, journals, now)
        except OSError as exc:
            print(f"tidings: cannot write {args.export}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print(f"exported {written:,} records of {len(journals) - len(journals.unreadable):,} instances"
          f" to {args.export}" + (f"; {len(journals.errors):,} unreadable records left out"
                                  if journals.errors else ""), file=sys.stderr)
    return 1 if journals.errors else 0
