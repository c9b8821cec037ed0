"""What every command that talks to Kafka does first: make sure a broker answers, fast.

A command against an unreachable cluster used to wait out librdkafka's own timeouts (31 s
for ``send --timeout 5``, 301 s for ``start``) and print hundreds of ``FAIL`` lines. Each
command now asks one bounded question first (``probe_kafka``); when no broker answers
within the command's ``--timeout`` or :data:`CONNECT_TIMEOUT_S`, whichever is shorter,
``main`` prints one line naming the servers and exits :data:`UNREACHABLE_EXIT_CODE`. A broker
that answers no metadata request in 10 s is away for any practical purpose; a longer
``--timeout`` is for the command's own answer (a worker busy catching up), not for that.
"""

from __future__ import annotations

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


def reach_kafka(bootstrap: str, timeout_s: float | None) -> None:
    """Return once a broker of ``bootstrap`` answers, waiting at most ``timeout_s`` or
    :data:`CONNECT_TIMEOUT_S`, whichever is shorter (None: the latter).

    Raises:
        KafkaUnreachable: none did; ``main`` prints it in one line and exits 69.
    """
    probe_kafka(bootstrap, CONNECT_TIMEOUT_S if timeout_s is None else min(timeout_s, CONNECT_TIMEOUT_S))
