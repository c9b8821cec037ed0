"""``tidings query MODULE:APP WORKFLOW ID NAME [ARGS_JSON]``: call an instance's query handler
and print its value (docs/workflows.md, "Queries")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .kafka import connection
from .start import add_workflow_parser, call, fail, parse_json, workflow_handle

_DESCRIPTION = """\
Call the query handler NAME of the instance ID with the positional args ARGS_JSON (a JSON
array; default none) and print its value:

  tidings query examples.shop.app:app cart cart-7 items
  tidings query examples.shop.app:app cart cart-7 quantity '["A-1"]'

The body registers its handlers with `await ctx.on_query(name, handler)`. The worker that owns
the instance calls the handler on its live state (a parked instance: the state it reached when
it parked; an ended one: its final state) and journals nothing: asking is always safe.

Exit status: 0 answered; 1 no such instance, no such handler (the message lists those the
instance registered) or the handler failed; 2 no answer in time.
"""


def register(subparsers: Any) -> None:
    """Add the ``query`` command."""
    parser = add_workflow_parser(subparsers, "query", "call a workflow instance's query handler and print its value",
                                 _DESCRIPTION)
    parser.add_argument("name", metavar="NAME", help="the query's name, as the body registered it")
    parser.add_argument("args_json", metavar="ARGS_JSON", nargs="?", default="[]",
                        help="the handler's positional args, a JSON array (default [])")
    parser.add_argument("--timeout", type=float, help="seconds to wait for the answer")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    query_args = parse_json(args.args_json, "ARGS_JSON")
    if not isinstance(query_args, list):
        return fail(f"ARGS_JSON is a JSON array of positional args, e.g. '[\"A-1\"]', not {args.args_json[:60]!r}", 1)
    handle = workflow_handle(args)
    try:
        value = call(handle, lambda: handle.query(args.instance_id, args.name, query_args, timeout=args.timeout,
                                                  bootstrap=connection(args, handle.context)))
    except TimeoutError as exc:
        return fail(str(exc), 2)
    print(json.dumps({"queried": args.instance_id, "query": args.name, "workflow": handle.name, "result": value}))
    return 0
