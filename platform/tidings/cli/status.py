"""``tidings status MODULE:APP WORKFLOW ID``: print an instance's status."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .kafka import connection
from .start import add_workflow_parser, call, fail, workflow_handle

_DESCRIPTION = """\
Print the status of the instance ID as JSON: {"status": "RUNNING"} (or FINISHED,
FAULTED, CANCELLED, PARKED), or {"status": null} when it was never started, for example:

  tidings status examples.shop.app:app enrich order-17

Exit status: 0 answered; 2 no answer in time.
"""


def register(subparsers: Any) -> None:
    """Add the ``status`` command."""
    parser = add_workflow_parser(subparsers, "status", "print a workflow instance's status", _DESCRIPTION)
    parser.add_argument("--timeout", type=float, help="seconds to wait for the answer")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
    try:
        status = call(handle, lambda: handle.status(args.instance_id, args.timeout, bootstrap=connection(args, handle.app)))
    except TimeoutError as exc:
        return fail(str(exc), 2)
    print(json.dumps({"status": None if status is None else status.value}))
    return 0
