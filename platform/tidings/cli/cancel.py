"""``tidings cancel MODULE:APP WORKFLOW ID``: request cancellation of an instance."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .kafka import connection
from .start import add_workflow_parser, call, fail, workflow_handle

_DESCRIPTION = """\
Request cancellation of the instance ID. Its pending steps fail CANCELLED; the body may
run cleanup steps. A second request, or one to an ended instance, changes nothing.
For example:

  tidings start examples.shop.app:app approve order-19
  tidings cancel examples.shop.app:app approve order-19

Exit status: 0 requested; 1 no such instance; 2 no answer in time.
"""


def register(subparsers: Any) -> None:
    """Add the ``cancel`` command."""
    parser = add_workflow_parser(subparsers, "cancel", "cancel a workflow instance", _DESCRIPTION)
    parser.add_argument("--timeout", type=float, help="seconds to wait for the answer")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
    try:
        call(handle, lambda: handle.cancel(args.instance_id, timeout=args.timeout, bootstrap=connection(args, handle.app)))
    except TimeoutError as exc:
        return fail(str(exc), 2)
    print(json.dumps({"cancel_requested": args.instance_id}))
    return 0
