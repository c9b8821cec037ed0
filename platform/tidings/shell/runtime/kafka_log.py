"""librdkafka's log hooks: the seam where every Kafka client's logging is configured.

``KafkaConnection.config`` (``connection.py``) calls ``hooks(role)`` for each client it
builds and merges what it returns last, after the call site's own settings: keys such as
``logger``, ``log_level`` or ``error_cb``. A callback (a key ending in ``_cb``) that the call
site sets too is chained: the hook's runs first, then the call site's.

This is a placeholder that adds nothing; the real hooks replace it.
"""

from __future__ import annotations


def hooks(role: str) -> dict[str, object]:
    """Return the log settings for one client of ``role`` ("consumer", "producer", "admin")."""
    return {}
