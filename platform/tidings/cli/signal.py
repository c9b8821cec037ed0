"""``tidings signal MODULE:APP WORKFLOW ID NAME [JSON] [--start INPUT]``: deliver a signal to an instance.

With ``--start`` it is a signal-with-start: one request that starts the instance with INPUT
if it was never started and in either case delivers the signal (docs/workflows.md).
"""

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

With --start JSON it starts the instance with that input if it was never started, and in
either case delivers the signal, in one request (a signal-with-start): no signal is lost
between a start and a signal racing each other. It prints "answer": "started" or
"signalled"; to an instance that ended it stores nothing and exits 1. --signal-id names
the signal: sent again with the same id (after exit 2), it is stored at most once.

  tidings signal examples.shop.app:app approve order-19 approval true --start null --signal-id a-1
"""


def register(subparsers: Any) -> None:
    """Add the ``signal`` command."""
    parser = add_workflow_parser(subparsers, "signal", "deliver a signal to a workflow instance", _DESCRIPTION)
    parser.add_argument("name", metavar="NAME", help="the signal's name")
    parser.add_argument("payload", metavar="JSON", nargs="?", default="null", help="the payload (default null)")
    parser.add_argument("--start", metavar="INPUT", dest="start_input",
                        help="signal-with-start: start the instance with this JSON input if it was never started")
    parser.add_argument("--signal-id", metavar="ID",
                        help="the signal's id: a repeat with the same id is stored once (default: a new id)")
    parser.add_argument("--timeout", type=float, help="seconds to wait for the answer")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    payload = parse_json(args.payload, "the payload")
    start_input = None if args.start_input is None else parse_json(args.start_input, "the --start input")
    if args.signal_id is not None and args.start_input is None:
        raise SystemExit("tidings: --signal-id goes with --start (a signal-with-start); drop it or add --start JSON")
    handle = workflow_handle(args)
    try:
        if args.start_input is None:
            call(handle, lambda: handle.signal(args.instance_id, args.name, payload,
                                               timeout=args.timeout, bootstrap=connection(args, handle.context)))
            answer = "signalled"
        else:
            answer = call(handle, lambda: handle.signal_with_start(
                args.instance_id, start_input, args.name, payload, signal_id=args.signal_id,
                timeout=args.timeout, bootstrap=connection(args, handle.context)))
    except TimeoutError as exc:
        return fail(str(exc), 2)
    if args.start_input is None:
        print(json.dumps({"signalled": args.instance_id, "signal": args.name}))
    else:
        print(json.dumps({"signalled": args.instance_id, "signal": args.name, "answer": answer,
                          "workflow": handle.name}))
    return 0
