"""Every instance's journal of one workflow: read whole from its journal topic, or from an export file.

What ``tidings journal --export`` writes and ``tidings replay`` and ``tidings.testing.replay``
read. Every record is hostile: one that cannot be read is one line in ``Journals.errors``
(counted, never a crash), and the instance it belongs to is not checked, since a journal
with a hole would replay wrongly.

**The export file** (JSON lines, UTF-8; docs/testing.md, "Replay before a deploy"):

- line 1, the header: ``{"export": "tidings.workflow-journal", "version": 1, "app": "shop",
  "workflow": "enrich", "exported_at": 1767225600000, "instances": 2, "records": 9}``;
- then one line per journal record, oldest first per instance:
  ``{"instance_id": "order-17", "record": {"type": "started", "seq": 1, ...}}``, the record
  in the journal's own JSON form (``record_to_json``, what ``tidings journal --json`` prints),
  the same fields as the Avro record on the journal topic (``workflowjournal`` schema).

A child's token is a capability: the export writes ``"hidden"`` for it, as ``tidings
journal --json`` does; replay never compares it.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from functools import cache
from types import UnionType
from typing import IO, Any, Final

from ..codec import avro
from ..core.workflow.journal import JOURNAL_TYPES, JournalRecord, record_from_json, record_to_json
from ..core.workflow_records import WorkflowJournalEntry
from ..errors import RecordError
from ..shell.client.scan import read_topics
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.io import Incoming
from .instances import shown

EXPORT: Final = "tidings.workflow-journal"
EXPORT_VERSION: Final = 1
#: Longest line read from an export file: a journal record is bounded well below it.
MAX_LINE: Final = 16 * 1024 * 1024


@dataclass(slots=True)
class Journals:
    """Each instance's journal (seq order) and a line per record that could not be read."""

    by_instance: dict[str, dict[int, JournalRecord]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    unreadable: set[str] = field(default_factory=set)  # instances with an unreadable record
    records: int = 0

    def keep(self, instance_id: str, record: JournalRecord) -> None:
        """Keep ``record``; a second record of one seq is dropped (the first wins, as in a worker's catch-up)."""
        seqs = self.by_instance.setdefault(instance_id, {})
        if record.seq not in seqs:
            seqs[record.seq] = record
            self.records += 1

    def bad(self, where: str, why: str, instance_id: str | None = None) -> None:
        """Note an unreadable record; its instance, when known, is not checked."""
        self.errors.append(f"{where}: {why}")
        if instance_id is not None:
            self.unreadable.add(instance_id)

    def __len__(self) -> int:
        return len(self.by_instance)

    def items(self) -> Iterator[tuple[str, list[JournalRecord]]]:
        """Each readable instance's journal in seq order, by instance id."""
        for instance_id in sorted(self.by_instance):
            if instance_id not in self.unreadable:
                seqs = self.by_instance[instance_id]
                yield instance_id, [seqs[seq] for seq in sorted(seqs)]

    def skipped(self) -> list[str]:
        """A line for each instance not checked because one of its records was unreadable."""
        return [f"{i}: not checked: one of its records is unreadable (above)" for i in sorted(self.unreadable)]


# ------------------------------------------------------------------------------ the topic

def read_topic_journals(connection: KafkaConnection, topic: str, *, group_prefix: str,
                        timeout: float = 30.0) -> Journals:
    """Every instance's journal as ``topic`` holds it now (every partition, low to high watermark).

    A record whose key is not ``{instance_id}/{seq}``, that does not decode, or whose value
    names another instance or seq, is one error. A tombstone removes its seq (what compaction
    would do). Blocking.

    Raises:
        BrokerError: the topic is missing, or Kafka did not answer within ``timeout``.
    """
    journals = Journals()

    def take(record: Incoming) -> None:
        where = f"{topic}/{record.partition}@{record.offset}"
        instance_id, _, seq_text = (record.key or b"").decode("utf-8", "replace").rpartition("/")
        if not instance_id or not seq_text.isdigit():
            journals.bad(where, f"its key {record.key!r} is not INSTANCE_ID/SEQ")
            return
        if record.value is None:
            seqs = journals.by_instance.get(instance_id)
            if seqs is not None and seqs.pop(int(seq_text), None) is not None:
                journals.records -= 1
            return
        try:
            entry = avro.decode_as(record.value, WorkflowJournalEntry)  # type: ignore[type-var]
        except RecordError as exc:
            journals.bad(where, f"cannot be read: {exc}", instance_id)
            return
        if entry.instance_id != instance_id or entry.record.seq != int(seq_text):
            journals.bad(where, f"its key {record.key!r} does not match its value "
                                f"({entry.instance_id}/{entry.record.seq})", instance_id)
            return
        journals.keep(instance_id, entry.record)

    read_topics(connection, {topic: take}, group_prefix=group_prefix, timeout=timeout)
    return journals


# ------------------------------------------------------------------------------ the export file

def write_export(out: IO[str], app: str, workflow: str, journals: Journals, exported_at: int) -> int:
    """Write ``journals`` to ``out`` as an export file (the module's docstring); return the records written."""
    readable = list(journals.items())
    header = {"export": EXPORT, "version": EXPORT_VERSION, "app": app, "workflow": workflow,
              "exported_at": exported_at, "instances": len(readable),
              "records": sum(len(records) for _, records in readable)}
    out.write(json.dumps(header) + "\n")
    written = 0
    for instance_id, records in readable:
        for record in records:
            out.write(json.dumps({"instance_id": instance_id, "record": shown(record_to_json(record))},
                                 separators=(",", ":")) + "\n")
            written += 1
    return written


def read_export(lines: Iterable[str], workflow: str, *, source: str = "the file") -> Journals:
    """Read an export file's lines; every bad line is one error, the rest are kept.

    Raises:
        ValueError: the header names another workflow or a format this version cannot read.
    """
    journals = Journals()
    for number, line in enumerate(lines, 1):
        where = f"{source}:{number}"
        if len(line) > MAX_LINE:
            journals.bad(where, f"a line of {len(line):,} characters, longer than any journal record")
            continue
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            journals.bad(where, f"not JSON: {exc}")
            continue
        if not isinstance(data, dict):
            journals.bad(where, f"a JSON {type(data).__name__}, not an object")
            continue
        if number == 1 and "export" in data:
            _check_header(data, workflow, source)
            continue
        instance_id = data.get("instance_id")
        if not isinstance(instance_id, str) or not instance_id:
            journals.bad(where, 'no "instance_id" string: a line is {"instance_id": ..., "record": {...}}')
            continue
        try:
            record = record_of(data.get("record"))
        except ValueError as exc:
            journals.bad(where, f"instance {instance_id!r}: {exc}", instance_id)
            continue
        journals.keep(instance_id, record)
    return journals


def _check_header(data: dict[str, Any], workflow: str, source: str) -> None:
    if data.get("export") != EXPORT:
        raise ValueError(f"{source} is not a workflow journal export (its header says {data.get('export')!r})")
    if data.get("version") != EXPORT_VERSION:
        raise ValueError(f"{source} is export format {data.get('version')!r}; this tidings reads {EXPORT_VERSION}")
    if data.get("workflow") != workflow:
        raise ValueError(f"{source} holds the journals of workflow {data.get('workflow')!r}, not {workflow!r}")


def record_of(data: Any) -> JournalRecord:
    """A journal record from its JSON form, every field of the type the journal stores.

    Raises:
        ValueError: not an object, an unknown type, a missing or unknown field, a field of
            the wrong type.
    """
    if not isinstance(data, dict):
        raise ValueError('no "record" object')
    cls = JOURNAL_TYPES.get(str(data.get("type")))
    if cls is None:
        raise ValueError(f"unknown record type {data.get('type')!r} (one of {', '.join(JOURNAL_TYPES)})")
    if "error" in data and data["error"] is not None and not isinstance(data["error"], dict):
        raise ValueError(f"{data['type']} field 'error' is a {type(data['error']).__name__}, not an object")
    try:
        record = record_from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(str(exc)) from None
    kind: Any = type(record)
    for name, types, literals in _fields_of(kind):
        value = getattr(record, name)
        # Exact types: a bool is not an int here (JSON true where a seq is stored is wrong).
        if type(value) not in types and (literals is None or value not in literals):
            raise ValueError(f"{data['type']} field {name!r} is {value!r}, of the wrong type")
    return record


@cache
def _fields_of(cls: type) -> tuple[tuple[str, frozenset[type], frozenset[Any] | None], ...]:
    """For each field of a record class: the exact types its values may have, and the literal
    values it may take (a ``Literal`` field), read once from the class's type hints."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, *_allowed(hints[f.name])) for f in fields(cls))


def _allowed(hint: Any) -> tuple[frozenset[type], frozenset[Any] | None]:
    origin = typing.get_origin(hint)
    if origin is typing.Union or isinstance(hint, UnionType):
        types: set[type] = set()
        literals: set[Any] | None = None
        for arg in typing.get_args(hint):
            more, values = _allowed(arg)
            types |= more
            if values is not None:
                literals = (literals or set()) | values
        return frozenset(types), None if literals is None else frozenset(literals)
    if origin is typing.Literal:
        return frozenset(), frozenset(typing.get_args(hint))
    if isinstance(hint, type):
        return frozenset({hint}), None
    raise TypeError(f"a journal field of type {hint!r} has no check")  # pragma: no cover - caught by the tests
