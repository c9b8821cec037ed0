"""RocksDB state of the schedule dispatcher on one worker (rocksdict).

The dispatcher folds the schedule aggregate's journal (``{app}.aggregate.schedule.events``)
into the same states the aggregate holds, and keeps beside them a small **due-time index**
per partition, so a worker that takes a partition over rebuilds its timers from one prefix
scan instead of parsing every schedule. Everything here is a cache of the journal: a store
whose state type changed shape is wiped and rebuilt from it.

Keys:
    ``s/{schedule_id}``                  ``{version}\\n{ScheduleState as JSON}``
    ``x/{partition:05d}/{schedule_id}``  ``{next due in µs since the epoch, or -1},{1 if runs
                                         are pending}``; absent when neither (a deleted or
                                         paused schedule costs no index entry)
    ``o/{partition}``                    next journal offset applied for that partition
    ``meta/schema``                      fingerprint of the state type
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import TypeAdapter
from rocksdict import Options, WriteBatch

from ....core.schedule.aggregate import ScheduleState
from ...runtime.rocks import open_cache, prefixed

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: RocksDB memtable size of the store (the default is 64 MiB).
WRITE_BUFFER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What the dispatcher must do for one schedule: fire at ``next_due``, start pending runs."""

    next_due: datetime | None
    pending: bool

    @classmethod
    def of(cls, state: ScheduleState) -> IndexEntry:
        return cls(state.next_due(), bool(state.pending))

    @property
    def empty(self) -> bool:
        return self.next_due is None and not self.pending


@dataclass(frozen=True)
class StoredSchedule:
    """One schedule as the journal built it: its version (the last event applied) and state."""

    schedule_id: str
    partition: int
    version: int
    state: ScheduleState

    @cached_property
    def entry(self) -> IndexEntry:
        """Its index entry (computed once: the store and the timers both need it)."""
        return IndexEntry.of(self.state)


def to_micros(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


class ScheduleStore:
    """States, the due-time index and applied offsets of the dispatcher, in RocksDB."""

    def __init__(self, path: Path) -> None:
        self._adapter: TypeAdapter[ScheduleState] = TypeAdapter(ScheduleState)
        schema = json.dumps(self._adapter.json_schema(), sort_keys=True)
        fingerprint = hashlib.sha256(f"schedule-dispatcher\n{schema}".encode()).digest()
        options = Options(raw_mode=True)
        # Small memtables: the store sees a few small writes per due time, and a worker's
        # memory per idle schedule should not be RocksDB's default 64 MiB buffer spread thin.
        options.set_write_buffer_size(WRITE_BUFFER_BYTES)
        self._db = open_cache(path, fingerprint, options)

    def load(self, schedule_id: str) -> tuple[int, ScheduleState] | None:
        """Return ``(version, state)`` of a schedule the journal holds, or None."""
        raw = self._db.get(b"s/" + _key(schedule_id))
        if raw is None:
            return None
        head, _, body = raw.partition(b"\n")
        return int(head), self._adapter.validate_json(body)

    def offset(self, partition: int) -> int | None:
        """Return the next journal offset applied for ``partition``, or None if never."""
        raw = self._db.get(b"o/%d" % partition)
        return None if raw is None else int(raw)

    def index(self, partition: int) -> Iterator[tuple[str, IndexEntry]]:
        """Yield every index entry of ``partition`` (one prefix scan)."""
        for key, value in prefixed(self._db, b"x/%05d/" % partition):
            due, _, pending = value.partition(b",")
            micros = int(due)
            yield (key.decode("utf-8", "surrogatepass"),
                   IndexEntry(None if micros < 0 else from_micros(micros), pending == b"1"))

    def write(self, schedules: Mapping[str, StoredSchedule], offsets: Mapping[int, int]) -> None:
        """Write schedules, their index entries and offsets in one batch."""
        batch = WriteBatch(raw_mode=True)
        for schedule in schedules.values():
            key = _key(schedule.schedule_id)
            batch.put(b"s/" + key, b"%d\n" % schedule.version + self._adapter.dump_json(schedule.state))
            entry = schedule.entry
            index_key = b"x/%05d/" % schedule.partition + key
            if entry.empty:
                batch.delete(index_key)
            else:
                due = -1 if entry.next_due is None else to_micros(entry.next_due)
                batch.put(index_key, b"%d,%d" % (due, entry.pending))
        for partition, offset in offsets.items():
            batch.put(b"o/%d" % partition, b"%d" % offset)
        self._db.write(batch)

    def close(self) -> None:
        self._db.close()


def _key(schedule_id: str) -> bytes:
    # surrogatepass: any str the core accepts must not crash the store.
    return schedule_id.encode("utf-8", "surrogatepass")


__all__ = ["IndexEntry", "ScheduleStore", "StoredSchedule", "from_micros", "to_micros"]
