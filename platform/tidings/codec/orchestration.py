"""Avro field mappings of the hosted-orchestration records (``core.orchestration_records``).

``tidings.codec.avro`` merges these into its catalogue, so the records are encoded with
``avro.encode`` and read back with ``avro.decode_as`` like every other envelope. Kept apart
from ``avro.py`` so each family of records owns its own mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from tidings.codec.fields import plain_fields
from tidings.core.orchestration_records import (
    Action,
    OrchestrationActions,
    OrchestrationEvent,
    OrchestrationOutcome,
)
from tidings.core.records import EventEnvelope


def _orchestration_event_fields(record: OrchestrationEvent) -> dict[str, Any]:
    return {
        "orchestration": record.orchestration,
        "instance": record.instance,
        "sequence": record.sequence,
        "source_topic": record.source_topic,
        "source_partition": record.source_partition,
        "source_offset": record.source_offset,
        "aggregate": record.aggregate,
        "event": plain_fields(record.event),
    }


def _orchestration_event_from(fields: dict[str, Any]) -> OrchestrationEvent:
    fields["event"] = EventEnvelope(**fields["event"])
    return OrchestrationEvent(**fields)


def _actions_fields(record: OrchestrationActions) -> dict[str, Any]:
    return {
        "orchestration": record.orchestration,
        "instance": record.instance,
        "position": record.position,
        "actions": [{"type": a.type, "payload": a.payload} for a in record.actions],
        "timestamp_ms": record.timestamp_ms,
    }


def _actions_from(fields: dict[str, Any]) -> OrchestrationActions:
    fields["actions"] = tuple(Action(**action) for action in fields["actions"])
    return OrchestrationActions(**fields)


#: The Avro record name of each record type; the schema files must use these names.
RECORD_NAMES: Final[Mapping[type, str]] = MappingProxyType(
    {
        OrchestrationEvent: "tidings.OrchestrationEvent",
        OrchestrationActions: "tidings.OrchestrationActions",
        OrchestrationOutcome: "tidings.OrchestrationOutcome",
    }
)
TO_FIELDS: Final[Mapping[type, Callable[[Any], dict[str, Any]]]] = MappingProxyType(
    {
        OrchestrationEvent: _orchestration_event_fields,
        OrchestrationActions: _actions_fields,
        OrchestrationOutcome: plain_fields,
    }
)
FROM_FIELDS: Final[Mapping[type, Callable[[dict[str, Any]], Any]]] = MappingProxyType(
    {
        OrchestrationEvent: _orchestration_event_from,
        OrchestrationActions: _actions_from,
        OrchestrationOutcome: lambda fields: OrchestrationOutcome(**fields),
    }
)
