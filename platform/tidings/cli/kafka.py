"""``--bootstrap`` and ``--kafka-config``: how every command that talks to Kafka finds it.

One helper for every command, so each reads the cluster the same way (docs/kafka.md): the
flags win over ``App(bootstrap=..., kafka=...)``, which wins over the environment
(``TIDINGS_BOOTSTRAP``, ``TIDINGS_KAFKA_<PROPERTY>``), which wins over the properties file
(``--kafka-config FILE``, else ``$TIDINGS_KAFKA_CONFIG``).

Every such command also makes sure a broker answers first, fast. A command against an
unreachable cluster used to wait out librdkafka's own timeouts (31 s for ``send --timeout
5``, 301 s for ``start``) and print hundreds of ``FAIL`` lines. It now asks one bounded
question first (``probe_kafka``, :func:`reach_kafka`); when no broker answers within the
command's ``--timeout`` or :data:`CONNECT_TIMEOUT_S`, whichever is shorter, ``main`` prints
one line naming the servers and exits :data:`UNREACHABLE_EXIT_CODE`. A broker that answers
no metadata request in 10 s is away for any practical purpose; a longer ``--timeout`` is for
the command's own answer (a worker busy catching up), not for that.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.reachability import probe_kafka

#: Exit status when no broker answered in time (sysexits.h EX_UNAVAILABLE).
UNREACHABLE_EXIT_CODE = 69
#: Seconds a command waits at most for a broker to answer (less with a shorter --timeout).
CONNECT_TIMEOUT_S = 10.0
#: What the one line tells the user to check.
HINT = "is the broker running, and are --bootstrap / --kafka-config right?"
#: The epilog of every command's --help that talks to Kafka.
EXIT_STATUS_EPILOG = (
    f"Exit status {UNREACHABLE_EXIT_CODE}: no Kafka broker answered within --timeout or "
    f"{CONNECT_TIMEOUT_S:g} s, whichever is shorter; one line on stderr names the bootstrap servers."
)


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--bootstrap`` and ``--kafka-config`` to a command that talks to Kafka."""
    parser.add_argument(
        "--bootstrap", metavar="HOST:PORT[,...]",
        help="Kafka bootstrap servers (default: the App's, else $TIDINGS_BOOTSTRAP, else the "
        "--kafka-config file's bootstrap.servers)",
    )
    parser.add_argument(
        "--kafka-config", type=Path, metavar="FILE",
        help="a Kafka client properties file (key=value, as Confluent Cloud and MSK hand them "
        "out: security.protocol, sasl.*, ssl.*, ...) for every Kafka client of the command "
        "(default $TIDINGS_KAFKA_CONFIG); TIDINGS_KAFKA_<PROPERTY> variables and the App's "
        "kafka= win over it. docs/kafka.md",
    )


def connection(args: argparse.Namespace, app: Any) -> KafkaConnection:
    """The connection the command's flags, ``app`` and the environment give.

    Raises:
        BrokerError: nothing gives the bootstrap servers.
        DefinitionError: the flags, the environment or the file are not a usable configuration.
    """
    connection_for = getattr(app, "connection_for", None)
    if callable(connection_for):
        found: KafkaConnection = connection_for(args.bootstrap, config_file=args.kafka_config)
        return found
    # Not a tidings App (a module that only lists topic specs): the flags and the environment.
    return KafkaConnection.resolve(bootstrap=args.bootstrap, config_file=args.kafka_config)


def reach_kafka(kafka: KafkaConnection | str, timeout_s: float | None) -> None:
    """Return once a broker of ``kafka`` answers, waiting at most ``timeout_s`` or
    :data:`CONNECT_TIMEOUT_S`, whichever is shorter (None: the latter).

    Raises:
        KafkaUnreachable: none did; ``main`` prints it in one line and exits 69.
    """
    probe_kafka(kafka, CONNECT_TIMEOUT_S if timeout_s is None else min(timeout_s, CONNECT_TIMEOUT_S))
