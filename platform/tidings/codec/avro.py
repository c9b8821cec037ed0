"""Avro single-object encoding of the envelopes in ``tidings.core.records``.

Wire format (Avro specification, "Single-object encoding")::

    C3 01 | CRC-64-AVRO fingerprint of the writer schema, 8 bytes little-endian | body

The body is the schemaless Avro binary of the record. Every version of every schema in
``schemas/`` (``{kind}.v{n}.avsc``) is loaded once into an immutable catalogue keyed by
fingerprint; a record is read with its writer schema resolved against the newest version
of its kind, so a record written before a defaulted field existed reads with the default.

The envelopes of ``tidings.core.records`` are mapped here; each other record family
brings its own mapping module (``codec.orchestration``, ``codec.workflow``), merged into
one catalogue.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from io import BytesIO
from types import MappingProxyType
from typing import Any, Final, TypeVar, cast, get_args

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from tidings.codec.resources import shipped_data
from tidings.core.limits import check_command
from tidings.core.records import (
    CommandEnvelope,
    DeadLetter,
    EventEnvelope,
    ReplyEnvelope,
    ReplyStatus,
)
from tidings.errors import DecodeError, SchemaError
from tidings.core import workflow_records as _workflow
from tidings.core.workflow.journal import JOURNAL_TYPES as _JOURNAL_TYPES

from tidings.codec import orchestration as _orchestration
from tidings.codec import saga as _saga_codec
from tidings.codec import workflow as _workflow_codec
from tidings.codec import readers as _readers
from tidings.codec import writers as _writers
from tidings.codec.fields import plain_fields, slotted_builder
from tidings.core.saga_records import SagaJournalEntry, SagaRouted
from tidings.core.orchestration_records import (
    OrchestrationActions,
    OrchestrationEvent,
    OrchestrationOutcome,
)

Record = (
    CommandEnvelope | EventEnvelope | ReplyEnvelope | DeadLetter
    | OrchestrationEvent | OrchestrationActions | OrchestrationOutcome
    | _workflow.WorkflowInbox | _workflow.WorkflowJournalEntry | _workflow.WorkflowReply
    | _workflow.WorkflowOutcomeRecord | _workflow.WorkflowStatusRecord
    | SagaJournalEntry | SagaRouted
)
R = TypeVar(
    "R", CommandEnvelope, EventEnvelope, ReplyEnvelope, DeadLetter,
    OrchestrationEvent, OrchestrationActions, OrchestrationOutcome,
    _workflow.WorkflowInbox, _workflow.WorkflowJournalEntry, _workflow.WorkflowReply,
    _workflow.WorkflowOutcomeRecord, _workflow.WorkflowStatusRecord,
    SagaJournalEntry, SagaRouted,
)

MAGIC: Final = b"\xc3\x01"
_HEADER_LEN: Final = 10
_REPLY_STATUSES: Final = frozenset(get_args(ReplyStatus))
_FILE_NAME = re.compile(r"^(?P<kind>[a-z]+)\.v(?P<version>[0-9]+)\.avsc$")

# The Avro record name of each envelope type; the schema files must use these names.
_RECORD_NAMES: Final[Mapping[type, str]] = MappingProxyType(
    {
        CommandEnvelope: "tidings.CommandEnvelope",
        EventEnvelope: "tidings.EventEnvelope",
        ReplyEnvelope: "tidings.ReplyEnvelope",
        DeadLetter: "tidings.DeadLetter",
        **_orchestration.RECORD_NAMES,
        **_workflow_codec.RECORD_NAMES,
        **_saga_codec.RECORD_NAMES,
    }
)


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One version of one envelope schema, parsed once.

    Attributes:
        kind: The file's kind prefix, e.g. ``command``.
        version: The ``n`` of ``{kind}.v{n}.avsc``.
        record_type: The envelope class this schema encodes.
        parsed: The fastavro-parsed schema.
        fingerprint: The 8-byte CRC-64-AVRO fingerprint of its parsing canonical form.
    """

    kind: str
    version: int
    record_type: type
    parsed: Any
    fingerprint: bytes


@dataclass(frozen=True, slots=True)
class SchemaCatalogue:
    """Every schema version, by fingerprint, and the newest version of each envelope type."""

    by_fingerprint: Mapping[bytes, SchemaVersion]
    newest: Mapping[type, SchemaVersion]


def schema_fingerprint(schema: Any) -> bytes:
    """Return the 8 header bytes of the single-object encoding for ``schema``.

    Args:
        schema: An Avro schema as JSON-decoded Python values.

    Returns:
        The CRC-64-AVRO fingerprint of its parsing canonical form, little-endian (the
        byte order of the Avro specification and of Java's ``SchemaNormalization``).
    """
    # fastavro already renders the 64-bit value in little-endian byte order.
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def load_catalogue() -> SchemaCatalogue:
    """Parse every ``schemas/*.avsc`` shipped with tidings.

    Returns:
        The catalogue. ``CATALOGUE`` holds the one built at import; call this only to
        inspect the files afresh.

    Raises:
        SchemaError: A file is misnamed, names an unknown record, or two files share a
            fingerprint or a (kind, version).
    """
    by_name = {name: record_type for record_type, name in _RECORD_NAMES.items()}
    by_fingerprint: dict[bytes, SchemaVersion] = {}
    newest: dict[type, SchemaVersion] = {}
    problems: list[str] = []
    seen: set[tuple[str, int]] = set()
    for entry in sorted(shipped_data("schemas").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".avsc"):
            continue
        match = _FILE_NAME.match(entry.name)
        if match is None:
            problems.append(f"{entry.name}: not named {{kind}}.v{{n}}.avsc")
            continue
        raw = json.loads(entry.read_text(encoding="utf-8"))
        # A fresh named_schemas per file: reply.vN.avsc defines tidings.EventEnvelope
        # inline too, and each file must stand alone as a writer schema.
        parsed = cast(dict[str, Any], parse_schema(raw, named_schemas={}))
        record_type = by_name.get(parsed["name"])
        if record_type is None:
            problems.append(f"{entry.name}: record {parsed['name']!r} is no tidings envelope")
            continue
        key = (match["kind"], int(match["version"]))
        if key in seen:
            problems.append(f"{entry.name}: duplicate version")
            continue
        seen.add(key)
        version = SchemaVersion(key[0], key[1], record_type, parsed, schema_fingerprint(raw))
        if version.fingerprint in by_fingerprint:
            other = by_fingerprint[version.fingerprint]
            problems.append(f"{entry.name}: same fingerprint as {other.kind}.v{other.version}")
            continue
        by_fingerprint[version.fingerprint] = version
        if record_type not in newest or newest[record_type].version < version.version:
            newest[record_type] = version
    missing = [name for record_type, name in _RECORD_NAMES.items() if record_type not in newest]
    problems += [f"no schema for {name}" for name in missing]
    if problems:
        raise SchemaError("invalid schemas/: " + "; ".join(problems))
    return SchemaCatalogue(MappingProxyType(by_fingerprint), MappingProxyType(newest))


# Parsed once at import and never mutated: parsing is far too slow for the hot path.
CATALOGUE: Final = load_catalogue()


def _reply_fields(record: ReplyEnvelope) -> dict[str, Any]:
    fields = plain_fields(record)
    fields["events"] = [plain_fields(event) for event in record.events]
    return fields


# Decoded records are built through their slots: the reader schema's fields are exactly
# the record's (test_codec_avro.py checks it), so ``cls(**fields)`` could never fail here.
_build_command: Final = slotted_builder(CommandEnvelope)
_build_event: Final = slotted_builder(EventEnvelope)
_build_reply: Final = slotted_builder(ReplyEnvelope)


def _reply_from(fields: dict[str, Any]) -> ReplyEnvelope:
    if fields["status"] not in _REPLY_STATUSES:
        raise SchemaError(f"reply status {fields['status']!r} is not one of {sorted(_REPLY_STATUSES)}")
    fields["events"] = tuple(_build_event(event) for event in fields["events"])
    return _build_reply(fields)


_TO_FIELDS: Final[Mapping[type, Callable[[Any], dict[str, Any]]]] = MappingProxyType(
    {
        CommandEnvelope: plain_fields,
        EventEnvelope: plain_fields,
        ReplyEnvelope: _reply_fields,
        DeadLetter: plain_fields,
        **_orchestration.TO_FIELDS,
        **_workflow_codec.TO_FIELDS,
        **_saga_codec.TO_FIELDS,
    }
)
_FROM_FIELDS: Final[Mapping[type, Callable[[dict[str, Any]], Any]]] = MappingProxyType(
    {
        # Commands come from any producer: their ids are checked here, at the edge.
        CommandEnvelope: lambda fields: check_command(_build_command(fields)),
        EventEnvelope: _build_event,
        ReplyEnvelope: _reply_from,
        DeadLetter: lambda fields: DeadLetter(**fields),
        **_orchestration.FROM_FIELDS,
        **_workflow_codec.FROM_FIELDS,
        **_saga_codec.FROM_FIELDS,
    }
)


def _record_names(schema: Any) -> set[str]:
    """The full names of every record type a parsed schema defines."""
    if isinstance(schema, list):
        return set().union(*(_record_names(branch) for branch in schema))
    if not isinstance(schema, dict):
        return set()
    if schema.get("type") == "record":
        names = {schema["name"]}
        for field in schema["fields"]:
            names |= _record_names(field["type"])
        return names
    return _record_names(schema.get("items")) | _record_names(schema.get("values"))


# Records whose Avro fields are not their attributes: the journal entry's fields come from
# its journal record (``codec.workflow._journal_fields``), so its writer reads that dict.
_FROM_FIELD_DICT: Final = frozenset({_workflow.WorkflowJournalEntry})
# Records stored as the dict of their ``to_json`` (the Avro record has its fields).
_TO_JSON_RECORDS: Final = frozenset({"tidings.StepError"})
# Records nested in a ``to_json`` dict, so read as its items (a StepError's causes).
_ITEM_RECORDS: Final = frozenset({"tidings.StepCause"})


def _modes(names: set[str]) -> dict[str, str]:
    """How a compiled writer reads each named record: its attributes unless listed above."""
    return {name: (_writers.TO_JSON if name in _TO_JSON_RECORDS
                   else _writers.ITEMS if name in _ITEM_RECORDS else _writers.ATTRIBUTES) for name in names}


def _encoder(record_type: type, schema: SchemaVersion) -> Callable[[Any], bytes]:
    """Build the encoder of one envelope type: a compiled writer, else fastavro's.

    A compiled writer reads the record's attributes directly unless the type maps its
    fields itself (``_FROM_FIELD_DICT``); it writes what ``schemaless_writer`` writes for
    ``_TO_FIELDS[record_type](record)``, byte for byte (``test_codec_writers.py``).
    """
    header = MAGIC + schema.fingerprint
    to_fields = _TO_FIELDS[record_type]
    names = _record_names(schema.parsed)
    from_dict = record_type in _FROM_FIELD_DICT
    slots = set(getattr(record_type, "__slots__", ()))
    if not from_dict and not {f["name"] for f in schema.parsed["fields"]} <= slots:
        from_dict = True  # attributes that are not the fields: read the mapped dict instead
    modes = _modes(names)
    if from_dict:
        modes = {name: _writers.ITEMS for name in names}
    write = _writers.compile_writer(schema.parsed, modes)
    if write is None:
        parsed = schema.parsed

        def encode_with_fastavro(record: Any) -> bytes:
            out = BytesIO()
            out.write(header)
            schemaless_writer(out, parsed, to_fields(record))
            return out.getvalue()

        return encode_with_fastavro
    compiled = write
    if record_type is _workflow.WorkflowJournalEntry:
        return _journal_encoder(header, schema, compiled, to_fields)
    if from_dict:

        def encode_fields(record: Any) -> bytes:
            out = bytearray(header)
            compiled(to_fields(record), out)
            return bytes(out)

        return encode_fields

    def encode_attributes(record: Any) -> bytes:
        out = bytearray(header)
        compiled(record, out)
        return bytes(out)

    return encode_attributes


def _journal_writers(schema: SchemaVersion) -> dict[type, _writers.Writer]:
    """A writer of the journal entry per journal record type it compiles for.

    The flat Avro record has a nullable field for every slot of every record type; the
    writer of one type reads its slots from the record and writes the null index for the
    rest, with no dict of all 32 fields built first (7.6 -> 3 us an entry). A type it does
    not compile (a slot that is no field of the flat record) is written from that dict.
    """
    modes = _modes(_record_names(schema.parsed))
    by_type: dict[type, _writers.Writer] = {}
    for type_name, record_class in _JOURNAL_TYPES.items():
        slots = set(record_class.__slots__)
        sources: dict[str, str | None] = {"instance_id": "record.instance_id", "type": repr(type_name)}
        for field in schema.parsed["fields"]:
            name = field["name"]
            if name not in sources:
                sources[name] = f"record.record.{name}" if name in slots else None
        if not slots <= set(sources):
            continue  # the dict's writer drops such a slot, as fastavro would
        write = _writers.compile_writer(schema.parsed, modes, sources)
        if write is not None:
            by_type[record_class] = write
    return by_type


def _journal_encoder(header: bytes, schema: SchemaVersion, general: _writers.Writer,
                     to_fields: Callable[[Any], dict[str, Any]]) -> Callable[[Any], bytes]:
    by_type = _journal_writers(schema)

    def encode_journal_entry(entry: Any) -> bytes:
        out = bytearray(header)
        write = by_type.get(type(entry.record))
        if write is None:
            general(to_fields(entry), out)
        else:
            write(entry, out)
        return bytes(out)

    return encode_journal_entry


# One encoder per envelope type, built at import next to the catalogue.
_ENCODERS: Final[Mapping[type, Callable[[Any], bytes]]] = MappingProxyType(
    {record_type: _encoder(record_type, schema) for record_type, schema in CATALOGUE.newest.items()}
)


def encode(record: Record) -> bytes:
    """Encode an envelope as an Avro single-object record with the newest schema.

    Args:
        record: A ``CommandEnvelope``, ``EventEnvelope``, ``ReplyEnvelope`` or ``DeadLetter``.

    Returns:
        ``C3 01`` + fingerprint + schemaless Avro body.

    Raises:
        TypeError: ``record`` is not an envelope.
        SchemaError: A field does not fit the schema (e.g. a non-string metadata value).
    """
    encoder = _ENCODERS.get(type(record))
    if encoder is None:
        raise TypeError(f"cannot encode {type(record).__name__}: not a tidings envelope")
    try:
        return encoder(record)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise SchemaError(f"cannot encode {type(record).__name__}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _Reader:
    writer: SchemaVersion
    # The newest schema is the reader schema of an older version; None reads a record
    # written with the newest as it is (fastavro then resolves nothing).
    newest: Any
    build: Callable[[dict[str, Any]], Any]
    # The body of a record written with the newest schema, read without fastavro
    # (``codec.readers``); None: fastavro reads it.
    compiled: _readers.Reader | None


def _reader(writer: SchemaVersion) -> _Reader:
    newest = CATALOGUE.newest[writer.record_type]
    build = _FROM_FIELDS[writer.record_type]
    if newest is writer:
        return _Reader(writer, None, build, _readers.compile_reader(writer.parsed))
    return _Reader(writer, newest.parsed, build, None)


# What fastavro and the compiled readers raise for a body that does not parse.
_BODY_ERRORS: Final = (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError, OverflowError)


# Per writer fingerprint: its schema, the reader schema, the record builder and its compiled reader.
_READERS: Final = MappingProxyType({fp: _reader(writer) for fp, writer in CATALOGUE.by_fingerprint.items()})


def decode(data: bytes | None) -> Record:
    """Decode an Avro single-object record written with any shipped schema version.

    Args:
        data: The record's bytes (a Kafka record value; None for a tombstone).

    Returns:
        The envelope, read with the newest schema of its type (defaults fill new fields).

    Raises:
        DecodeError: A tombstone, bytes that are not a single-object record of a known
            schema, or a body that does not parse (also a string that is not UTF-8).
        SchemaError: The body parses but a field's value is invalid (e.g. reply status);
            ``LimitError`` for a command whose ids, payload or metadata break a limit.
    """
    if data is None:
        raise DecodeError("a tombstone (null value) is no Avro record")
    if len(data) < _HEADER_LEN or data[:2] != MAGIC:
        hint = " (it looks like JSON: send it with header content-type: application/json)" if data[:1] == b"{" else ""
        raise DecodeError(f"not an Avro single-object record: no C3 01 magic{hint}")
    reader = _READERS.get(bytes(data[2:_HEADER_LEN]))
    if reader is None:
        raise DecodeError(f"unknown writer schema fingerprint {bytes(data[2:_HEADER_LEN]).hex()}")
    writer = reader.writer
    try:
        if reader.compiled is not None:
            fields, end = reader.compiled(data if type(data) is bytes else bytes(data), _HEADER_LEN)
        else:
            body = BytesIO(data)
            body.seek(_HEADER_LEN)
            fields = cast(dict[str, Any], schemaless_reader(body, writer.parsed, reader.newest))
            end = body.tell()
    except _BODY_ERRORS as exc:
        raise DecodeError(f"corrupt {writer.kind}.v{writer.version} record: {exc!r}") from exc
    if end != len(data):
        raise DecodeError(f"{len(data) - end} trailing bytes after a {writer.kind}.v{writer.version} record")
    return cast(Record, reader.build(fields))


def decode_as(data: bytes | None, record_type: type[R]) -> R:
    """Decode an Avro single-object record that must be of ``record_type``.

    Args:
        data: The record's bytes.
        record_type: The envelope class the topic carries.

    Returns:
        The envelope.

    Raises:
        DecodeError: As for ``decode``.
        SchemaError: A valid envelope of another type, or an invalid field value.
    """
    record = decode(data)
    if type(record) is not record_type:
        raise SchemaError(f"expected a {record_type.__name__}, got a {type(record).__name__}")
    return cast(R, record)
