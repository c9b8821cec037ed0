"""Whether a Kafka broker answers: one bounded request before a command talks to Kafka.

Without it, a command against an unreachable cluster waits out librdkafka's own timeouts
(``message.timeout.ms`` 300 s for a produce, the reply reader's 30 s metadata wait) before
its one clean error. One ``DescribeCluster`` request bounded by the caller's timeout answers
in milliseconds when a broker is there, and says why not when none is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import wait
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from ...errors import KafkaUnreachable
from . import kafka_log
from .connection import KafkaConnection
from .kafka_log import reason_of


class _Silent:
    """The probe's librdkafka logger: its failure is the message, its retries are not.

    It keeps the last connection failure logged: for some (a TLS listener spoken to in
    plaintext) the error callback hears only "all brokers are down", the log says more."""

    def __init__(self) -> None:
        self.failure: str | None = None

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        text = str(args[-1]) if args else msg
        # A refused connection's FAIL line comes at INFO level when it is a disconnect.
        if "FAIL" in args[:1]:
            self.failure = text


def probe_kafka(kafka: KafkaConnection | str, timeout_s: float) -> None:
    """Return once a broker of ``kafka`` answers a metadata request; else raise.

    Args:
        kafka: The connection (its TLS and SASL settings too), or bare bootstrap servers.
        timeout_s: Seconds to wait at most.

    Raises:
        KafkaUnreachable: No broker answered within ``timeout_s`` (or the cluster refused
            this client: authentication, TLS); the message says what to check.
    """
    errors: list[str] = []
    if isinstance(kafka, KafkaConnection):
        bootstrap = kafka.bootstrap
        config: dict[str, Any] = kafka.config("admin")
    else:
        bootstrap = kafka
        config = {"bootstrap.servers": kafka}
    # The probe says in one line what failed; librdkafka's retries would say it 50 times.
    logger = config["logger"] = _Silent()
    config["error_cb"] = _last_error(errors)
    config.pop("stats_cb", None)
    config.pop("statistics.interval.ms", None)
    timeout_s = max(timeout_s, 0.1)
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    try:
        future = admin.describe_cluster(request_timeout=timeout_s)
        while not future.done() and time.monotonic() < deadline:
            # Back as soon as the answer is: a poll(0.05) alone slept its whole 50 ms with no
            # callback to serve, at every worker start and CLI command.
            wait([future], timeout=0.05)
            admin.poll(0)  # serves the error callback
        if future.done() and future.exception() is None:
            return
        failure = future.exception() if future.done() else None
    finally:
        del admin  # no thread of its own; its sockets close now
    detail = errors[-1] if errors else _logged(logger.failure) if logger.failure else _describe(failure)
    raise KafkaUnreachable(bootstrap, timeout_s, detail)


def _last_error(errors: list[str]) -> Callable[[KafkaError], None]:
    def note(error: KafkaError) -> None:
        if error.code() != KafkaError._ALL_BROKERS_DOWN:
            errors.append(_without_broker(error.str()))

    return note


def _without_broker(text: str) -> str:
    # "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after
    # 0ms in state CONNECT)" -> "Connection refused"; the line names the servers already.
    head, _, reason = reason_of(text).rpartition(" failed: ")
    return (reason if head else reason_of(text)).strip()


def _logged(text: str) -> str:
    reason = _without_broker(text)
    if "state APIVERSION_QUERY" in text and "Disconnected" in reason:
        # Closed at the very first request: the listener speaks another protocol.
        reason += "; the broker closed the connection at its first request: is security.protocol right?"
    return reason


def _describe(failure: BaseException | None) -> str:
    if isinstance(failure, KafkaException) and failure.args:
        error = failure.args[0]
        if isinstance(error, KafkaError):
            return _without_broker(error.str())
    return "no answer" if failure is None else str(failure)


def wait_for_kafka(
    kafka: KafkaConnection | str,
    *,
    probe_timeout_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    probe: Callable[[KafkaConnection | str, float], None] | None = None,
    failed: Callable[[str, str], None] = kafka_log.unreachable,
    answered: Callable[[str], None] = kafka_log.answered,
) -> float:
    """Return once a broker of ``bootstrap`` answers, however long that takes.

    What a server does when Kafka is away: it says so once, again every 30 s while it
    lasts, and once when a broker answers; it never exits. The lines are the process's
    connection lines (``kafka_log``), so the worker's own clients meeting the same outage
    add none.

    Args:
        kafka: The connection, or bare bootstrap servers.
        probe_timeout_s: Seconds one attempt may take; a refused one is paced to this.
        clock: Monotonic seconds.
        sleep: Waits that many seconds.
        probe: Asks once (default :func:`probe_kafka`).
        failed: Told each server and the reason of a failed attempt.
        answered: Told each server once one answered.

    Returns:
        Seconds waited (0.0 when a broker answered the first attempt).
    """
    ask = probe or probe_kafka
    bootstrap = str(kafka)  # a connection's str is its bootstrap servers
    servers = [server.strip() for server in bootstrap.split(",") if server.strip()]
    started = clock()
    while True:
        begun = clock()
        try:
            ask(kafka, probe_timeout_s)
        except KafkaUnreachable as exc:
            for server in servers:
                failed(server, exc.detail)
            sleep(max(0.0, probe_timeout_s - (clock() - begun)))
            continue
        for server in servers:
            answered(server)
        return clock() - started
