"""librdkafka's log, through Python logging, with a repeated connection error said once.

Left alone, librdkafka prints every failed connection attempt on stderr (``%3|...|FAIL|``),
one every 50 ms to 10 s per client per broker: a worker whose broker is away wrote 7,500 lines
in 2.5 minutes. Every Kafka client tidings builds gets :func:`hooks` in its configuration, so:

- its log goes to the Python logger ``tidings.kafka`` (librdkafka's ``logger`` property; it
  is served on the client's ``poll``, in the thread that polls);
- a connection error (``FAIL``, ``REQTMOUT``, ``_TRANSPORT``, ``_ALL_BROKERS_DOWN``, a failed
  name lookup, TLS or SASL handshake) is one warning per broker per :data:`REPORT_EVERY_S`,
  whichever of the process's clients meets it, with how many attempts failed meanwhile;
- once a broker reported unreachable answers again (a client's statistics show it ``UP``),
  one line says so.

The throttle (:class:`ConnectionThrottle`) is pure: a broker and a clock reading in, what to
say out. It is one per process on purpose: the process has one log, and one outage is one
line whichever client meets it first.

``KafkaConnection.config`` (``connection.py``) merges :func:`hooks` into every client's
configuration and chains a callback the call site sets too (the intake's ``error_cb`` that
ends the worker on a fatal error, its ``stats_cb`` for liveness): the hook's runs first, then
the call site's, so both run.

A broker back is seen in the statistics of the clients that ask for them (the worker's
intake, every ``statistics.interval.ms``): the hooks ask none of their own, since a client's
settings would be overridden by them (the intake's 5 s interval drives liveness).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("tidings.kafka")

#: Seconds between two reports of one broker still unreachable.
REPORT_EVERY_S = 30.0

# librdkafka log facilities that mean "could not talk to this broker" (at warning or above:
# with `debug` set, the same facilities also log routine steps).
_CONNECTION_FACILITIES = frozenset({"FAIL", "REQTMOUT"})
# KafkaError codes of the same (confluent_kafka.KafkaError._TRANSPORT and friends), by name
# so this module reads without a client: _TRANSPORT, _ALL_BROKERS_DOWN, _TIMED_OUT,
# _RESOLVE, _SSL, _AUTHENTICATION.
_CONNECTION_ERRORS = frozenset({-195, -187, -185, -193, -181, -169})
_ALL_BROKERS_DOWN = -187
# _FATAL: librdkafka's fatal error, which confluent-kafka may deliver without its flag.
_FATAL = -150
# The first host:port a line names: "[thrd:127.0.0.1:9092/1]: ...", "sasl_ssl://b-1.example.com:9096/2:
# ...", "GroupCoordinator: 127.0.0.1:9092: ..." (not "ipv4#127.0.0.1:9092", the same address resolved).
_BROKER = re.compile(r"(?<![\w.\-#])(?P<address>[A-Za-z0-9][A-Za-z0-9.\-]*:\d{1,5})(?=[/:\s\]]|$)")
_ANY_BROKER = "(all brokers)"  # a connection error that names no broker


@dataclass
class _Down:
    since: float  # first failure of this outage
    reported: float  # when it was last reported
    failures: int = 0  # failed attempts since that report


@dataclass(frozen=True)
class Report:
    """What to say about a broker: ``first`` of an outage, else a reminder.

    Attributes:
        broker: ``host:port``.
        first: The first report of this outage.
        down_for: Seconds since the outage's first failure.
        failures: Failed attempts since the previous report (1 for the first).
    """

    broker: str
    first: bool
    down_for: float
    failures: int


@dataclass
class ConnectionThrottle:
    """Decides when a repeated connection error is worth a line. Pure: the caller passes the
    clock reading and serialises calls.

    Args:
        every_s: Seconds between two reports of one broker still down.
    """

    every_s: float = REPORT_EVERY_S
    _down: dict[str, _Down] = field(default_factory=dict)

    def failed(self, broker: str, now: float) -> Report | None:
        """Note one failed attempt to reach ``broker``; return a report when one is due."""
        down = self._down.get(broker)
        if down is None:
            self._down[broker] = _Down(since=now, reported=now)
            return Report(broker, first=True, down_for=0.0, failures=1)
        down.failures += 1
        if now - down.reported < self.every_s:
            return None
        report = Report(broker, first=False, down_for=now - down.since, failures=down.failures)
        down.reported, down.failures = now, 0
        return report

    def answered(self, broker: str, now: float) -> float | None:
        """Note that ``broker`` answers; return how long it was down if it was reported down."""
        down = self._down.pop(broker, None)
        return None if down is None else now - down.since

    def down(self) -> list[str]:
        """The brokers reported down and not seen answering since."""
        return sorted(self._down)


class _ProcessLog:
    """The process's throttle behind a lock: librdkafka serves logs and callbacks in
    whichever thread polls each client."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.throttle = ConnectionThrottle()
        self._others = ConnectionThrottle()  # by error code name

    def failed(self, broker: str, detail: str) -> None:
        with self._lock:
            if broker == _ANY_BROKER and self.throttle.down():
                # A line naming no broker ("GroupCoordinator: Timed out ...") during an outage
                # already reported by broker: the same outage.
                return
            report = self.throttle.failed(broker, self._clock())
        if report is None:
            return
        who = "the Kafka brokers are" if broker == _ANY_BROKER else f"Kafka broker {broker} is"
        if report.first:
            log.warning("%s unreachable (%s); retrying, reported again every %.0f s while it lasts",
                        who, detail, self.throttle.every_s)
        else:
            log.warning("%s still unreachable after %.0f s (%d failed attempts since the last "
                        "report; %s); retrying", who, report.down_for, report.failures, detail)

    def other(self, error: str, text: str) -> None:
        """A non-fatal librdkafka error that is no connection error (a coordinator moving,
        metadata not refreshed yet): librdkafka retries by itself; one line per code per
        30 s says it."""
        with self._lock:
            report = self._others.failed(error, self._clock())
        if report is not None:
            suppressed = f"; {report.failures - 1} more since the last report" if not report.first else ""
            log.warning("Kafka: %s (librdkafka retries it%s)", text, suppressed)

    def answered(self, broker: str) -> None:
        with self._lock:
            down_for = self.throttle.answered(broker, self._clock())
        if down_for is not None:
            who = "the Kafka brokers answer" if broker == _ANY_BROKER else f"Kafka broker {broker} answers"
            log.warning("%s again (unreachable for %.0f s)", who, down_for)

    def any_down(self) -> bool:
        with self._lock:
            return bool(self.throttle.down())


_PROCESS = _ProcessLog()


def unreachable(broker: str, detail: str) -> None:
    """Note a failed attempt to reach ``broker`` (``host:port``) the way librdkafka's are:
    the first of an outage is a warning, then one every 30 s."""
    _PROCESS.failed(broker, detail)


def answered(broker: str) -> None:
    """Note that ``broker`` answers: one line if it was reported unreachable."""
    _PROCESS.answered(broker)


def broker_of(text: str) -> str | None:
    """The ``host:port`` a librdkafka message is about, or None when it names none."""
    match = _BROKER.search(text)
    return match.group("address") if match else None


def reason_of(text: str) -> str:
    """A librdkafka message without its ``[thrd:...]`` and broker prefixes."""
    text = re.sub(r"^\[thrd:[^\]]*\]:\s*", "", text)
    text = re.sub(r"^(?:GroupCoordinator:\s*)?(?:[a-z_]+://)?[^\s/]+:\d+(?:/\w+)?:\s*", "", text)
    # "(after 0ms in state CONNECT, 582 identical error(s) suppressed)": the throttle counts.
    return re.sub(r"\s*\(after \d+ms in state \w+[^)]*\)\s*$", "", text).strip()


class LibrdkafkaLogger:
    """What librdkafka's ``logger`` property is given: confluent-kafka calls
    ``log(level, "%s [%s] %s", facility, client name, message)`` for each log line, the
    level already a Python logging level."""

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        facility, client, text = (str(a) for a in args) if len(args) == 3 else ("", "", msg % args)
        broker = broker_of(text)
        if facility in _CONNECTION_FACILITIES:
            if level >= logging.WARNING:
                _PROCESS.failed(broker or _ANY_BROKER, reason_of(text))
            else:  # a connection closed once (an idle one the broker reaped): routine
                log.debug("%s [%s] %s", facility, client, text)
            return
        log.log(level, "%s [%s] %s", facility, client, text)


def error_hook(error: Any) -> None:
    """librdkafka's ``error_cb``: connection errors through the throttle, the rest logged.

    A fatal error is logged here only; the call site's own callback, chained after this
    one, decides what the process does about it.
    """
    code = error.code()
    text = error.str()
    if code == _ALL_BROKERS_DOWN:
        # Each broker's own line says it; this one would only repeat them.
        log.debug("%s", text)
        return
    broker = broker_of(text)
    if code in _CONNECTION_ERRORS:
        _PROCESS.failed(broker or _ANY_BROKER, reason_of(text))
        return
    if error.fatal() or code == _FATAL:
        log.error("Kafka: %s", text)
    else:
        _PROCESS.other(error.name(), text)


def stats_hook(stats: str) -> None:
    """librdkafka's ``stats_cb``: a broker reported unreachable and now ``UP`` is said back."""
    if not _PROCESS.any_down():
        return  # nothing to say: skip parsing (the usual case)
    try:
        brokers = json.loads(stats).get("brokers", {})
        up = {b.get("nodename") for b in brokers.values() if b.get("state") == "UP"}
    except (ValueError, AttributeError):
        return
    for broker in sorted(b for b in up if isinstance(b, str) and b):
        _PROCESS.answered(broker)
    if up:
        _PROCESS.answered(_ANY_BROKER)


def hooks(role: str) -> dict[str, object]:
    """librdkafka properties that route a ``role`` client's log through Python logging.

    Merged into every client's configuration last; a call site's own ``error_cb`` or
    ``stats_cb`` is chained after the hook's (``KafkaConnection.config``).

    Args:
        role: ``consumer``, ``producer`` or ``admin`` (every role gets the same hooks).
    """
    del role  # one log for every role: librdkafka names the client in each line
    return {
        "logger": LibrdkafkaLogger(),
        "error_cb": error_hook,
        "stats_cb": stats_hook,
    }
