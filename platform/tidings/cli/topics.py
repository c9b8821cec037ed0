"""``tidings topics apply|show MODULE:APP``: create an App's topics or list their specs."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.shell.runtime.topics import DEFAULT_TIMEOUT_S, TopicSpec, apply_topics

from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Topics of the App at MODULE:ATTRIBUTE (e.g. examples.bank.app:app), as its topic_specs()
lists them: partitions, replication factor and Kafka configs per role, from topics/roles.toml.

  apply  create every missing topic, then compare every existing one with its spec and
         print each setting that differs. Nothing existing is altered: a partition count
         change would move instances to other partitions, and a config change deserves a
         human decision. Safe to run again: a second run creates nothing.
         Exit status: 0 when everything matches, 2 when some setting differs.
  show   print the specs without contacting Kafka.
"""

DIFFERENCES_EXIT_CODE = 2


def register(subparsers: Any) -> None:
    """Add the ``topics`` command with its ``apply`` and ``show`` subcommands."""
    parser = subparsers.add_parser(
        "topics",
        help="create an App's Kafka topics and report settings that differ",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="topics_action", metavar="ACTION", required=True)
    apply = actions.add_parser(
        "apply",
        help="create missing topics, report differing settings",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    apply.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.bank.app:app")
    add_kafka_arguments(apply)
    apply.add_argument("--timeout", type=float,
                       help=f"seconds each request to Kafka may take (default {DEFAULT_TIMEOUT_S:g}; "
                       "10 at most for the first answer)")
    apply.set_defaults(run=run_apply)
    show = actions.add_parser("show", help="print the App's topic specs without contacting Kafka")
    show.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.bank.app:app")
    show.set_defaults(run=run_show)


def _specs(app: Any) -> list[TopicSpec]:
    topic_specs = getattr(app, "topic_specs", None)
    if not callable(topic_specs):
        raise SystemExit(f"tidings: {app!r} has no topic_specs() method; is it a tidings App?")
    return list(topic_specs())


def run_apply(args: argparse.Namespace) -> int:
    """Apply the App's topic specs; 0 when all match, 2 when a setting differs."""
    app = load_app(args.app)
    specs = _specs(app)
    kafka = connection(args, app)
    reach_kafka(kafka, args.timeout)
    report = apply_topics(kafka, specs, timeout=args.timeout or DEFAULT_TIMEOUT_S)
    print(f"{len(specs)} topics: {len(report.created)} created, {len(report.differences)} differing settings")
    return 0 if report.in_sync else DIFFERENCES_EXIT_CODE


def run_show(args: argparse.Namespace) -> int:
    """Print the App's topic specs, one topic per line."""
    for spec in _specs(load_app(args.app)):
        configs = " ".join(f"{key}={value}" for key, value in sorted(spec.config.items()))
        print(f"{spec.name} partitions={spec.partitions} replication={spec.replication_factor} {configs}")
    return 0
