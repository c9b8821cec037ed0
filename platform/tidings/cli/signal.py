"""``tidings signal MODULE:APP WORKFLOW ID NAME [JSON]``: deliver a signal to an instance."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .kafka import connection
from .start import add_workflow_parser, call, fail, parse_json, workflow_handle

_DESCRIPTION = """\
Deliver the signal NAME with the JSON payload to the instance ID, for example:

  tidings start examples.shop.app:app approve order-18
  tidings signal examples.shop.app:app approve order-18 approval true

Returns once the signal is stored. Exit status: 0 stored; 1 no such instance or it has
ended; 2 no answer in time (the signal may still be stored later).
"""


def register(subparsers: Any) -> None:
    """Add the ``signal`` command."""
    parser = add_workflow_parser(subparsers, "signal", "deliver a signal to a workflow instance", _DESCRIPTION)
    parser.add_argument("name", metavar="NAME", help="the signal's name")
    parser.add_argument("payload", metavar="JSON", nargs="?", default="null", help="the payload (default null)")
    parser.add_argument("--timeout", type=float, help="seconds to wait for the answer")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
    payload = parse_json(args.payload, "the payload")
    try:
        call(handle, lambda: handle.signal(args.instance_id, args.name, payload,
                                           timeout=args.timeout, bootstrap=connection(args, handle.app)))
    except TimeoutError as exc:
        return fail(str(exc), 2)
    print(json.dumps({"signalled": args.instance_id, "signal": args.name}))
    return 0
