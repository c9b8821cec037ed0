"""``tidings console MODULE:APP [--host] [--port] [--allow-actions]``: the web console (tidings.console)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any

from ..console.actions import Actions
from ..console.api import ConsoleApi
from ..console.security import Guard, is_loopback
from ..console.server import serve
from .interrupts import interruptible
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Serve a web console of the App at MODULE:APP: an overview of every declared kind with
counts by status and the dead letters, lists with status filters and id search, each
instance's page (a workflow's timeline, parent and children; a saga's transitions and the
commands it sent; an aggregate's events by version), updated while you look. Its JSON API
is the one the page uses (docs/console.md). It reads the app's topics; a worker answers
the actions.

Read-only unless --allow-actions: then the page can signal and cancel workflows (one or a
filtered batch), pause and resume schedules, and send a dead letter back to the app's own
input topic it came from, after a confirmation.

It binds to 127.0.0.1 unless --host says otherwise; bound beyond loopback it needs a token
(--token or TIDINGS_CONSOLE_TOKEN, at least 16 characters), which a browser gives once
at /login?token=TOKEN and a program as Authorization: Bearer TOKEN. It serves
http://127.0.0.1:8470/ unless told otherwise. For example:

  tidings console examples.shop.app:app
  tidings console examples.shop.app:app --port 9000 --allow-actions
  TIDINGS_CONSOLE_TOKEN=$(openssl rand -hex 16) tidings console examples.shop.app:app --host 0.0.0.0 --allow-host console.internal

Stops on Ctrl-C or SIGTERM (exit 0). Exit status 2: a usage error (no token beyond
loopback, a port in use).
"""

#: The console's port unless --port says otherwise.
DEFAULT_PORT = 8470


def register(subparsers: Any) -> None:
    """Add the ``console`` command."""
    parser = subparsers.add_parser(
        "console", help="serve a web console of an app (read-only unless --allow-actions)",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.shop.app:app")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to bind (default 127.0.0.1; any other needs --token)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: any free one)")
    parser.add_argument("--allow-actions", action="store_true",
                        help="let the page signal, cancel, pause/resume schedules and send dead letters back")
    parser.add_argument("--token", help="the token every request needs (default $TIDINGS_CONSOLE_TOKEN); "
                                        "required beyond 127.0.0.1. Prefer the variable: arguments show in ps")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="another name the console is reached under (its Host header), e.g. behind a proxy")
    parser.add_argument("--timeout", type=float, default=15.0,
                        help="seconds to wait for Kafka per reading and for a worker's answer (default 15)")
    add_kafka_arguments(parser)
    parser.set_defaults(run=run)


def _usage(message: str) -> int:
    print(f"tidings console: {message}", file=sys.stderr)
    return 2


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the console as Ctrl-C does: the server closes, exit 0


def run(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("TIDINGS_CONSOLE_TOKEN") or None
    if token is None and not is_loopback(args.host):
        return _usage(f"binding to {args.host} needs a token: pass --token or set TIDINGS_CONSOLE_TOKEN "
                      "(or leave --host at 127.0.0.1)")
    if not 0 <= args.port <= 65535:
        return _usage(f"--port {args.port} is not a port (0 to 65535)")
    if not args.timeout > 0:
        return _usage(f"--timeout {args.timeout:g} is not a number of seconds above 0")
    try:
        guard = Guard(args.host, args.port, token, args.allow_actions, tuple(args.allow_host))
    except ValueError as exc:
        return _usage(str(exc))
    app = load_app(args.app)
    kafka = connection(args, app)
    reach_kafka(kafka, args.timeout)
    actions = Actions(app, kafka, args.timeout) if args.allow_actions else None
    api = ConsoleApi(app, kafka, actions, guard.csrf, timeout=args.timeout)
    try:
        server = serve(api, guard)
    except OSError as exc:
        if actions is not None:
            actions.close()
        return _usage(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc} (another --port?)")
    if args.port == 0:  # the page's Host checks need the port the system chose
        guard = Guard(args.host, server.server_address[1], token, args.allow_actions, tuple(args.allow_host),
                      csrf=guard.csrf, secret=guard.secret)
        server.guard = guard
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host = f"[{args.host}]" if ":" in args.host else args.host
    mode = "actions allowed" if args.allow_actions else "read-only"
    print(f"tidings console: {app.name} at http://{host}:{server.server_address[1]}/ ({mode})", flush=True)
    interruptible()
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if actions is not None:
            actions.close()
    return 0
