"""``tidings broker start|stop|status``: a local Apache Kafka (one node, or a cluster) for development."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tidings.broker import KAFKA_VERSION, METHODS, PRINCIPALS, LocalBroker, default_state_file
from tidings.broker._cluster_state import is_cluster_state
from tidings.cli.broker_cluster import (
    refuse_single_over_cluster,
    start_cluster,
    status_cluster,
    stop_cluster,
)
from tidings.cli.main import Subparsers

_DESCRIPTION = f"""\
Run a local single-node Apache Kafka {KAFKA_VERSION} (KRaft, broker and controller in one JVM)
on 127.0.0.1, for development and tests. The first start downloads the Kafka jars from Maven
Central into $TIDINGS_HOME (default ~/.cache/tidings); it needs `java` (17+) and `mvn`.
The broker runs in the background; its PID and address are kept in a state file
(default .tidings/broker.json under the current directory), so `stop` and `status` find it.
With `start --nodes 3` it runs a three-node cluster instead (each node a JVM of its own, broker
and KRaft controller, replication 3, min.insync.replicas 2; docs/cluster-local.md); `stop` and
`status` then act on every node.
"""

_START_EPILOG = """\
`start` prints shell lines, so this points the current shell at the broker:
  eval "$(tidings broker start)"
  eval "$(tidings broker start --nodes 3)"   # a three-node cluster

--secure starts a secured node instead (use a data dir of its own): a SASL_SSL listener
(SCRAM-SHA-256, SCRAM-SHA-512, PLAIN), a mutual-TLS listener, certificates made at start,
users admin (a super user), worker, client and client2 with random passwords, and Kafka's
StandardAuthorizer (nothing is allowed that no ACL grants). It writes a client properties
file per user and method, DATA_DIR/clients/USER-METHOD.properties (METHOD: scram, i.e.
SCRAM-SHA-512, scram-sha-256, plain, mtls; librdkafka keys, kcat -F reads them too), and
prints the admin's as TIDINGS_BOOTSTRAP and TIDINGS_KAFKA_CONFIG:
  eval "$(tidings broker start --secure --data-dir .tidings/secure)"
"""


def register(subparsers: Subparsers) -> None:
    """Add ``broker`` and its ``start``, ``stop`` and ``status`` subcommands.

    Args:
        subparsers: The top-level ``add_subparsers()`` object.
    """
    parser = subparsers.add_parser(
        "broker",
        help="start, stop or inspect a local Apache Kafka broker",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    start = actions.add_parser(
        "start",
        help="provision (first time) and start the broker, print its address",
        description="Start the local broker in the background and wait until it answers. "
        "Does nothing if the broker recorded in the state file is already running.",
        epilog=_START_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_state_file(start)
    start.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the broker keeps config, logs and data (default: .tidings/broker)",
    )
    start.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
    start.add_argument("--heap", default=None,
                       help="JVM maximum heap, -Xmx (default: 1g; 640m per node with --nodes)")
    start.add_argument(
        "--secure",
        action="store_true",
        help="a secured node: SASL_SSL and mutual TLS, SCRAM users, ACLs (see below)",
    )
    start.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for the broker (default 120)"
    )
    start.add_argument(
        "--nodes", type=int, default=1,
        help="1: one broker (default); 3 or more: a local cluster, one JVM per node "
        "(data in .tidings/cluster by default)",
    )
    start.set_defaults(run=_start)

    stop = actions.add_parser(
        "stop",
        help="stop the broker by its PID",
        description="Stop the broker recorded in the state file: SIGTERM, then SIGKILL "
        "after --timeout seconds (every node of a cluster, all at once). Its data directory "
        "is kept.",
    )
    _add_state_file(stop)
    stop.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before SIGKILL (default 30)"
    )
    stop.set_defaults(run=_stop)

    status = actions.add_parser(
        "status",
        help="say whether the broker runs, and its address",
        description="Say whether the broker recorded in the state file is running, and where "
        "(a secured one: the client settings files to use too). "
        "Exits 0 when it runs, 3 when it does not (for a cluster: 0 when every node runs; "
        "one line per node).",
    )
    _add_state_file(status)
    status.set_defaults(run=_status)


def _add_state_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-file",
        type=Path,
        default=None,
        help="the broker's state file (default: .tidings/broker.json)",
    )


def _broker(args: argparse.Namespace) -> LocalBroker:
    state_file = args.state_file or default_state_file()
    data_dir = getattr(args, "data_dir", None) or state_file.parent / "broker"
    return LocalBroker(
        data_dir,
        state_file=state_file,
        port=getattr(args, "port", 0),
        heap=getattr(args, "heap", None) or "1g",
        startup_timeout=getattr(args, "timeout", 120.0),
        on_progress=lambda line: print(line, file=sys.stderr, flush=True),
        secure=getattr(args, "secure", False),
    )


def _start(args: argparse.Namespace) -> int:
    state_file = args.state_file or default_state_file()
    if args.nodes != 1 and args.secure:
        print("tidings broker start: --secure starts one node; a secured cluster is not offered "
              "(start --nodes 3 without --secure, or --secure alone)", file=sys.stderr)
        return 2
    if args.nodes != 1:
        return start_cluster(args, state_file)
    refuse_single_over_cluster(state_file)
    broker = _broker(args)
    before = broker.status()
    bootstrap = broker.start()
    status = broker.status()
    verb = "was already running" if before.running else "is running"
    # Shell syntax on stdout (a comment, then an export) so `eval "$(...)"` works.
    print(
        f"# Apache Kafka {KAFKA_VERSION} {verb} at {bootstrap} (pid {status.pid}, "
        f"data in {status.data_dir}); stop it with `tidings broker stop`."
    )
    if status.secure:
        print("\n".join(_secure_lines(broker)))
    else:
        print(f"export TIDINGS_BOOTSTRAP={bootstrap}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    if is_cluster_state(args.state_file or default_state_file()):
        return stop_cluster(args.state_file or default_state_file(), args.timeout)
    broker = _broker(args)
    status = broker.status()
    if broker.stop(timeout=args.timeout):
        print(f"Stopped the broker at {status.bootstrap} (pid {status.pid}).")
    else:
        print("No broker was running.")
    return 0


def _status(args: argparse.Namespace) -> int:
    if is_cluster_state(args.state_file or default_state_file()):
        return status_cluster(args.state_file or default_state_file())
    broker = _broker(args)
    status = broker.status()
    if status.running:
        print(f"running at {status.bootstrap} (pid {status.pid}, data in {status.data_dir})")
        if status.secure and status.data_dir is not None:
            secured = LocalBroker(Path(status.data_dir), secure=True)
            print("\n".join(_secure_lines(secured)))
        else:
            print(f"export TIDINGS_BOOTSTRAP={status.bootstrap}")
        return 0
    if status.pid is not None:
        print(f"not running (pid {status.pid}, recorded at {status.bootstrap}, has exited)")
    else:
        print("not running")
    return 3


def _secure_lines(broker: LocalBroker) -> list[str]:
    """A secured node's listeners and client files as shell comments, then the admin's export."""
    admin = broker.client_settings("admin", "scram")
    mtls = broker.client_settings("worker", "mtls")
    plain = broker.client_settings("client", "plain")
    return [
        f"# Secured: SASL_SSL at {admin.bootstrap} (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN), "
        f"mutual TLS at {mtls.bootstrap}; StandardAuthorizer, super users User:admin and "
        "User:broker, nobody else allowed anything until an ACL says so.",
        f"# Client settings (0600) for users {', '.join(PRINCIPALS)} and methods "
        f"{', '.join(METHODS)}: {admin.properties.parent}/USER-METHOD.properties, e.g.",
        f"#   the worker over mutual TLS: {mtls.export_line()}",
        f"#   a client over SASL/PLAIN:   {plain.export_line()}",
        "# (scram is SCRAM-SHA-512; kcat -F reads these files, but over SCRAM only with",
        "# librdkafka 2.6.1 or later: older ones fail Kafka 4's SCRAM check.) The admin:",
        admin.export_line(),
    ]
