"""Whether the worker's intake is deaf: work waiting, nothing taken, brokers answering.

A worker whose consumer stopped working (a fatal error that arrived without its flag, a
stuck rebalance, a wedged event loop) is alive but useless: nothing restarts it, the group
does not move its partitions, the lag grows silently. ``Liveness`` notices that state and
``LivenessWatch`` ends the process with status 70 when it lasts (docs/operations.md,
"Liveness"). A broker outage is *not* deafness: restarting workers during one only adds
rebalances (see the Helm chart's values), so the clock runs only while a broker answers.

- **work waiting**: librdkafka's statistics show records of an assigned partition not yet
  taken by the intake (fetched but still in its queue, or not fetched up to the partition's
  end), or the consumer is not a steady member of its group (rejoining), or the intake holds
  records that no batch has completed yet;
- **progress**: a batch completed, or a catch-up read a chunk of a journal (a long store
  rebuild is work, not deafness);
- **brokers answer**: the statistics show a connection to a broker in state ``UP``.

The detector is a small object with a clear state (``Health``: healthy, or stalled since
when); ``/livez`` (``health.py``) reads the state the watch last computed (``verdict``),
and also fails when the event loop has not run for ``LOOP_SILENCE_S`` (``beat``: a loop
wedged by blocking code takes no records either, even with none waiting).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .pipeline import stop_worker
from .readiness import Verdict

log = logging.getLogger(__name__)

#: Default seconds of deafness before the worker exits 70: well above a normal rebalance
#: (a static member rejoining, catch-up of a few partitions takes seconds).
STALL_TIMEOUT_S = 120.0
#: A stall is logged and reported once it lasted this long (a batch in flight is not one).
REPORT_AFTER_S = 15.0
#: Seconds without a beat of the event loop (one a second) before ``/livez`` fails: far
#: above the longest step the loop takes (a chunk of a catch-up, a batch decided).
LOOP_SILENCE_S = 30.0


@dataclass(frozen=True)
class Health:
    """What the detector says now.

    Attributes:
        stalled_since: Monotonic time since which work has waited with no progress while a
            broker answered, once that lasted ``report_after_s``; None when healthy.
        stalled_for: Seconds of that stall (0.0 when healthy).
        waiting: Records of assigned partitions not yet taken, as last seen (statistics).
        held: Records the intake held that no batch had completed.
        brokers_up: Whether a broker answered, as last seen.
    """

    stalled_since: float | None
    stalled_for: float
    waiting: int
    held: int
    brokers_up: bool

    @property
    def healthy(self) -> bool:
        return self.stalled_since is None


@dataclass(frozen=True)
class Statistics:
    """What one librdkafka statistics report says about the consumer (``read_statistics``)."""

    lags: list[tuple[str, int, int]]  # (topic, partition, consumer lag) of fetching partitions
    waiting: int  # records of assigned partitions not yet handed to the application
    brokers_up: bool


def read_statistics(stats: str, *, subscribed: bool = True) -> Statistics | None:
    """Read a librdkafka statistics JSON string; None when it is unreadable (best effort).

    ``subscribed``: the consumer joins its group (``subscribe``). One that only assigns
    partitions never joins, and librdkafka reports its group ``init`` for ever: that is no
    record waiting (counted as one, every idle reader looked deaf after 10 s and was renewed,
    and each renewal's first fetch put tens of milliseconds on the next answer).
    """
    try:
        report = json.loads(stats)
        lags: list[tuple[str, int, int]] = []
        waiting = 0
        for topic, described in report.get("topics", {}).items():
            for partition, numbers in described.get("partitions", {}).items():
                if int(partition) < 0:
                    continue  # librdkafka's internal UA partition
                lag = int(numbers.get("consumer_lag", -1))
                if numbers.get("fetch_state") == "active" and lag >= 0:
                    lags.append((topic, int(partition), lag))
                if numbers.get("desired"):
                    waiting += _waiting(numbers)
        # Out of the group (a session lost, a rejoin that never completes): it holds no
        # partition, so none shows records waiting, but its topics' records wait for it.
        group = report.get("cgrp")
        if subscribed and isinstance(group, dict) and group.get("join_state", "steady") != "steady":
            waiting += 1
        brokers_up = any(broker.get("state") == "UP" and int(broker.get("nodeid", -1)) >= 0
                         for broker in report.get("brokers", {}).values())
        return Statistics(lags, waiting, brokers_up)
    except (ValueError, AttributeError, TypeError):
        log.debug("unreadable consumer statistics", exc_info=True)
        return None


def _waiting(numbers: dict[str, int]) -> int:
    """Records of one assigned partition the application has not been handed.

    Fetched ones wait in librdkafka's queue (``fetchq_cnt``); the rest lie between the fetch
    position and the last stable offset (``ls_offset``: read_committed). Not from the
    committed offset: under exactly-once a transaction's commit marker takes an offset no
    record is ever delivered for, so "committed < end" would stay true on an idle partition.
    """
    queued = max(0, int(numbers.get("fetchq_cnt", 0)))
    end = int(numbers.get("ls_offset", -1))
    position = int(numbers.get("next_offset", -1))
    if position < 0:  # not fetching yet: from where it will start
        position = int(numbers.get("committed_offset", -1))
    unfetched = end - position if end >= 0 and position >= 0 else 0
    return queued + max(0, unfetched)


class Liveness:
    """Knows since when the intake has made no progress with work waiting while brokers answer.

    Thread-safe: the intake's thread notes statistics, the event loop notes progress, the
    watch thread asks for the state.

    Args:
        clock: Monotonic seconds.
        report_after_s: How long such a state must last to be a stall (not a batch in flight).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 report_after_s: float = REPORT_AFTER_S,
                 loop_silence_s: float = LOOP_SILENCE_S) -> None:
        self._clock = clock
        self._report_after_s = report_after_s
        self._loop_silence_s = loop_silence_s
        self._beat: float | None = None  # the event loop's last beat; None before it runs
        self._last: Health | None = None  # what the watch last read
        self._lock = threading.Lock()
        self._waiting = 0
        self._brokers_up = True
        self._last_progress = clock()
        self._since: float | None = None  # start of the current "waiting while brokers answer"

    def observe(self, waiting: int, brokers_up: bool) -> None:
        """Note what the consumer's latest statistics say."""
        with self._lock:
            self._waiting = waiting
            self._brokers_up = brokers_up

    def progressed(self) -> None:
        """Note that the intake made progress (a batch completed, a catch-up chunk was read)."""
        now = self._clock()
        with self._lock:
            self._last_progress = now

    def beat(self) -> None:
        """Note that the event loop runs (a task calls this every second)."""
        now = self._clock()
        with self._lock:
            self._beat = now

    def health(self, held: int = 0) -> Health:
        """Return the state now; ``held``: records the intake holds that no batch completed."""
        health = self._health(held)
        with self._lock:
            self._last = health
        return health

    def verdict(self) -> Verdict:
        """What ``/livez`` answers: alive unless deaf (as the watch last saw) or the event
        loop is silent. A broker outage alone never fails it: restarting workers then only
        adds rebalances."""
        now = self._clock()
        with self._lock:
            last, beat = self._last, self._beat
        details: dict[str, object] = {}
        if last is not None:
            details.update(stalled_s=round(last.stalled_for, 3), waiting=last.waiting,
                           held=last.held, brokers_up=last.brokers_up)
        if beat is not None:
            silent = now - beat
            details["loop_silent_s"] = round(silent, 3)
            if silent >= self._loop_silence_s:
                return Verdict(False, f"the event loop has not run for {silent:.0f} s", details)
        if last is not None and not last.healthy:
            return Verdict(False, f"deaf: no progress for {last.stalled_for:.0f} s with "
                           f"{last.waiting} records waiting and {last.held} held while the "
                           "brokers answer", details)
        if last is None:
            return Verdict(True, "alive (starting)", details)
        return Verdict(True, "alive" if last.brokers_up else "alive (no broker answers)", details)

    def _health(self, held: int) -> Health:
        now = self._clock()
        with self._lock:
            stuck = (self._waiting > 0 or held > 0) and self._brokers_up
            if not stuck:
                self._since = None
                return Health(None, 0.0, self._waiting, held, self._brokers_up)
            if self._since is None:
                self._since = now
            since = max(self._since, self._last_progress)
            stalled_for = now - since
            if stalled_for < self._report_after_s:
                return Health(None, 0.0, self._waiting, held, self._brokers_up)
            return Health(since, stalled_for, self._waiting, held, True)


class LivenessWatch:
    """A thread that reads ``liveness`` every ``interval_s``: logs a stall, reports it, and
    ends the process with status 70 once it lasted ``timeout_s`` (None: never).

    A thread rather than a task: a wedged event loop is deafness too, and must not stop the
    watch that notices it.

    Args:
        liveness: The detector.
        held: Records the intake holds that no batch completed (read from this thread).
        report: Given the seconds of the current stall (0.0 when healthy), e.g. a gauge.
        timeout_s: Seconds of stall before the worker exits 70; None or 0 never exits.
    """

    def __init__(self, liveness: Liveness, *, held: Callable[[], int],
                 report: Callable[[float], None], timeout_s: float | None = STALL_TIMEOUT_S,
                 interval_s: float = 1.0) -> None:
        self.liveness = liveness
        self._held = held
        self._report = report
        self._timeout_s = timeout_s or None
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tidings-liveness", daemon=True)
        self._stalled = False

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.check()

    def check(self) -> Health:
        """Read the detector once: log, report, and exit 70 past the timeout."""
        health = self.liveness.health(self._held())
        self._report(health.stalled_for)
        if health.healthy:
            if self._stalled:
                log.info("the intake makes progress again")
            self._stalled = False
            return health
        if not self._stalled:
            log.warning("the intake has made no progress for %.0f s with %d records waiting and "
                        "%d held while the brokers answer; the worker exits after %s s of this",
                        health.stalled_for, health.waiting, health.held,
                        f"{self._timeout_s:.0f}" if self._timeout_s else "(never: no timeout)")
            self._stalled = True
        if self._timeout_s is not None and health.stalled_for >= self._timeout_s:
            stop_worker(f"the intake (deaf: no progress for {health.stalled_for:.0f} s with "
                        f"{health.waiting} records waiting and {health.held} held while the "
                        "brokers answer)", TimeoutError(f"stall timeout of {self._timeout_s:.0f} s reached"))
        return health
