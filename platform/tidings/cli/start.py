"""``tidings start MODULE:APP WORKFLOW ID [JSON]``: start a workflow instance.

The other workflow commands (``signal``, ``cancel``, ``result``, ``status``, ``outcomes``)
share the helpers here: finding the workflow's handle and parsing JSON arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..shell.kinds.workflow.handle import workflow_named
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Start the instance ID of a workflow with the JSON input, for example:

  tidings start examples.shop.app:app enrich order-17 '"ABC"'

A second start with the same ID stores nothing. Returns once the request is in the
workflow's inbox; `tidings result` waits for the outcome.

Exit status: 0 stored; 2 not stored within --timeout (it may still be stored later).
"""


def register(subparsers: Any) -> None:
    """Add the ``start`` command."""
    parser = add_workflow_parser(subparsers, "start", "start a workflow instance", _DESCRIPTION)
    parser.add_argument("input", metavar="JSON", nargs="?", default="null", help="the input (default null)")
    parser.add_argument("--timeout", type=float,
                        help="seconds to wait until the request is stored (default: the app's command timeout)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
    value = parse_json(args.input, "the input")
    wait = handle.context.command_timeout if args.timeout is None else args.timeout
    try:
        # A produce nobody bounds waits out librdkafka's message.timeout.ms (300 s).
        call(handle, lambda: asyncio.wait_for(
            handle.start(args.instance_id, value, bootstrap=connection(args, handle.context)), wait))
    except TimeoutError:
        return fail(f"the start of {args.instance_id} was not stored within {wait:g} s "
                    "(it may still be stored later)", 2)
    print(json.dumps({"started": args.instance_id, "workflow": handle.name}))
    return 0


# -- shared by the workflow commands ----------------------------------------------------------


def add_workflow_parser(
    subparsers: Any, name: str, help: str, description: str, *, instance: bool = True
) -> argparse.ArgumentParser:
    """Add a command that names ``MODULE:APP WORKFLOW ID`` (no ID unless ``instance``); return its parser."""
    parser = subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is")
    parser.add_argument("workflow", metavar="WORKFLOW", help="the workflow's name, e.g. enrich")
    if instance:
        parser.add_argument("instance_id", metavar="ID", help="the instance id, e.g. order-17")
    add_kafka_arguments(parser)
    parser.epilog = EXIT_STATUS_EPILOG
    return parser


def workflow_handle(args: argparse.Namespace) -> Any:
    """Return the handle of ``args.workflow`` in the App ``args.app``, once Kafka answers.

    Raises:
        SystemExit: the App declares no such workflow.
        KafkaUnreachable: no broker answered within ``args.timeout`` (or 10 s).
    """
    app = load_app(args.app)
    try:
        handle = workflow_named(app, args.workflow)
    except LookupError as exc:
        raise SystemExit(f"tidings: {exc.args[0]}") from None
    reach_kafka(connection(args, app), getattr(args, "timeout", None))
    return handle


def parse_json(text: str, what: str) -> Any:
    """Parse a JSON argument, or exit saying what was wrong."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"tidings: {what} is not JSON: {exc}") from None


def call(handle: Any, request: Callable[[], Awaitable[Any]]) -> Any:
    """Run one request of ``handle``, then close the client it went through (its producer and threads)."""

    async def run() -> Any:
        return await request()

    try:
        return asyncio.run(run())
    finally:
        handle.close()


def fail(message: str, code: int) -> int:
    """Print ``message`` on stderr and return ``code``."""
    print(f"tidings: {message}", file=sys.stderr)
    return code
