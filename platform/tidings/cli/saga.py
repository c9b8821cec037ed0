"""``tidings saga status|journal MODULE:APP NAME ID``: where a saga stands, read from its journal.

Both read the saga's journal topic (``{app}.saga.{name}.journal``) directly: no worker
needs to run, and what a worker is writing right now may be missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from ..inspection.instances import saga_record_json as record_json
from ..shell.kinds.saga.handle import SagaHandle, saga_named
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Read a saga's journal topic (no worker needed) and print, as JSON:

  status   where the saga stands: its last record's seq, state, whether it ended, and how
           it got there, e.g.
           {"saga": "transfer", "id": "t-1", "started": true, "seq": 3, "ended": true,
            "transition": "stop", "entered_at_ms": 1767225600000, "reason": null,
            "state": {"phase": "received", ...}}
           or {"saga": "transfer", "id": "t-1", "started": false} when it never started.
  journal  every record of the saga, oldest first, one JSON line each (state, cause, the
           ids of the events it handled, the commands it sent).

For example:

  tidings saga status examples.bank.app:app transfer t-1
  tidings saga journal examples.bank.app:app transfer t-1 | jq -c '.commands'

Exit status: 0 read (even if it never started); 1 the topic is missing or Kafka did not answer.
"""


def register(subparsers: Any) -> None:
    """Add the ``saga`` command and its ``status`` and ``journal`` subcommands."""
    parser = subparsers.add_parser(
        "saga", help="print a saga's status or journal", description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text in (("status", "print where a saga stands"),
                              ("journal", "print a saga's journal as JSON lines")):
        sub = actions.add_parser(action, help=help_text, description=_DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=EXIT_STATUS_EPILOG)
        sub.add_argument("app", metavar="MODULE:APP", help="where the App is")
        sub.add_argument("saga", metavar="NAME", help="the saga's name, e.g. transfer")
        sub.add_argument("saga_id", metavar="ID", help="the saga id (the correlation id that started it)")
        add_kafka_arguments(sub)
        sub.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default 30)")
        sub.set_defaults(run=run_status if action == "status" else run_journal)


def _handle(args: argparse.Namespace) -> SagaHandle:
    app = load_app(args.app)
    try:
        handle = saga_named(app, args.saga)
    except LookupError as exc:
        raise SystemExit(f"tidings: {exc.args[0]}") from None
    reach_kafka(connection(args, app), args.timeout)
    return handle


def run_status(args: argparse.Namespace) -> int:
    handle = _handle(args)
    status = asyncio.run(handle.status(args.saga_id, bootstrap=connection(args, handle.context), timeout=args.timeout))
    out: dict[str, Any] = {"saga": handle.name, "id": args.saga_id, "started": status is not None}
    if status is not None:
        out.update(
            seq=status.seq, ended=status.ended, transition=status.transition,
            entered_at_ms=status.entered_at_ms, reason=status.reason,
            state=json.loads(handle.definition.dump_state(status.state)),
        )
    print(json.dumps(out), flush=True)
    return 0


def run_journal(args: argparse.Namespace) -> int:
    handle = _handle(args)
    for record in asyncio.run(handle.journal(args.saga_id, bootstrap=connection(args, handle.context), timeout=args.timeout)):
        print(json.dumps(record_json(record)), flush=True)
    return 0
