"""One instance read from its topics: a workflow's journal with its and its children's
statuses, a saga's journal. What ``tidings describe`` and the console's instance page show.

No worker is asked: the journal topic holds what was decided, the status topic (only the
partitions the wanted ids live on) the latest status. Tokens are capabilities and are never
handed out (:func:`shown`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..codec import avro
from ..core.partitioning import partition_for
from ..core.records import EventEnvelope
from ..core.saga_records import SagaJournalEntry
from ..core.workflow.journal import JournalRecord, StepKind, StepStarted
from ..core.workflow.paths import child_id
from ..errors import RecordError
from ..shell.client.scan import read_topics
from ..shell.kinds.workflow.index import InstanceStatus, StatusIndex
from ..shell.kinds.workflow.journal import read_journal
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.io import Incoming
from .describe_text import describe_saga, describe_workflow
from .journal_text import instant

HIDDEN: Final = ("token", "parent_token")
"""Fields that are capabilities (``core/workflow/children.py``): shown as "hidden", never as they are."""


def shown(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every capability that is set replaced by "hidden"."""
    return {name: "hidden" if name in HIDDEN and value is not None else value for name, value in data.items()}


def saga_record_json(record: SagaJournalEntry) -> dict[str, Any]:
    """One saga journal record as JSON (user values as the JSON the worker stored)."""
    return {
        "seq": record.seq,
        "transition": record.transition,
        "ended": record.ended,
        "entered_at_ms": record.entered_at_ms,
        "cause": record.cause,
        "events": list(record.events),
        "state": None if record.state is None else json.loads(record.state),
        "commands": [
            {"aggregate": c.aggregate, "aggregate_id": c.aggregate_id, "command_id": c.command_id, "type": c.type,
             "command": json.loads(c.payload), "expect_within_ms": c.expect_within_ms,
             "resend_every_ms": c.resend_every_ms}
            for c in record.commands
        ],
        "reason": record.reason,
    }


@dataclass(frozen=True, slots=True)
class WorkflowRead:
    """A workflow instance as its topics hold it: the journal (oldest first) and ``describe``'s dict."""

    records: list[JournalRecord]
    described: dict[str, Any]


def read_workflow(app: Any, kafka: KafkaConnection, name: str, instance_id: str, *,
                  timeout: float = 30.0) -> WorkflowRead | None:
    """The instance ``instance_id`` of the workflow ``name``; None when its journal is empty (never started).

    ``name`` must be declared by ``app`` and ``instance_id`` pass ``check_id``: the caller checks both.

    Raises:
        BrokerError: a topic is missing, or Kafka did not answer in ``timeout``.
    """
    handles = {handle.name: handle for handle in app.declared("workflow")}
    handle = handles[name]
    prefix = f"{app.name}."
    records = read_journal(kafka, handle.topics.journal, app.partitions, instance_id,
                           timeout=timeout, group_prefix=prefix)
    if not records:
        return None
    wanted: dict[str, set[str]] = {name: {instance_id}}
    for record in records:
        if isinstance(record, StepStarted) and record.kind == StepKind.CHILD_START and record.name in handles:
            wanted.setdefault(record.name, set()).add(child_id(instance_id, record.path))
    statuses = latest_statuses(app, kafka, {n: handles[n] for n in wanted}, wanted, timeout, prefix)
    described = describe_workflow(name, instance_id, records, statuses.get((name, instance_id)),
                                  {i: s for (_, i), s in statuses.items()}, int(time.time() * 1000))
    return WorkflowRead(records, described)


def latest_statuses(app: Any, kafka: KafkaConnection, handles: Mapping[str, Any], wanted: Mapping[str, set[str]],
                    timeout: float, prefix: str) -> dict[tuple[str, str], InstanceStatus]:
    """The latest status of each wanted instance, reading only the partitions their ids are on."""
    indexes = {name: StatusIndex(name, app.partitions) for name in handles}
    read_topics(kafka, {handles[name].topics.status: index.take for name, index in indexes.items()},
                group_prefix=prefix, timeout=timeout,
                only={handles[name].topics.status: {partition_for(i, app.partitions) for i in ids}
                      for name, ids in wanted.items()})
    return {(name, i): indexes[name].latest[i] for name, ids in wanted.items() for i in ids
            if i in indexes[name].latest}


@dataclass(frozen=True, slots=True)
class SagaRead:
    """A saga as its journal holds it: the records (oldest first) and ``describe``'s dict."""

    entries: list[SagaJournalEntry]
    described: dict[str, Any]


def read_saga(handle: Any, kafka: KafkaConnection, saga_id: str, *, timeout: float = 30.0) -> SagaRead | None:
    """The saga ``saga_id`` of ``handle``'s saga; None when its journal is empty (never started).

    Raises:
        BrokerError: the journal is missing, or Kafka did not answer in ``timeout``.
    """
    entries = list(asyncio.run(handle.journal(saga_id, bootstrap=kafka, timeout=timeout)))
    if not entries:
        return None
    return SagaRead(entries, describe_saga(handle.name, saga_id, entries, int(time.time() * 1000)))


def read_aggregate_events(app: Any, kafka: KafkaConnection, name: str, aggregate_id: str, *,
                          timeout: float = 30.0) -> list[dict[str, Any]]:
    """The events of the aggregate instance ``aggregate_id`` of ``name``, by version (empty: none stored).

    Only its home partition of the events topic is read. A record whose key is not
    ``{aggregate_id}/{version}``, that does not decode, or whose envelope names another
    instance or version, is skipped: any producer the ACLs let in may have written it. An
    erased event (a tombstone) is shown as erased.
    """
    handle = next(h for h in app.declared("aggregate") if h.name == name)
    partition = partition_for(aggregate_id, app.partitions)
    prefix = f"{aggregate_id}/".encode()
    by_version: dict[int, dict[str, Any]] = {}

    def take(record: Incoming) -> None:
        key = record.key or b""
        if record.partition != partition or not key.startswith(prefix) or not key[len(prefix):].isdigit():
            return
        version = int(key[len(prefix):])
        if record.value is None:
            if version in by_version:
                by_version[version] = {"version": version, "erased": True}
            return
        try:
            event = avro.decode_as(record.value, EventEnvelope)
        except RecordError:
            return
        if event.aggregate_id != aggregate_id or event.version != version or version in by_version:
            return
        try:
            payload: Any = json.loads(event.payload)
        except ValueError:
            payload = event.payload.decode("utf-8", "replace")
        by_version[version] = {"version": version, "type": event.type, "payload": payload,
                               "at": instant(event.timestamp_ms).strip() or None, "event_id": event.event_id,
                               "command_id": event.command_id, "correlation_id": event.correlation_id,
                               "deferred": event.deferred, "erased": False}

    read_topics(kafka, {handle.topics.events: take}, group_prefix=f"{app.name}.", timeout=timeout,
                only={handle.topics.events: {partition}})
    return [by_version[v] for v in sorted(by_version)]
