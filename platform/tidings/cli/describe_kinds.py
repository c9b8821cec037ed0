"""``tidings describe`` for an aggregate instance and a schedule: read from their journal.

Both are aggregates (a schedule is an instance of the app's ``schedule`` aggregate), so both
read the one partition the id lives on of ``{app}.aggregate.{name}.events`` (keys
``{id}/{version}``), decode that id's events and fold them with the aggregate's own ``fold``
as a worker's recovery does (``inspection/schedules.py::fold_journal``: a record off its home
partition or out of version order is skipped). No worker is asked.

- An aggregate shows its version (the last stored), how many events the topic still holds,
  the last events (version, type, time, payload inline) and its folded state when the
  state is JSON-readable (pydantic, a dataclass, plain values); otherwise it says why not.
- A schedule shows what ``tidings schedule show`` shows (its rule, paused or not, the next
  due time) and its last runs: each due time a ``RunsDecided`` event decided and when,
  and whether its start was reported (``RunStarted``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import pydantic_core

from ..codec import avro
from ..codec.payloads import load_payload
from ..core.aggregate import AggregateInstance
from ..core.partitioning import partition_for
from ..core.records import EventEnvelope
from ..core.schedule import format_due, run_id
from ..errors import RecordError
from ..shell.client.scan import read_topics
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.io import Incoming
from ..inspection.journal_text import instant, value
from ..inspection.schedules import fold_journal
from .schedule import describe as schedule_lines
from .schedule import state_json

#: Events (or runs) ``describe`` prints unless ``--journal`` asks for all.
RECENT: Final = 10


def read_events(kafka: KafkaConnection, topic: str, partitions: int, aggregate_id: str, *,
                timeout: float, group_prefix: str) -> tuple[list[Incoming], list[EventEnvelope]]:
    """The records of ``aggregate_id`` on its partition (offset order) and those that decode, by version.

    A record whose key is not ``{aggregate_id}/{version}`` is another instance's; a value
    that does not decode, or names another instance or version than its key, is left out.
    """
    prefix = f"{aggregate_id}/".encode()
    records: list[Incoming] = []

    def take(record: Incoming) -> None:
        key = record.key or b""
        if key.startswith(prefix) and key[len(prefix):].isdigit():
            records.append(record)

    read_topics(kafka, {topic: take}, group_prefix=group_prefix, timeout=timeout,
                only={topic: {partition_for(aggregate_id, partitions)}})
    events: dict[int, EventEnvelope] = {}
    for record in records:
        if record.value is None:
            continue
        try:
            event = avro.decode_as(record.value, EventEnvelope)
        except RecordError:
            continue
        version = int((record.key or b"")[len(prefix):])
        if event.aggregate_id == aggregate_id and event.version == version:
            events.setdefault(version, event)  # the first in offset order, as a worker keeps it
    return records, [events[v] for v in sorted(events)]


def _state_text(state: Any) -> tuple[str | None, str | None]:
    """The folded state as JSON text, or why it is not readable as JSON."""
    try:
        return pydantic_core.to_json(state).decode("utf-8"), None
    except Exception as exc:  # noqa: BLE001 - user state of any type
        return None, f"the state ({type(state).__name__}) is not readable as JSON: {exc}"


def describe_aggregate(handle: Any, aggregate_id: str, records: Sequence[Incoming],
                       events: Sequence[EventEnvelope], partitions: int) -> dict[str, Any]:
    """What ``describe`` says of one aggregate instance, as JSON-ready values."""
    instances: dict[str, AggregateInstance[Any]] = {}
    skipped = fold_journal([r for r in records if r.value is not None], handle.definition, partitions, instances)
    folded = instances.get(aggregate_id)
    state, why = _state_text(folded.state) if folded is not None else (None, "no event folded")
    version = events[-1].version if events else 0
    if folded is not None and folded.version != version:
        why = (f"the events fold up to version {folded.version} only (a gap: an event erased or "
               f"unreadable); the state shown is at that version")
    return {
        "aggregate": handle.name, "id": aggregate_id, "version": version, "events": len(events),
        "first_at": instant(events[0].timestamp_ms).strip() if events else None,
        "last_at": instant(events[-1].timestamp_ms).strip() if events else None,
        "state": state, "state_version": None if folded is None else folded.version, "state_note": why,
        "skipped": skipped,
        "last_events": [{"version": e.version, "type": e.type, "at": instant(e.timestamp_ms).strip(),
                         "command_id": e.command_id, "payload": e.payload.decode("utf-8", "replace")}
                        for e in events[-RECENT:]],
    }


def aggregate_lines(described: dict[str, Any], events: Sequence[EventEnvelope], *, whole: bool = False,
                    full: bool = False) -> list[str]:
    lines = [f"{described['aggregate']} {described['id']}: version {described['version']}, "
             f"{described['events']} events since {described['first_at']}"]

    def fact(label: str, text: str) -> None:
        lines.append(f"  {label:<16}{text}")

    fact("version", f"{described['version']} (last event {described['last_at']})")
    if described["state"] is not None:
        fact("state", value(described["state"], full=full)
             + (f"  (at version {described['state_version']})" if described["state_note"] else ""))
    if described["state_note"]:
        fact("" if described["state"] is not None else "state", described["state_note"])
    shown = events if whole else events[-RECENT:]
    lines.append("events:" if len(shown) == len(events)
                 else f"events (last {len(shown)} of {len(events)}; --journal shows all):")
    width = len(str(events[-1].version)) if events else 1
    for event in shown:
        lines.append(f"  {instant(event.timestamp_ms)}  v{event.version:<{width}}  {event.type} "
                     f"{value(event.payload.decode('utf-8', 'replace'), full=full)}")
    return lines


def schedule_runs(handle: Any, schedule_id: str, events: Sequence[EventEnvelope]) -> list[dict[str, Any]]:
    """Each run its journal decided, oldest first: due time, run id, when decided, when its start was reported."""
    runs: dict[datetime, dict[str, Any]] = {}
    for event in events:
        if event.type not in ("schedule.runs-decided", "schedule.run-started"):
            continue
        try:
            decided = load_payload(event.type, event.payload, handle.definition.event_types)
        except Exception:  # noqa: BLE001 - a payload the fold would skip too
            continue
        if event.type == "schedule.runs-decided":
            for due in decided.runs:
                runs.setdefault(due, {"due": format_due(due), "run_id": run_id(schedule_id, due),
                                      "workflow": decided.workflow,
                                      "decided_at": instant(event.timestamp_ms).strip(), "started_at": None})
        else:
            for due in decided.dues:
                if due in runs:
                    runs[due]["started_at"] = instant(event.timestamp_ms).strip()
    return [runs[due] for due in sorted(runs)]


def describe_schedule(handle: Any, schedule_id: str, records: Sequence[Incoming],
                      events: Sequence[EventEnvelope], partitions: int) -> tuple[Any, dict[str, Any]]:
    """The schedule's state folded from its journal, and what ``describe --json`` prints."""
    instances: dict[str, AggregateInstance[Any]] = {}
    fold_journal([r for r in records if r.value is not None], handle.definition, partitions, instances)
    folded = instances.get(schedule_id)
    state = (folded.state if folded is not None else handle.definition.initial).without_tokens()
    runs = schedule_runs(handle, schedule_id, events)
    return state, {**state_json(schedule_id, state), "paused": state.status == "paused",
                   "version": events[-1].version if events else 0, "runs": runs[-RECENT:], "runs_total": len(runs)}


def schedule_describe_lines(schedule_id: str, state: Any, described: dict[str, Any]) -> list[str]:
    lines = schedule_lines(schedule_id, state, datetime.now(UTC))
    runs = described["runs"]
    if not runs:
        lines.append("last runs  none decided yet")
        return lines
    more = f" (last {len(runs)} of {described['runs_total']})" if described["runs_total"] > len(runs) else ""
    lines.append(f"last runs{more}:")
    for run in reversed(runs):
        started = f"start reported {run['started_at']}" if run["started_at"] else "start not reported yet"
        lines.append(f"           {run['due']}  {run['run_id']}  {run['workflow']}  decided {run['decided_at']}, "
                     f"{started}")
    return lines


def dumps(described: dict[str, Any]) -> str:
    return json.dumps(described, default=str)
