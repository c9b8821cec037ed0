"""``tidings worker MODULE:APP``: run every definition of an App as Faust agents."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..shell.runtime.stopping import DEFAULT_STOP_GRACE_S, STOP_GRACE_ENV, parse_stop_grace
from .kafka import add_kafka_arguments, connection
from .loading import load_app
from .worker_processes import MAX_PROCESSES, plan, supervise

_DESCRIPTION = """\
Run a worker for the App at MODULE:ATTRIBUTE (e.g. examples.bank.app:app or
examples.shop.app:app): it applies the app's topics, joins the app's consumer group and
runs one agent per definition (aggregate, projection, workflow, ...). Start more
workers with the same app to split the partitions; each needs its own --data-dir.
State (RocksDB) lives under --data-dir; deleting it is safe: it is rebuilt from Kafka.
--processes N runs N such workers as children of this process, one per core
(docs/operations.md, "Several processes per machine"): instance ids ID-0..ID-(N-1),
data dirs DATA_DIR/process-0.., metrics ports PORT..PORT+N-1; if one ends, the others
are stopped and this process exits with its status (70) so the set restarts whole.
Stop it with Ctrl-C or SIGTERM: it exits within --stop-grace seconds, abandoning the
activity attempts still running near its end (they run again after the restart).

With Kafka away (not started yet, restarting) it waits instead of exiting: one warning,
then one every 30 s, and it starts or resumes once a broker answers. It exits 70 when
Kafka refuses it (a fatal client error) or when it is deaf (--stall-timeout).
docs/operations.md, "When Kafka is away".
"""


def register(subparsers: Any) -> None:
    """Add the ``worker`` command."""
    parser = subparsers.add_parser(
        "worker",
        help="run an App's agents (aggregates, workflows, ...) in this process",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.bank.app:app")
    add_kafka_arguments(parser)
    parser.add_argument(
        "--data-dir", type=Path, help="RocksDB state directory (default $TIDINGS_DATA_DIR/APP)"
    )
    parser.add_argument(
        "--instance-id",
        help="a stable, unique id for this worker (default $TIDINGS_INSTANCE_ID): a restarted "
        "worker with the same id gets its partitions back at once",
    )
    parser.add_argument(
        "--processing-guarantee",
        choices=("at_least_once", "exactly_once"),
        help="override the App's processing_guarantee (default $TIDINGS_PROCESSING_GUARANTEE, "
        "else the App's): exactly_once writes in Kafka transactions (docs/exactly-once.md)",
    )
    parser.add_argument(
        "--processes",
        type=_processes,
        # A string default goes through type= too, so a bad $TIDINGS_WORKER_PROCESSES is a usage error.
        default=os.environ.get("TIDINGS_WORKER_PROCESSES") or "1",
        metavar="N",
        help="run N worker processes of the app here, each its own group member with its own "
        "instance id and data dir (default $TIDINGS_WORKER_PROCESSES, else 1; 1..64)",
    )
    parser.add_argument("--loglevel", default="INFO", help="log level (default INFO)")
    parser.add_argument(
        "--metrics-port",
        type=_port,
        # A string default goes through type= too, so a bad $TIDINGS_METRICS_PORT is a usage error.
        default=os.environ.get("TIDINGS_METRICS_PORT") or None,
        metavar="PORT",
        help="serve Prometheus metrics at http://0.0.0.0:PORT/metrics, and the /livez and "
        "/readyz probes beside them (default $TIDINGS_METRICS_PORT; none when unset). "
        "docs/operations.md, \"Metrics\" and \"Health\"",
    )
    parser.add_argument(
        "--stall-timeout",
        type=_seconds,
        # A string default goes through type= too, so a bad $TIDINGS_STALL_TIMEOUT is a usage error.
        default=os.environ.get("TIDINGS_STALL_TIMEOUT") or None,
        metavar="SECONDS",
        help="exit 70 when the intake makes no progress for this long with records waiting "
        "while the brokers answer (default $TIDINGS_STALL_TIMEOUT, else 120; 0 never exits). "
        "docs/operations.md, \"Liveness\"",
    )
    parser.add_argument(
        "--stop-grace",
        type=_stop_grace,
        # A string default goes through type= too, so a bad $TIDINGS_STOP_GRACE is a usage error.
        default=os.environ.get(STOP_GRACE_ENV) or None,
        metavar="SECONDS",
        help="on SIGTERM, exit within this many seconds; activity attempts still running near "
        "the end are abandoned and run again after the restart (default $TIDINGS_STOP_GRACE, "
        "else 25; 1..3600). docs/operations.md, \"Stopping\"",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    if args.processes > 1:
        try:
            children = plan(args.processes, instance_id=args.instance_id,
                            data_dir=args.data_dir or app.data_dir(), metrics_port=args.metrics_port)
        except ValueError as exc:
            print(f"tidings worker: error: {exc}", file=sys.stderr)
            return 2  # a usage error, as argparse's own
        return supervise(args.argv, children, stop_grace_s=args.stop_grace or DEFAULT_STOP_GRACE_S)
    worker = app.worker(
        bootstrap=connection(args, app), data_dir=args.data_dir, instance_id=args.instance_id,
        metrics_port=args.metrics_port, stall_timeout_s=args.stall_timeout,
        processing_guarantee=args.processing_guarantee, stop_grace_s=args.stop_grace,
    )
    worker.run(loglevel=args.loglevel)
    return 0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (1..65535)")
    return port


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (seconds == 0 or 1 <= seconds <= 86_400):  # NaN and inf fail both
        raise argparse.ArgumentTypeError(f"not a stall timeout: {text!r} (0, or 1..86400 seconds)")
    return seconds


def _stop_grace(text: str) -> float:
    try:
        return parse_stop_grace(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _processes(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r}") from None
    if not 1 <= count <= MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"not a number of processes: {text!r} (1..{MAX_PROCESSES})")
    return count
