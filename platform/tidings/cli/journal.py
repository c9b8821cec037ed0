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
from ..shell.kinds.workflow.journal import read_journal
from .kafka import connection
from .start import add_workflow_parser, workflow_handle

_DESCRIPTION = """\
Print the journal of the instance ID, oldest record first, one JSON line each:

  {"type": "started", "seq": 1, "input": "\\"ABC\\"", "at": 1767225600000}
  {"type": "step_started", "seq": 2, "path": "1", "kind": "activity", "name": "score", ...}
  {"type": "step_completed", "seq": 3, "path": "1", "result": "30", "signal": null}
  ...
  {"type": "ended", "seq": 8, "outcome": "finished", "at": 1767225605000, "result": "{...}", "error": null}

User values (input, results, signal payloads) are the JSON text the worker stored. It reads
the journal topic as it is now and prints nothing when the instance was never started, for
example:

  tidings journal examples.shop.app:app enrich order-17 | jq -c 'select(.type == "step_started")'

Exit status: 0 read (even if empty); 1 the topic is missing or Kafka did not answer.
"""


def register(subparsers: Any) -> None:
    """Add the ``journal`` command."""
    parser = add_workflow_parser(
        subparsers, "journal", "print a workflow instance's journal as JSON lines", _DESCRIPTION
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default 30)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
    records = read_journal(
        connection(args, handle.context), handle.topics.journal, handle.context.partitions, args.instance_id,
        timeout=args.timeout, group_prefix=f"{handle.context.name}.",
    )
    for record in records:
        print(json.dumps(record_to_json(record)), flush=True)
    return 0
