"""``tidings outcomes MODULE:APP WORKFLOW [--follow]``: print a workflow's outcomes as JSON lines.

The way to read an outcomes topic (Avro) as JSON: one line per ended instance, in the shape
``tidings result`` prints plus the instance id, so ``jq`` or another language can consume it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from contextlib import aclosing
from typing import Any

from ..shell.client.client import Client
from ..shell.runtime.connection import KafkaConnection
from ..shell.kinds.workflow.handle import WorkflowHandle
from .interrupts import interruptible
from .kafka import connection
from .result import outcome_json
from .start import add_workflow_parser, workflow_handle

_DESCRIPTION = """\
Print the outcome of every ended instance of WORKFLOW, one JSON line each:

  {"instance_id": "order-17", "outcome": "finished", "value": ...}
  {"instance_id": "order-18", "outcome": "faulted", "error": {...}}
  {"instance_id": "order-19", "outcome": "cancelled"}

read from the workflow's outcomes topic from its beginning. Each instance is printed
once, although a worker publishes an outcome again after a restart.

Without --follow it stops at the end the topic had when it started, and exits 0. With
--follow it then prints outcomes as instances end, until Ctrl-C (exit 0), for example:

  tidings outcomes examples.shop.app:app enrich --follow | jq -c 'select(.outcome != "finished")'
"""


def register(subparsers: Any) -> None:
    """Add the ``outcomes`` command."""
    parser = add_workflow_parser(
        subparsers, "outcomes", "print a workflow's outcomes as JSON lines", _DESCRIPTION, instance=False
    )
    parser.add_argument("--follow", action="store_true", help="keep printing new outcomes until Ctrl-C")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
    if args.follow:
        interruptible()
    try:
        asyncio.run(print_outcomes(handle, connection(args, handle.app), follow=args.follow))
    except KeyboardInterrupt:
        # Ctrl-C is how --follow is meant to end: not a failure, and no traceback.
        pass
    return 0


async def print_outcomes(handle: WorkflowHandle, bootstrap: str | KafkaConnection, *, follow: bool) -> None:
    """Print one JSON line per instance of ``handle``'s workflow (flushed: others read it live)."""
    client = Client(bootstrap, app=handle.app)
    try:
        async with aclosing(client.outcomes(handle, follow=follow)) as outcomes:
            async for instance_id, outcome in outcomes:
                line = {"instance_id": instance_id, **outcome_json(outcome, handle.definition)}
                print(json.dumps(line), flush=True)
    finally:
        client.close()
