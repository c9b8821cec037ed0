"""``tidings send MODULE:APP AGGREGATE ID TYPE JSON``: send one command, print the reply."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from ..codec.payloads import load_payload
from ..errors import SchemaError
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Send one command to an aggregate instance and print the reply event as JSON.
TYPE is the command's type name and JSON its fields, for example:

  tidings send examples.bank.app:app account alice Deposit '{"amount": "10"}'

Exit status: 0 on a reply event, 1 on a conflict or rejected command, 2 on a timeout.
"""


def register(subparsers: Any) -> None:
    """Add the ``send`` command."""
    parser = subparsers.add_parser(
        "send",
        help="send a command to an aggregate and print the reply",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is")
    parser.add_argument("aggregate", help="the aggregate's name, e.g. account")
    parser.add_argument("aggregate_id", metavar="ID", help="the instance id, e.g. alice")
    parser.add_argument("type", metavar="TYPE", help="the command type name, e.g. Deposit")
    parser.add_argument("payload", metavar="JSON", nargs="?", default="{}", help="the fields")
    add_kafka_arguments(parser)
    parser.add_argument("--timeout", type=float, help="seconds to wait for the reply")
    parser.add_argument("--expected-version", type=int, help="refuse unless at this version")
    parser.add_argument("--command-id", help="idempotency key (default: a new id)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    kafka = connection(args, app)
    reach_kafka(kafka, args.timeout)
    client = app.client(kafka)
    handle = client.handle_for(args.aggregate)
    try:
        command = load_payload(
            args.type, args.payload.encode(), handle.definition.command_types
        )
    except SchemaError as exc:
        print(f"tidings: error: {exc}", file=sys.stderr)
        return 1

    async def send() -> Any:
        return await client.send_envelope(
            handle, args.aggregate_id, command, args.timeout,
            expected_version=args.expected_version, command_id=args.command_id,
        )

    try:
        reply = asyncio.run(send())
    except TimeoutError as exc:
        print(f"tidings: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    events = [
        {"version": e.version, "type": e.type, "deferred": e.deferred, "payload": json.loads(e.payload)}
        for e in reply.events
    ]
    print(json.dumps({"status": reply.status, "version": reply.version, "events": events}))
    return 0 if reply.status in ("accepted", "ignored") else 1
