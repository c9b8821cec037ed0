"""``tidings topics apply|show MODULE:APP``: create an App's topics or list their specs."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.shell.runtime.topics import (
    BROKER_DEFAULT,
    DEFAULT_TIMEOUT_S,
    MIN_INSYNC_ENV,
    REPLICATION_ENV,
    Replication,
    TopicSpec,
    apply_topics,
)

from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Topics of the App at MODULE:ATTRIBUTE (e.g. examples.bank.app:app), as its topic_specs()
lists them: partitions, replication factor and Kafka configs per role, from topics/roles.toml.

  apply  create every missing topic, then compare every existing one with its spec and
         print each setting that differs. Nothing existing is altered: a partition count
         change would move instances to other partitions, and a config change deserves a
         human decision. Safe to run again: a second run creates nothing.
         An existing topic with fewer replicas than --replication-factor asks is a
         difference too: Kafka cannot raise it in place (reassign its partitions).
         Exit status: 0 when everything matches, 2 when some setting differs.
  show   print the specs without contacting Kafka.

Replication: --replication-factor and --min-insync-replicas, else the App's
replication_factor= / min_insync_replicas=, else $TIDINGS_REPLICATION_FACTOR /
$TIDINGS_MIN_INSYNC_REPLICAS, else the broker's defaults (one node needs nothing).
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
    _add_replication_arguments(apply)
    apply.add_argument("--timeout", type=float,
                       help=f"seconds each request to Kafka may take (default {DEFAULT_TIMEOUT_S:g}; "
                       "10 at most for the first answer)")
    apply.set_defaults(run=run_apply)
    show = actions.add_parser("show", help="print the App's topic specs without contacting Kafka")
    show.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.bank.app:app")
    _add_replication_arguments(show)
    show.set_defaults(run=run_show)


def _replication_factor(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1 and value != BROKER_DEFAULT:
        raise argparse.ArgumentTypeError(f"{value} replicas: give a positive count, or -1 for the broker's default")
    return value


def _min_insync(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1 replica must have a write")
    return value


def _add_replication_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replication-factor", type=_replication_factor, metavar="N",
                        help="replicas of every topic created (default: the App's, else "
                        f"${REPLICATION_ENV}, else -1, the broker's default.replication.factor)")
    parser.add_argument("--min-insync-replicas", type=_min_insync, metavar="M",
                        help="the topics' min.insync.replicas, at most N (default: the App's, else "
                        f"${MIN_INSYNC_ENV}, else the broker's)")


def _specs(app: Any, args: argparse.Namespace) -> list[TopicSpec]:
    """The App's specs, with the flags' replication over the App's own.

    Raises:
        DefinitionError: the replication asked is not usable (more in-sync replicas than replicas).
    """
    topic_specs = getattr(app, "topic_specs", None)
    if not callable(topic_specs):
        raise SystemExit(f"tidings: {app!r} has no topic_specs() method; is it a tidings App?")
    specs = list(topic_specs())
    if args.replication_factor is None and args.min_insync_replicas is None:
        return specs
    current = getattr(app, "replication", None)
    base = current() if callable(current) else Replication.resolve()
    factor = base.factor if args.replication_factor is None else args.replication_factor
    min_insync = base.min_insync_replicas if args.min_insync_replicas is None else args.min_insync_replicas
    return Replication(factor, min_insync).applied(specs)


def run_apply(args: argparse.Namespace) -> int:
    """Apply the App's topic specs; 0 when all match, 2 when a setting differs."""
    app = load_app(args.app)
    specs = _specs(app, args)
    kafka = connection(args, app)
    reach_kafka(kafka, args.timeout)
    report = apply_topics(kafka, specs, timeout=args.timeout or DEFAULT_TIMEOUT_S)
    print(f"{len(specs)} topics: {len(report.created)} created, {len(report.differences)} differing settings")
    return 0 if report.in_sync else DIFFERENCES_EXIT_CODE


def run_show(args: argparse.Namespace) -> int:
    """Print the App's topic specs, one topic per line."""
    for spec in _specs(load_app(args.app), args):
        configs = " ".join(f"{key}={value}" for key, value in sorted(spec.config.items()))
        print(f"{spec.name} partitions={spec.partitions} replication={spec.replication_factor} {configs}")
    return 0
