"""Avro field mappings of the saga records (``core.saga_records``).

``tidings.codec.avro`` merges these into its catalogue, so the records are encoded with
``avro.encode`` and read back with ``avro.decode_as`` like every other envelope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from tidings.codec.fields import plain_fields
from tidings.core.records import EventEnvelope
from tidings.core.saga_records import SagaCommandRecord, SagaJournalEntry, SagaRouted


def _journal_fields(record: SagaJournalEntry) -> dict[str, Any]:
    fields = plain_fields(record)
    fields["events"] = list(record.events)
    fields["commands"] = [plain_fields(command) for command in record.commands]
    return fields


def _journal_from(fields: dict[str, Any]) -> SagaJournalEntry:
    fields["events"] = tuple(fields["events"])
    fields["commands"] = tuple(SagaCommandRecord(**command) for command in fields["commands"])
    return SagaJournalEntry(**fields)


def _routed_fields(record: SagaRouted) -> dict[str, Any]:
    return {"saga": record.saga, "aggregate": record.aggregate, "event": plain_fields(record.event)}


def _routed_from(fields: dict[str, Any]) -> SagaRouted:
    fields["event"] = EventEnvelope(**fields["event"])
    return SagaRouted(**fields)


#: The Avro record name of each record type; the schema files must use these names.
RECORD_NAMES: Final[Mapping[type, str]] = MappingProxyType(
    {
        SagaJournalEntry: "tidings.SagaJournalEntry",
        SagaRouted: "tidings.SagaRouted",
    }
)
TO_FIELDS: Final[Mapping[type, Callable[[Any], dict[str, Any]]]] = MappingProxyType(
    {SagaJournalEntry: _journal_fields, SagaRouted: _routed_fields}
)
FROM_FIELDS: Final[Mapping[type, Callable[[dict[str, Any]], Any]]] = MappingProxyType(
    {SagaJournalEntry: _journal_from, SagaRouted: _routed_from}
)
