"""Whether the worker is ready: a member of its group, and every assigned partition recovered.

``/readyz`` (``health.py``) reads it; the worker writes it. *Recovered* means what an
agent's ``assign`` does before it returns (``hosting.Agent``): a workflow's or saga's
catch-up of its journal and replay of its running instances, a schedule dispatcher's
catch-up. The worker tells ``Readiness`` of each ``assign`` it starts and of its end, so no
kind reports anything itself and nothing here knows a kind: a definition is only the label
the worker gives it (``"workflow enrich"``). Aggregates and orchestrations catch a partition
up at its first record instead (they have nothing to resume by themselves): their
``assign`` returns at once, and a partition nobody writes to costs no read.

Readiness is not zero lag: a worker far behind on its inputs but recovered is ready (its
lag is ``tidings_consumer_lag``); readiness gates rolling updates, which must wait for a
new worker's catch-up, not for the traffic to pause.

Thread-safe: the event loop writes, the HTTP server's threads read.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

#: A (topic, partition) pair, as the intake reports assignments.
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Verdict:
    """What a probe answers.

    Attributes:
        ok: 200 when true, 503 otherwise.
        reason: One line a person reads (``"ready"``, ``"recovering 3 partitions: ..."``).
        details: Numbers and names for machines (the JSON answer).
    """

    ok: bool
    reason: str
    details: dict[str, object]


class Readiness:
    """The worker's group membership and the recoveries its assignments started.

    Args:
        group: The consumer group, for reasons.
        clock: Monotonic seconds (how long a recovery has been running).
    """

    def __init__(self, group: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._group = group
        self._clock = clock
        self._lock = threading.Lock()
        self._phase = "starting"  # what the worker does before it is a member
        self._member = False
        self._stopping = False
        self._assigned: set[TopicPartition] = set()
        self._ids = itertools.count()
        # id -> (definition, monotonic start) of each recovery under way
        self._recovering: dict[int, tuple[str, float]] = {}

    # -- what the worker says ----------------------------------------------------------

    def phase(self, what: str) -> None:
        """Say what the worker does before it joins its group (``"waiting for Kafka"``)."""
        with self._lock:
            self._phase = what

    def assigned(self, partitions: Collection[TopicPartition]) -> None:
        """The group assigned ``partitions`` (added to what it holds): the worker is a member."""
        with self._lock:
            self._member = True
            self._assigned.update(partitions)

    def revoked(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` went to another worker (revoked, or lost)."""
        with self._lock:
            self._assigned.difference_update(partitions)

    def lost(self) -> None:
        """The worker was out of its group (its session expired): not a member until the
        next assignment."""
        with self._lock:
            self._member = False
            self._phase = f"rejoining group {self._group}"

    def recovering(self, definition: str) -> Callable[[], None]:
        """``definition``'s recovery of the latest assignment started (each agent is handed
        the whole assignment and recovers its own topics' share); call the result when it
        ended (whether it succeeded or not: a failed one stops the worker)."""
        with self._lock:
            key = next(self._ids)
            self._recovering[key] = (definition, self._clock())

        def done() -> None:
            with self._lock:
                self._recovering.pop(key, None)

        return done

    def stopping(self) -> None:
        """The worker is stopping: never ready again."""
        with self._lock:
            self._stopping = True

    # -- what /readyz answers ----------------------------------------------------------

    def verdict(self) -> Verdict:
        """Ready, or why not."""
        now = self._clock()
        with self._lock:
            details: dict[str, object] = {
                "group": self._group, "member": self._member, "assigned": len(self._assigned),
            }
            if self._stopping:
                return Verdict(False, "stopping", details)
            if not self._member:
                return Verdict(False, f"not a member of group {self._group} yet: {self._phase}", details)
            recovering = sorted(self._recovering.values(), key=lambda item: item[1])
        if not recovering:
            return Verdict(True, f"ready: {len(self._assigned)} partitions assigned, all recovered", details)
        since: dict[str, float] = {}  # each definition's oldest recovery under way
        for definition, began in recovering:
            since.setdefault(definition, began)
        details["recovering"] = {definition: round(now - began, 3) for definition, began in since.items()}
        parts = [f"{definition} (for {now - began:.0f} s)" for definition, began in since.items()]
        return Verdict(False, "recovering assigned partitions: " + ", ".join(parts), details)
