"""``--bootstrap`` and ``--kafka-config``: how every command that talks to Kafka finds it.

One helper for every command, so each reads the cluster the same way (docs/kafka.md): the
flags win over ``App(bootstrap=..., kafka=...)``, which wins over the environment
(``TIDINGS_BOOTSTRAP``, ``TIDINGS_KAFKA_<PROPERTY>``), which wins over the properties file
(``--kafka-config FILE``, else ``$TIDINGS_KAFKA_CONFIG``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..shell.runtime.connection import KafkaConnection


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
