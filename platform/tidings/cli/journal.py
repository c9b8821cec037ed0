"""``tidings journal MODULE:APP WORKFLOW ID``: print an instance's journal as JSON lines.

The records the worker journaled for one instance, oldest first, each in the journal's own
JSON form (``record_to_json``): what a stored golden journal holds, so a line can be read
back with ``record_from_json`` and replayed in a test.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..core.workflow.journal import record_to_json
from ..inspection.instances import shown
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

Exit status: 0 read (even if empty); 1 the topic is missing or Kafka did not answer.
"""


def register(subparsers: Any) -> None:
    """Add the ``journal`` command."""
    parser = add_workflow_parser(
        subparsers, "journal", "print a workflow instance's journal as JSON lines", _DESCRIPTION
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default 30)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON line per record (the journal's own form) instead of lines for people")
    parser.add_argument("--full", action="store_true", help="print long stored values whole, not shortened")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
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
