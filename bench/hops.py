"""Where an idle one-activity run's time goes, hop by hop (issue 20: "the tail first").

Each record a run leaves carries the time its producer handed it over (Kafka's CreateTime,
set by librdkafka at ``produce()``): the client's start on the inbox, the worker's journal
records (``Started``, the step's result, ``Ended``) and its outcome. With the client's own
clock around ``start`` and ``value`` (one machine: one clock), a run's latency splits into

1. **client → inbox**: ``start()`` called → the inbox record produced (the client's send path);
2. **inbox → Started**: the inbox record produced → ``Started`` produced (the broker's append
   and fetch to the worker, the intake's batch, the decide);
3. **Started → StepStarted**: the activity step decided (its start journaled before it runs);
4. **StepStarted → StepCompleted**: the activity run in its thread, its result back on the
   loop and decided (includes the wait for the journal's acknowledgement, if any);
5. **StepCompleted → Ended**; 6. **Ended → outcome**: the decide that ends the run and writes its outcome;
7. **outcome → client**: the outcome produced → ``value()`` returned (the broker's append,
   the client's outcome watcher's fetch, its hand-off to the caller's loop).

``split`` gives each run's hops; ``summary`` the p50 / p99 of each hop over all runs and, for
the slowest 1 % of runs, the mean of each hop: which hop the tail lives in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tidings.codec import avro
from tidings.core.workflow.journal import Ended, Started, StepCompleted, StepStarted
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.testing.topics import read_topic

from .report import percentile

HOPS = ("client → inbox", "inbox → Started", "Started → StepStarted", "StepStarted → StepCompleted",
        "StepCompleted → Ended", "Ended → outcome", "outcome → client")
_JOURNALED = (Started, StepStarted, StepCompleted, Ended)


@dataclass(frozen=True, slots=True)
class Run:
    """One run's instants, seconds since the epoch (None: its record was not found)."""

    instance_id: str
    called: float
    returned: float
    instants: tuple[float | None, ...] = ()  # inbox, Started, StepStarted, StepCompleted, Ended, outcome

    def hops(self) -> list[float] | None:
        marks = (self.called, *self.instants, self.returned)
        if len(marks) != len(HOPS) + 1 or any(m is None for m in marks):
            return None
        return [b - a for a, b in zip(marks, marks[1:], strict=False)]  # type: ignore[operator]


def _records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes, float]]:
    """(key, value, CreateTime in seconds) of every record of ``topic``, in offset order per partition."""
    return [(r.key or b"", r.value or b"", (r.timestamp_ms or 0) / 1000) for r in read_topic(bootstrap, topic)]


def split(bootstrap: str, app_id: str, workflow: str,
          calls: dict[str, tuple[float, float]]) -> list[Run]:
    """Each run of ``calls`` (instance id → (start called, value returned)) with its instants."""
    def topic(role: str) -> str:
        return f"{app_id}.workflow.{workflow}.{role}"

    inbox: dict[str, float] = {}
    for key, _, at in _records(bootstrap, topic("inbox")):
        inbox.setdefault(key.decode(errors="replace"), at)  # the start; later records are other kinds
    journal: dict[str, dict[type, float]] = {}
    for _, value, at in _records(bootstrap, topic("journal")):
        entry = avro.decode_as(value, WorkflowJournalEntry)  # type: ignore[type-var]
        if isinstance(entry.record, _JOURNALED):
            journal.setdefault(entry.instance_id, {}).setdefault(type(entry.record), at)
    outcomes = {key.decode(errors="replace"): at for key, _, at in _records(bootstrap, topic("outcomes"))}
    runs = []
    for instance_id, (called, returned) in calls.items():
        kinds = journal.get(instance_id, {})
        runs.append(Run(instance_id, called, returned,
                        (inbox.get(instance_id), *(kinds.get(kind) for kind in _JOURNALED), outcomes.get(instance_id))))
    return runs


def summary(runs: Sequence[Run]) -> list[str]:
    """One line per hop: p50 / p99 over all runs, and its mean over the slowest 1 % (at least 2)."""
    split_runs = [(r.returned - r.called, h) for r in runs if (h := r.hops()) is not None]
    if not split_runs:
        missing = [sum(1 for r in runs if len(r.instants) <= i or r.instants[i] is None)
                   for i in range(len(HOPS) - 1)]
        return [f"hops: no run could be split ({len(runs)} runs; runs missing the inbox, Started, StepStarted, "
                f"StepCompleted, Ended, outcome record: {missing})"]
    slowest = sorted(split_runs, key=lambda pair: pair[0])[-max(2, len(split_runs) // 100):]
    lines = [f"one-activity idle latency by hop ({len(split_runs)} runs; CreateTime of each record, one "
             f"clock): hop: p50 / p99 over all runs; mean over the slowest {len(slowest)} runs "
             f"(total {sum(t for t, _ in slowest) / len(slowest) * 1e3:.1f} ms)"]
    for i, name in enumerate(HOPS):
        values = [h[i] for _, h in split_runs]
        tail = sum(h[i] for _, h in slowest) / len(slowest)
        lines.append(f"  {name}: {percentile(values, 0.5) * 1e3:.2f} / {percentile(values, 0.99) * 1e3:.2f} ms; "
                     f"slowest: {tail * 1e3:.2f} ms")
    return lines
