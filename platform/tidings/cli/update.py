"""``tidings update MODULE:APP WORKFLOW ID NAME [JSON] [--start INPUT] [--wait accepted|completed]``:
send an update to an instance and print the body's answer (docs/workflows.md, "Updates")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .kafka import connection
from .start import add_workflow_parser, call, fail, parse_json, workflow_handle

_DESCRIPTION = """\
Send the update NAME with the JSON payload to the instance ID and print the body's answer:

  tidings update examples.shop.app:app cart cart-7 add_item '{"sku": "A-1", "qty": 2}'

The worker checks the update first (a name the workflow declares, a payload of the declared
type, its validator): refused, it stores nothing and this exits 1 with the reason. Accepted,
it is journaled, the body takes it (ctx.wait_update), may run steps, and answers.

--wait accepted returns once the update is journaled instead (prints "answer": "accepted").
--update-id names the update: sent again with the same id (after exit 2, or from another
process), it is stored once and gets the first answer. --start JSON makes it an
update-with-start: one request that starts the instance with that input if it was never
started, then updates it.

Exit status: 0 answered (or accepted); 1 no such instance, it has ended, the update was
rejected or the body failed it; 2 no answer in time (send again with the same --update-id).
"""


def register(subparsers: Any) -> None:
    """Add the ``update`` command."""
    parser = add_workflow_parser(subparsers, "update", "send an update to a workflow instance and print its answer",
                                 _DESCRIPTION)
    parser.add_argument("name", metavar="NAME", help="the update's name")
    parser.add_argument("payload", metavar="JSON", nargs="?", default="null", help="the payload (default null)")
    parser.add_argument("--start", metavar="INPUT", dest="start_input",
                        help="update-with-start: start the instance with this JSON input if it was never started")
    parser.add_argument("--wait", choices=("accepted", "completed"), default="completed",
                        help="return once the update is journaled (accepted) or answered (completed, the default)")
    parser.add_argument("--update-id", metavar="ID",
                        help="the update's id: a repeat with the same id is stored once (default: a new id)")
    parser.add_argument("--timeout", type=float, help="seconds to wait for the answer")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    payload = parse_json(args.payload, "the payload")
    start_input = None if args.start_input is None else parse_json(args.start_input, "the --start input")
    handle = workflow_handle(args)
    options: dict[str, Any] = {"timeout": args.timeout, "wait_for": args.wait, "update_id": args.update_id}
    try:
        if args.start_input is None:
            answer = call(handle, lambda: handle.update(args.instance_id, args.name, payload,
                                                        bootstrap=connection(args, handle.context), **options))
        else:
            answer = call(handle, lambda: handle.update_with_start(
                args.instance_id, start_input, args.name, payload, bootstrap=connection(args, handle.context),
                **options))
    except TimeoutError as exc:
        return fail(str(exc), 2)
    out: dict[str, Any] = {"updated": args.instance_id, "update": args.name, "workflow": handle.name}
    if args.wait == "accepted":
        out["answer"] = "accepted"
    else:
        out["answer"], out["result"] = "completed", answer
    print(json.dumps(out))
    return 0
