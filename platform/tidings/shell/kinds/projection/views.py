"""Read models of projections: a JSON key-value view in RocksDB, written with its offsets.

A projection's handler reads and writes a ``View``; the agent commits the view's pending
writes together with the next offset of every source partition in one RocksDB write
batch. So after a crash the view and the offsets agree, and re-delivered events (offsets
below the stored ones) are skipped: nothing is applied twice.

Keys:
    ``v/{key}``                 a view entry (JSON)
    ``o/{topic}/{partition}``   next source offset to apply
    ``a/{aggregate}/{id}``      the last version of that instance applied

The versions make a projection apply each (instance, version) once even when the events
topic holds it twice (a zombie's write, or any producer's copy): only re-delivery is
handled by the offsets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Options, Rdict, WriteBatch

from ...runtime.rocks import prefixed

_DELETED = object()


class View:
    """A key-value read model; values are JSON-compatible.

    Reads see the writes made so far. Nothing is stored until the agent commits the batch
    together with its offsets; the writes of a handler call that raised are dropped.
    """

    def __init__(self, db: Rdict) -> None:
        self._db = db
        self._batch: dict[str, Any] = {}  # writes of handler calls that returned
        self._event: dict[str, Any] = {}  # writes of the call under way

    def get(self, key: str, default: Any = None) -> Any:
        """Return the value at ``key``, or ``default``."""
        for layer in (self._event, self._batch):
            if key in layer:
                value = layer[key]
                return default if value is _DELETED else value
        raw = self._db.get(b"v/" + key.encode())
        return default if raw is None else json.loads(raw)

    def put(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (JSON-compatible)."""
        json.dumps(value)  # fail in the handler, not at commit time
        self._event[key] = value

    def delete(self, key: str) -> None:
        """Remove ``key``."""
        self._event[key] = _DELETED

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """Iterate entries whose key starts with ``prefix``, in key order."""
        merged: dict[str, Any] = {}
        for rest, raw in prefixed(self._db, b"v/" + prefix.encode()):
            merged[prefix + rest.decode()] = json.loads(raw)
        for layer in (self._batch, self._event):
            merged.update((k, v) for k, v in layer.items() if k.startswith(prefix))
        for key in sorted(merged):
            if merged[key] is not _DELETED:
                yield key, merged[key]

    def _keep(self) -> None:
        self._batch.update(self._event)
        self._event.clear()

    def _discard(self) -> None:
        self._event.clear()

    def _drain(self, batch: WriteBatch) -> None:
        for key, value in self._batch.items():
            if value is _DELETED:
                batch.delete(b"v/" + key.encode())
            else:
                batch.put(b"v/" + key.encode(), json.dumps(value).encode())
        self._batch.clear()


class ViewStore:
    """The RocksDB database of one projection on one worker."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        access = AccessType.read_only() if read_only else AccessType.read_write()
        self._db = Rdict(str(path), options, access_type=access)
        self.view = View(self._db)
        self._versions: dict[tuple[str, str], int] = {}  # applied, not committed yet

    def version(self, aggregate: str, aggregate_id: str) -> int:
        """Return the last version of the instance applied (0: none)."""
        pending = self._versions.get((aggregate, aggregate_id))
        if pending is not None:
            return pending
        raw = self._db.get(f"a/{aggregate}/{aggregate_id}".encode())
        return 0 if raw is None else int(raw)

    def applied(self, aggregate: str, aggregate_id: str, version: int) -> None:
        """Remember that ``version`` of the instance was applied (stored at the next commit)."""
        self._versions[(aggregate, aggregate_id)] = version

    def offset(self, topic: str, partition: int) -> int | None:
        """Return the next offset of ``topic``/``partition`` to apply, or None if never."""
        raw = self._db.get(f"o/{topic}/{partition}".encode())
        return None if raw is None else int(raw)

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Store the view's pending writes and the offsets atomically."""
        batch = WriteBatch(raw_mode=True)
        self.view._drain(batch)
        for (aggregate, aggregate_id), version in self._versions.items():
            batch.put(f"a/{aggregate}/{aggregate_id}".encode(), b"%d" % version)
        self._versions.clear()
        for (topic, partition), offset in offsets.items():
            batch.put(f"o/{topic}/{partition}".encode(), b"%d" % offset)
        self._db.write(batch)

    def close(self) -> None:
        self._db.close()
