"""Each kind's index, read from the topics an App already has: the rows ``tidings list`` and the console show.

Each kind's index is a topic the app already has (docs/operations.md, "Listing and
describing"): a workflow's compacted status topic (latest status per instance), a saga's
journal (its last record per saga), an aggregate's events topic (its keys
``{id}/{version}``: instances and versions, no value decoded), the dead-letter topic; the
orchestration, schedule and flow readers are in ``kind_indexes.py``.
Filtering and counting the rows is pure, in ``listing.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..codec import avro
from ..core.partitioning import partition_for
from ..core.saga_records import SagaJournalEntry
from ..errors import RecordError
from ..shell.client.scan import read_topics
from ..shell.kinds.workflow.index import STATUSES, StatusIndex
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.io import Incoming
from ..shell.runtime.topics import deadletter_topic
from .deadletters import dead_letter_line
from .kind_indexes import (
    FLOW_STATUSES,
    ORCHESTRATION_STATUSES,
    SCHEDULE_STATUSES,
    flow_rows,
    orchestration_rows,
    schedule_rows,
    schedule_workflows,
)
from .listing import Row


@dataclass(frozen=True, slots=True)
class Kind:
    """How ``tidings list`` reads one kind: its declared name, statuses, and what a row is called."""

    declared: str | None  # App.declared(kind); None: not declared per name (dead letters, schedules)
    statuses: tuple[str, ...] | None  # None: --status does not apply
    noun: str
    times: bool = False  # whether its rows know when each started and ended (--started-*, --ended-*)


#: A saga's status, from its journal's last record: ended by a fault, ended, or not.
SAGA_STATUSES: Final = ("RUNNING", "ENDED", "FAULTED")

KINDS: Final = {
    "workflow": Kind("workflow", STATUSES, "instance", times=True),
    "saga": Kind("saga", SAGA_STATUSES, "saga", times=True),
    "aggregate": Kind("aggregate", None, "instance"),
    "orchestration": Kind("orchestration", ORCHESTRATION_STATUSES, "instance", times=True),
    "schedule": Kind(None, SCHEDULE_STATUSES, "schedule"),
    "flow": Kind("flow", FLOW_STATUSES, "element"),
    "deadletters": Kind(None, None, "dead letter"),
}
ALIASES: Final = {"workflows": "workflow", "aggregates": "aggregate", "sagas": "saga", "deadletter": "deadletters",
                  "dead-letters": "deadletters", "orchestrations": "orchestration", "schedules": "schedule",
                  "flows": "flow"}


def declared_names(app: Any, kind_name: str, kind: Kind) -> list[str]:
    """The names NAME may be: the declared definitions of the kind, the workflows a schedule may
    start, or (dead letters) every definition."""
    if kind_name == "schedule":
        return schedule_workflows(app)
    if kind.declared is not None:
        return [handle.name for handle in app.declared(kind.declared)]
    return [handle.name for handle in app.hosted]


# -- the readers: one per kind, each returning rows and how many records it skipped per topic --

#: ``(app, kafka, names, named, timeout=)``: ``named`` says NAME was given (so ``names`` is that one).
Reader = Callable[..., tuple[list[Row], dict[str, int]]]


def workflow_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                  timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    handles = [handle for handle in app.declared("workflow") if handle.name in names]
    indexes = [StatusIndex(handle.name, app.partitions) for handle in handles]
    read_topics(kafka, {handle.topics.status: index.take for handle, index in zip(handles, indexes)},
                group_prefix=f"{app.name}.", timeout=timeout)
    rows = [Row("workflow", s.workflow, s.instance_id, s.status, s.at, s.reason or "",
                {"started_at_ms": s.started_at} if s.started_at is not None else {},
                started_at=s.started_at, ended_at=s.ended_at)
            for index in indexes for s in index.latest.values()]
    return rows, {handle.topics.status: index.skipped for handle, index in zip(handles, indexes)}


@dataclass(slots=True)
class _Versions:
    version: int = 0
    events: int = 0
    at: int | None = None


class AggregateIndex:
    """Instances and versions of one aggregate from its events topic's keys ``{id}/{version}``.

    No value is decoded: the key says which instance and version a record is, and the
    record's timestamp when it was stored. A key that is not ``{id}/{whole number}``, or
    that sits on another partition than its id's, is skipped. A tombstone (an erased
    event) counts one event less; the version stays what it was.
    """

    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.partitions = partitions
        self.instances: dict[str, _Versions] = {}
        self.skipped = 0

    def take(self, record: Incoming) -> None:
        aggregate_id, version = _numbered_key(record, self.partitions)
        if version < 0:
            self.skipped += 1
            return
        seen = self.instances.setdefault(aggregate_id, _Versions())
        if record.value is None:
            seen.events = max(seen.events - 1, 0)
            return
        seen.events += 1
        seen.version = max(seen.version, version)
        if record.timestamp_ms is not None and record.timestamp_ms >= 0:
            seen.at = max(seen.at or 0, record.timestamp_ms)

    def rows(self) -> list[Row]:
        return [Row("aggregate", self.name, aggregate_id, None, seen.at, f"version {seen.version}",
                    {"version": seen.version, "events": seen.events})
                for aggregate_id, seen in self.instances.items()]


def aggregate_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                   timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    handles = [handle for handle in app.declared("aggregate") if handle.name in names]
    indexes = [AggregateIndex(handle.name, app.partitions) for handle in handles]
    read_topics(kafka, {handle.topics.events: index.take for handle, index in zip(handles, indexes)},
                group_prefix=f"{app.name}.", timeout=timeout)
    rows = [row for index in indexes for row in index.rows()]
    return rows, {handle.topics.events: index.skipped for handle, index in zip(handles, indexes)}


def origin_name(app_name: str, topic: str | None) -> str | None:
    """The definition whose topic ``{app}.{kind}.{name}.{role}`` is ``topic``; None for any other."""
    prefix = f"{app_name}."
    if not topic or not topic.startswith(prefix):
        return None
    parts = topic[len(prefix):].split(".")
    return parts[1] if len(parts) >= 3 else None


def deadletter_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                    timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    wanted = set(names)
    rows: list[Row] = []

    def take(record: Incoming) -> None:
        line, written_ms = dead_letter_line(record)
        origin = line.get("origin", {}).get("topic")
        name = origin_name(app.name, origin)
        if named and name not in wanted:
            return
        status = line.get("error_type") or ("unreadable" if "unreadable" in line else None)
        detail = line.get("reason") or line.get("unreadable") or ""
        letter = line["letter"]
        rows.append(Row("deadletter", name or "-", f"{letter['partition']}:{letter['offset']}", status, written_ms,
                        detail, {"letter": line}))

    read_topics(kafka, {deadletter_topic(app.name): take}, group_prefix=f"{app.name}.", timeout=timeout)
    return rows, {}


class SagaIndex:
    """Where each saga stands, from its journal (keys ``{saga_id}/{seq}``): its last record.

    Only the highest seq's value is kept while reading, and decoded at the end, so a saga
    of ten records costs one decode. A second record at a seq (a zombie's) is ignored, the
    first in offset order kept, as a worker does. A key that is not ``{id}/{seq}``, on
    another partition than its id's, or whose value does not decode or names another saga,
    id or seq, is skipped.
    """

    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.partitions = partitions
        self.last: dict[str, tuple[int, bytes]] = {}
        self.first_at: dict[str, int] = {}  # the time of seq 1's record: when the saga started
        self.skipped = 0

    def take(self, record: Incoming) -> None:
        saga_id, seq = _numbered_key(record, self.partitions)
        if seq < 1:
            self.skipped += 1
            return
        if record.value is None:
            return
        if seq == 1 and record.timestamp_ms is not None and record.timestamp_ms >= 0:
            self.first_at.setdefault(saga_id, record.timestamp_ms)
        kept = self.last.get(saga_id)
        if kept is None or seq > kept[0]:
            self.last[saga_id] = (seq, record.value)

    def rows(self) -> list[Row]:
        rows = []
        for saga_id, (seq, value) in self.last.items():
            try:
                entry = avro.decode_as(value, SagaJournalEntry)
            except RecordError:
                entry = None
            if entry is None or (entry.saga, entry.saga_id, entry.seq) != (self.name, saga_id, seq):
                self.skipped += 1
                continue
            status = "FAULTED" if entry.transition == "fault" else "ENDED" if entry.ended else "RUNNING"
            state = entry.state.decode("utf-8", "replace") if entry.state is not None else None
            detail = f"{entry.transition}: {entry.reason}" if entry.reason else f"{entry.transition} {state or ''}"
            rows.append(Row("saga", self.name, saga_id, status, entry.entered_at_ms, detail.strip(),
                            {"seq": seq, "transition": entry.transition, "state": state, "reason": entry.reason},
                            started_at=self.first_at.get(saga_id),
                            ended_at=entry.entered_at_ms if entry.ended else None))
        return rows


def saga_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
              timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    handles = [handle for handle in app.declared("saga") if handle.name in names]
    indexes = [SagaIndex(handle.name, app.partitions) for handle in handles]
    read_topics(kafka, {handle.topics.journal: index.take for handle, index in zip(handles, indexes)},
                group_prefix=f"{app.name}.", timeout=timeout)
    rows = [row for index in indexes for row in index.rows()]
    return rows, {handle.topics.journal: index.skipped for handle, index in zip(handles, indexes)}


READERS: Final[dict[str, Reader]] = {
    "workflow": workflow_rows,
    "saga": saga_rows,
    "aggregate": aggregate_rows,
    "orchestration": orchestration_rows,
    "schedule": schedule_rows,
    "flow": flow_rows,
    "deadletters": deadletter_rows,
}


def _numbered_key(record: Incoming, partitions: int) -> tuple[str, int]:
    """A journal key ``{id}/{number}`` on its id's partition as (id, number); -1 when it is not one."""
    try:
        owner, slash, number = (record.key or b"").decode("utf-8").rpartition("/")
    except UnicodeDecodeError:
        return "", -1
    if not slash or not number.isdigit() or not owner or partition_for(owner, partitions) != record.partition:
        return "", -1
    return owner, int(number)

