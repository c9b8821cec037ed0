"""The readers of ``tidings list`` (and the console) for orchestrations, schedules and a workflow flow's elements in flight.

Where each index comes from (docs/operations.md, "Listing and describing"):

- **orchestration**: its journal's keys ``{instance}/{sequence}`` (every instance that
  journaled an event, how many, the first and last record's time; no value decoded) and
  its compacted outcomes topic, keyed by instance (a finished instance and when).
- **schedule**: the schedule aggregate's journal (``{app}.aggregate.schedule.events``),
  folded per schedule as a worker's recovery folds it (``inspection/schedules.py``).
- **flow**: the elements of the flow's source topic after the app's committed offsets
  (what its workers have not acknowledged: an offset is committed only after the element's
  outcome is on the sink), each read as the worker reads it (``SourceDecoder``, ``id_of``),
  with its workflow's latest status (the status topic, only the partitions those ids are
  on) and whether its outcome is on the sink already.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..codec import avro
from ..core.limits import check_id
from ..core.orchestration_records import OrchestrationOutcome
from ..core.partitioning import partition_for
from ..core.schedule import format_due
from ..errors import LimitError, RecordError
from ..shell.client.scan import read_topics
from ..shell.kinds.flow.stage import SourceDecoder
from ..shell.kinds.workflow.index import StatusIndex
from ..shell.runtime.admin import KafkaAdmin
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.io import Incoming
from .listing import Row
from .schedule_words import rule_words
from .schedules import read_schedules, schedule_aggregate

log = logging.getLogger(__name__)

#: An orchestration instance's status: an outcome record is written once it finished.
ORCHESTRATION_STATUSES: Final = ("RUNNING", "FINISHED")
#: A schedule's status, as its aggregate holds it.
SCHEDULE_STATUSES: Final = ("ACTIVE", "PAUSED", "DELETED")
#: Where an element in flight stands: its workflow not started yet (WAITING), running or
#: parked, ended but its outcome not on the sink yet (ENDED), or written to the sink and
#: its offset not yet committed (WRITTEN).
FLOW_STATUSES: Final = ("WAITING", "RUNNING", "PARKED", "ENDED", "WRITTEN")


@dataclass(slots=True)
class _Journaled:
    events: int = 0
    last: int = 0
    first_at: int | None = None
    last_at: int | None = None


class OrchestrationIndex:
    """Instances of one orchestration: journal keys ``{instance}/{sequence}`` and outcome records.

    A journal key that is not ``{instance}/{whole number >= 1}`` on its instance's
    partition is skipped; so is an outcome that does not decode, names another
    orchestration or instance than its key, or sits on another partition.
    """

    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.partitions = partitions
        self.instances: dict[str, _Journaled] = {}
        self.finished: dict[str, OrchestrationOutcome] = {}
        self.skipped = 0

    def take_journal(self, record: Incoming) -> None:
        try:
            instance, slash, number = (record.key or b"").decode("utf-8").rpartition("/")
        except UnicodeDecodeError:
            instance, slash, number = "", "", ""
        if (not slash or not instance or not number.isdigit() or int(number) < 1
                or partition_for(instance, self.partitions) != record.partition):
            self.skipped += 1
            return
        if record.value is None:
            return
        seen = self.instances.setdefault(instance, _Journaled())
        seen.events += 1
        seen.last = max(seen.last, int(number))
        at = record.timestamp_ms
        if at is not None and at >= 0:
            seen.first_at = at if seen.first_at is None else min(seen.first_at, at)
            seen.last_at = at if seen.last_at is None else max(seen.last_at, at)

    def take_outcome(self, record: Incoming) -> None:
        try:
            instance = (record.key or b"").decode("utf-8")
        except UnicodeDecodeError:
            instance = ""
        if not instance or partition_for(instance, self.partitions) != record.partition:
            self.skipped += 1
            return
        if record.value is None:
            self.finished.pop(instance, None)
            return
        try:
            outcome = avro.decode_as(record.value, OrchestrationOutcome)
        except RecordError:
            self.skipped += 1
            return
        if (outcome.orchestration, outcome.instance) != (self.name, instance):
            self.skipped += 1
            return
        self.finished[instance] = outcome

    def rows(self) -> list[Row]:
        rows = []
        for instance in self.instances.keys() | self.finished.keys():
            seen = self.instances.get(instance, _Journaled())
            outcome = self.finished.get(instance)
            extra: dict[str, Any] = {"events": seen.events, "position": seen.last}
            if outcome is None:
                rows.append(Row("orchestration", self.name, instance, "RUNNING", seen.last_at,
                                _events(seen.events), extra, started_at=seen.first_at))
                continue
            value = "" if outcome.type is None else f", {outcome.type}"
            extra["outcome_type"] = outcome.type
            rows.append(Row("orchestration", self.name, instance, "FINISHED", outcome.timestamp_ms,
                            f"{_events(seen.events)}, finished at position {outcome.position}{value}", extra,
                            started_at=seen.first_at, ended_at=outcome.timestamp_ms))
        return rows


def _events(count: int) -> str:
    return f"{count} event" if count == 1 else f"{count} events"


def orchestration_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                       timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    handles = [handle for handle in app.declared("orchestration") if handle.name in names]
    indexes = [OrchestrationIndex(handle.name, app.partitions) for handle in handles]
    takers = {}
    for handle, index in zip(handles, indexes):
        takers[handle.topics.journal] = index.take_journal
        takers[handle.topics.outcomes] = index.take_outcome
    read_topics(kafka, takers, group_prefix=f"{app.name}.", timeout=timeout)
    rows = [row for index in indexes for row in index.rows()]
    return rows, {handle.topics.journal: index.skipped for handle, index in zip(handles, indexes)}


def schedule_workflows(app: Any) -> list[str]:
    """The workflows a schedule of ``app`` may start (NAME for ``list schedule``); none without schedules."""
    try:
        handle = app.schedule_handle()
    except LookupError:
        return []
    return list(handle.workflows)


def schedule_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
                  timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    states = asyncio.run(read_schedules(schedule_aggregate(app), kafka))
    wanted = set(names)
    rows = []
    for schedule_id, state in states.items():
        if state.status == "absent" or (named and state.workflow not in wanted):
            continue
        rule = state.schedule_rule
        due = state.next_due()
        at = None if state.anchor is None else int(state.anchor.timestamp() * 1000)
        detail = ("" if rule is None else rule_words(rule)) + ("" if due is None else f"; next due {format_due(due)}")
        if state.pending:
            detail += f"; {len(state.pending)} pending"
        rows.append(Row("schedule", state.workflow or "-", schedule_id, state.status.upper(), at, detail,
                        {"next_due": None if due is None else format_due(due), "pending": len(state.pending),
                         "rule": state.rule}))
    return rows, {}


def flow_rows(app: Any, kafka: KafkaConnection, names: Sequence[str], named: bool = False, *,
              timeout: float = 30.0) -> tuple[list[Row], dict[str, int]]:
    """The source records after the app's committed offsets, per flow: the elements in flight."""
    stages = [stage for stage in app.declared("flow") if stage.name in names]
    committed = KafkaAdmin(kafka, timeout=timeout).committed(app.name)
    rows: list[Row] = []
    skipped: dict[str, int] = {}
    for stage in stages:
        flight = _FlowElements(stage, app.partitions)
        source = stage.source_topic
        starts = {position: offset for position, offset in committed.items() if position[0] == source}
        if not starts:
            # Nothing committed: the group never acknowledged an element of this topic, or it
            # has no offsets left; every record counts (a worker would start from its policy).
            log.info("the group %s has committed no offset in %s: every record is listed", app.name, source)
        read_topics(kafka, {source: flight.take}, group_prefix=f"{app.name}.", timeout=timeout, starts=starts)
        flight.resolve(kafka, app, timeout)
        rows.extend(flight.rows())
        skipped[source] = flight.skipped
    return rows, skipped


class _FlowElements:
    def __init__(self, stage: Any, partitions: int) -> None:
        self.stage = stage
        self.partitions = partitions
        self.decoder = SourceDecoder(stage.handle.definition, stage.source_schema)
        self.elements: list[tuple[Incoming, str]] = []
        self.skipped = 0
        self.statuses: dict[str, str] = {}
        self.written: set[str] = set()

    def take(self, record: Incoming) -> None:
        try:
            element = self.decoder.element(record.value)
            instance_id = check_id(self.stage.id_of(element), "the id id_of returned")
        except (RecordError, LimitError, ValueError):
            self.skipped += 1  # the worker dead-letters it: not in flight
            return
        except Exception:  # noqa: BLE001 - id_of is user code; the worker dead-letters what it raises on
            self.skipped += 1
            return
        self.elements.append((record, instance_id))

    def resolve(self, kafka: KafkaConnection, app: Any, timeout: float) -> None:
        if not self.elements:
            return
        ids = {instance_id for _, instance_id in self.elements}
        parts = {partition_for(i, self.partitions) for i in ids}
        handle = self.stage.handle
        index = StatusIndex(handle.name, self.partitions)

        def sunk(record: Incoming) -> None:
            try:
                key = (record.key or b"").decode("utf-8")
            except UnicodeDecodeError:
                return
            if key in ids:
                if record.value is None:
                    self.written.discard(key)
                else:
                    self.written.add(key)

        read_topics(kafka, {handle.topics.status: index.take, self.stage.sink_topic: sunk},
                    group_prefix=f"{app.name}.", timeout=timeout,
                    only={handle.topics.status: parts, self.stage.sink_topic: parts})
        self.statuses = {i: s.status for i, s in index.latest.items() if i in ids}

    def rows(self) -> list[Row]:
        rows = []
        for record, instance_id in self.elements:
            workflow_status = self.statuses.get(instance_id)
            if instance_id in self.written:
                status = "WRITTEN"
            elif workflow_status is None:
                status = "WAITING"
            elif workflow_status in ("RUNNING", "PARKED"):
                status = workflow_status
            else:
                status = "ENDED"
            source = f"{record.topic}/{record.partition}@{record.offset}"
            detail = f"{self.stage.handle.name} {instance_id}" + (
                f" {workflow_status}" if workflow_status and status == "ENDED" else "")
            rows.append(Row("flow", self.stage.name, source, status, record.timestamp_ms, detail,
                            {"workflow": self.stage.handle.name, "workflow_id": instance_id,
                             "workflow_status": workflow_status}))
        return rows
