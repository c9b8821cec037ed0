"""``tidings acls MODULE:APP --worker P --client P [...] [--apply]``: least-privilege ACLs."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.shell.runtime.acls import app_bindings, apply_bindings, client_replies_topic
from tidings.shell.runtime.topics import DEFAULT_TIMEOUT_S, apply_topics, spec_for

from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
The ACLs the App at MODULE:ATTRIBUTE needs, one line each (docs/security.md, "ACLs"):

  --worker P   reads, writes, creates and describes every topic under '{app}.' (prefixed:
               a new definition needs nothing new) and the app's topics outside it (a
               flow's source and sink); its consumer groups '{app}' and '{app}.*'; its
               transactional ids '{app}-*'.
  --client P   writes only the aggregates' commands and the workflows' inboxes; reads only
               the workflows' outcomes and status and its own replies topic
               '{app}.replies.NAME' (NAME: P without 'User:'); consumer groups '{app}.client.*'.
               These are literal, one per topic: apply again after adding an aggregate
               or a workflow. Run the client with TIDINGS_CLIENT_NAME=NAME (or
               app.client(name=NAME)) so it asks for its replies there.

Without --apply, nothing contacts Kafka. With --apply (a principal allowed to alter ACLs,
e.g. a super user, through --kafka-config), the cluster's ACLs are described first and only
the missing ones are created; each client's replies topic is created if missing. Safe to
run again: a second run creates nothing.
"""


def register(subparsers: Any) -> None:
    """Add the ``acls`` command."""
    parser = subparsers.add_parser(
        "acls",
        help="print (or apply) the least-privilege ACLs of an App's worker and clients",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.bank.app:app")
    parser.add_argument("--worker", metavar="PRINCIPAL", help="the workers' principal, e.g. User:bank-worker")
    parser.add_argument("--client", metavar="PRINCIPAL", action="append", default=[],
                        help="a client principal, e.g. User:teller (repeat for each)")
    parser.add_argument("--host", default="*", help="the client host every ACL allows (default *: any)")
    parser.add_argument("--apply", action="store_true",
                        help="create the missing ACLs and client replies topics through the AdminClient")
    add_kafka_arguments(parser)
    parser.add_argument("--timeout", type=float,
                        help=f"seconds each request to Kafka may take (default {DEFAULT_TIMEOUT_S:g})")
    parser.set_defaults(run=run)


def app_topics(app: Any) -> list[str]:
    """Every topic the App's workers use: its declared topics and its flows' sources."""
    topics = [spec.name for spec in app.topic_specs()]
    topics.extend(source for hosted in app.hosted
                  if isinstance(source := getattr(hosted, "source_topic", None), str))
    return topics


def run(args: argparse.Namespace) -> int:
    """Print the bindings; with ``--apply``, create what is missing. 0 on success."""
    if args.worker is None and not args.client:
        raise SystemExit("tidings acls: give --worker PRINCIPAL, --client PRINCIPAL or both")
    app = load_app(args.app)
    bindings = app_bindings(app.name, app_topics(app), worker=args.worker, clients=args.client, host=args.host)
    if not args.apply:
        for binding in bindings:
            print(binding)
        print(f"{len(bindings)} ACLs for app {app.name!r}")
        return 0
    kafka = connection(args, app)
    reach_kafka(kafka, args.timeout)
    timeout = args.timeout or DEFAULT_TIMEOUT_S
    replies = [spec_for("replies", client_replies_topic(app.name, client), partitions=app.partitions)
               for client in args.client]
    topics = apply_topics(kafka, app.replication().applied(replies), timeout=timeout)
    report = apply_bindings(kafka, bindings, timeout=timeout)
    print(f"{len(bindings)} ACLs: {len(report.created)} created, {len(report.present)} present; "
          f"{len(topics.created)} client replies topics created")
    return 0
