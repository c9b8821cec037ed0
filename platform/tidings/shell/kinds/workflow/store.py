"""RocksDB state of one workflow definition on one worker (rocksdict).

The journal topic is the source of truth; this store is a cache of it that survives
restarts, so a worker neither re-reads the whole journal nor replays ended instances.
Every write is one write batch, made after the journal records it holds were acknowledged.

Keys:
    ``j/{instance_id}/{seq:010d}``  a journal record (JSON of ``record_to_json``)
    ``s/{instance_id}``             status and, once ended, the outcome (JSON)
    ``r/{partition}/{instance_id}`` the instance is RUNNING or PARKED: replay it on assignment
    ``t/{instance_id}/{path}``      a due timer: its due time in ms (re-armed with what remains)
    ``o/{partition}``               next journal offset applied for that partition
    ``i/{partition}``               last inbox offset whose journal records are applied
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

from ....core.workflow import JournalRecord, record_from_json, record_to_json
from ...runtime.rocks import prefixed


@dataclass(slots=True)
class StoreWrite:
    """One atomic change: journal records, statuses, the running index, timers, offsets."""

    records: list[tuple[str, JournalRecord]] = field(default_factory=list)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    running: dict[str, tuple[int, bool]] = field(default_factory=dict)  # id -> (partition, live)
    timers: dict[tuple[str, str], int | None] = field(default_factory=dict)  # None: gone
    journal_offsets: dict[int, int] = field(default_factory=dict)
    inbox_offsets: dict[int, int] = field(default_factory=dict)
    # Journal records no longer history (a run that continued as new, a tombstone caught up):
    # deleted after this write's records are put.
    dropped: list[tuple[str, int]] = field(default_factory=list)

    def merge(self, other: StoreWrite) -> None:
        """Add ``other``'s changes after this one's."""
        self.records.extend(other.records)
        self.statuses.update(other.statuses)
        self.running.update(other.running)
        self.timers.update(other.timers)
        self.journal_offsets.update(other.journal_offsets)
        self.dropped.extend(other.dropped)
        for partition, offset in other.inbox_offsets.items():
            self.inbox_offsets[partition] = max(offset, self.inbox_offsets.get(partition, -1))


class WorkflowStore:
    """Journals, statuses, running instances, due timers and offsets of one workflow."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(path), Options(raw_mode=True))

    def journal(self, instance_id: str) -> list[JournalRecord]:
        """Return the stored journal of ``instance_id`` in seq order (empty if none)."""
        return [record_from_json(json.loads(value)) for _, value in prefixed(self._db, f"j/{instance_id}/".encode())]

    def has_record(self, instance_id: str, seq: int) -> bool:
        """Whether the journal record ``seq`` of ``instance_id`` is stored."""
        return self._db.get(f"j/{instance_id}/{seq:010d}".encode()) is not None

    def status(self, instance_id: str) -> dict[str, Any] | None:
        """Return ``{"status": ..., "outcome": {...}?}``, or None when never started."""
        raw = self._db.get(f"s/{instance_id}".encode())
        return None if raw is None else json.loads(raw)

    def running(self, partition: int) -> list[str]:
        """Return the ids of the RUNNING or PARKED instances of ``partition``."""
        return [key.decode() for key, _ in prefixed(self._db, f"r/{partition}/".encode())]

    def timers(self, instance_id: str) -> dict[str, int]:
        """Return the armed timers of ``instance_id``: path -> due (ms)."""
        return {key.decode(): int(value) for key, value in prefixed(self._db, f"t/{instance_id}/".encode())}

    def journal_offset(self, partition: int) -> int | None:
        """Return the next journal offset applied for ``partition``, or None if never."""
        raw = self._db.get(b"o/%d" % partition)
        return None if raw is None else int(raw)

    def inbox_offset(self, partition: int) -> int:
        """Return the last inbox offset whose records are journaled (-1 if none)."""
        raw = self._db.get(b"i/%d" % partition)
        return -1 if raw is None else int(raw)

    def write(self, change: StoreWrite) -> None:
        """Apply ``change`` atomically."""
        batch = WriteBatch(raw_mode=True)
        for instance_id, record in change.records:
            key = f"j/{instance_id}/{record.seq:010d}".encode()
            batch.put(key, json.dumps(record_to_json(record), separators=(",", ":")).encode())
        for instance_id, seq in change.dropped:
            batch.delete(f"j/{instance_id}/{seq:010d}".encode())
        for instance_id, status in change.statuses.items():
            batch.put(f"s/{instance_id}".encode(), json.dumps(status).encode())
        for instance_id, (partition, live) in change.running.items():
            key = f"r/{partition}/{instance_id}".encode()
            if live:
                batch.put(key, b"")
            else:
                batch.delete(key)
        for (instance_id, path), due in change.timers.items():
            key = f"t/{instance_id}/{path}".encode()
            if due is None:
                batch.delete(key)
            else:
                batch.put(key, b"%d" % due)
        for partition, offset in change.journal_offsets.items():
            batch.put(b"o/%d" % partition, b"%d" % offset)
        for partition, offset in change.inbox_offsets.items():
            batch.put(b"i/%d" % partition, b"%d" % max(offset, self.inbox_offset(partition)))
        self._db.write(batch)

    def close(self) -> None:
        """Flush and close the database."""
        self._db.close()
