"""The tests' one way to a Kafka connection: every raw client a test builds goes through it.

``kafka(bootstrap)`` is the ``KafkaConnection`` tidings itself would use for that address
(the environment's ``TIDINGS_KAFKA_*`` properties and its ``TIDINGS_KAFKA_CONFIG`` file
included), so a test's own consumers, producers and admin clients reach a secured broker
the way the workers do: ``kafka(bootstrap).producer(**{"linger.ms": 5})``.
"""

from __future__ import annotations

from tidings.shell.runtime.connection import KafkaConnection


def kafka(bootstrap: str | KafkaConnection) -> KafkaConnection:
    """The connection for ``bootstrap`` (a connection is returned as it is)."""
    return KafkaConnection.of(bootstrap)
