"""RocksDB state of one aggregate definition on one worker (rocksdict).

The events topic is the source of truth; this store is a cache of it that survives
restarts, so a worker does not re-read the whole journal. Per partition it records the
next events-topic offset it has applied, and it writes instances, replies and that offset
in one write batch, so the store is always a consistent prefix of the journal.

Keys:
    ``i/{aggregate_id}``            instance: version, persisted state
    ``r/{id key}``                  the encoded first verdict (reply) to a command
    ``t/{decided at}{id key}``      when that verdict was decided: the expiry index
    ``o/{partition}``               next events offset applied for that partition
    ``v/{partition}``               next verdicts offset applied for that partition
    ``s/["id","saga","corr"]``      this instance started that saga for that correlation id
    ``meta/schema``                 fingerprint of the state type and the subscribed sagas;
                                    a change wipes the store (rebuilt from the journal)

``{id key}`` is the aggregate id's UTF-8 length (4 bytes), the aggregate id, then the
command id: ids may hold any character, so ``("a/b", "c")`` never meets ``("a", "b/c")``.
``{decided at}`` is 8 big-endian bytes of milliseconds, so the index sorts by age and
``expire`` reads only what is due.

First verdicts are kept by time, not by count (docs/aggregates.md, "Repeated commands"):
a command id is found however many other commands its instance took since, until its
verdict is older than the definition's ``command_retention`` and ``expire`` removed it.
They live outside the instance's record, which is rewritten on every write.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import TypeAdapter
from rocksdict import Options, WriteBatch

from ....core.aggregate import AggregateInstance
from ...runtime.rocks import open_cache, prefixed

S = TypeVar("S")

#: Changes whenever the layout of the keys above changes: an older store is rebuilt.
_FORMAT = "format 2: verdicts by time"

#: A verdict to store: (aggregate id, command id) -> (encoded reply, decided at in ms).
Verdicts = Mapping[tuple[str, str], tuple[bytes, int]]


class AggregateStore(Generic[S]):
    """Instances, first replies and applied offsets of one aggregate, in RocksDB."""

    def __init__(
        self,
        path: Path,
        state_type: type[S],
        *,
        definition_name: str,
        sagas: Iterable[str] = (),
        write_buffer_bytes: int | None = None,
    ) -> None:
        self._path = path
        self._adapter: TypeAdapter[S] = TypeAdapter(state_type)
        schema = json.dumps(self._adapter.json_schema(), sort_keys=True)
        # The started sagas are known only for the sagas subscribed when the events were
        # applied: a saga subscribed since must see the whole journal, so the store is
        # rebuilt from it (the catch-up runs every starter over every stored event).
        subscribed = json.dumps(sorted(set(sagas)))
        fingerprint = hashlib.sha256(
            f"{definition_name}\n{schema}\nsagas {subscribed}\n{_FORMAT}".encode()
        ).digest()
        options = Options(raw_mode=True)
        if write_buffer_bytes is not None:
            options.set_write_buffer_size(write_buffer_bytes)
        self._db = open_cache(path, fingerprint, options)

    def load(self, aggregate_id: str) -> AggregateInstance[S] | None:
        """Return the stored instance, or None when the store has never seen it."""
        raw = self._db.get(b"i/" + aggregate_id.encode())
        if raw is None:
            return None
        head, _, state_json = raw.partition(b"\n")
        state = self._adapter.validate_json(state_json)
        return AggregateInstance(aggregate_id, int(head), state, state)

    def reply(self, aggregate_id: str, command_id: str) -> bytes | None:
        """Return the encoded first verdict on ``command_id``, if remembered."""
        return self._db.get(b"r/" + _id_key(aggregate_id, command_id))

    def saga_started(self, aggregate_id: str, saga: str, correlation_id: str) -> bool:
        """Whether ``aggregate_id`` has started ``saga`` for ``correlation_id`` (stored)."""
        return self._db.get(_saga_key(aggregate_id, saga, correlation_id)) is not None

    def offset(self, partition: int) -> int | None:
        """Return the next events offset applied for ``partition``, or None if never."""
        raw = self._db.get(b"o/%d" % partition)
        return None if raw is None else int(raw)

    def verdicts_offset(self, partition: int) -> int | None:
        """Return the next verdicts-topic offset applied for ``partition``, or None if never."""
        raw = self._db.get(b"v/%d" % partition)
        return None if raw is None else int(raw)

    def write(
        self,
        instances: Iterable[AggregateInstance[S]],
        verdicts: Verdicts,
        offsets: Mapping[int, int],
        sagas: Iterable[tuple[str, str, str]] = (),
        verdict_offsets: Mapping[int, int] | None = None,
    ) -> None:
        """Write instances, first verdicts, started sagas and offsets atomically.

        ``sagas`` holds ``(aggregate id, saga name, correlation id)`` of each start;
        ``offsets`` the events topic's next offsets, ``verdict_offsets`` the verdicts topic's.
        """
        batch = WriteBatch(raw_mode=True)
        for aggregate_id, saga, correlation_id in sagas:
            batch.put(_saga_key(aggregate_id, saga, correlation_id), b"1")
        for instance in instances:
            body = self._adapter.dump_json(instance.state)
            batch.put(b"i/" + instance.aggregate_id.encode(), b"%d\n" % instance.version + body)
        for (aggregate_id, command_id), (reply, decided_at) in verdicts.items():
            key = _id_key(aggregate_id, command_id)
            batch.put(b"r/" + key, reply)
            batch.put(b"t/" + _AT.pack(max(decided_at, 0)) + key, b"")
        for partition, offset in offsets.items():
            batch.put(b"o/%d" % partition, b"%d" % offset)
        for partition, offset in (verdict_offsets or {}).items():
            batch.put(b"v/%d" % partition, b"%d" % offset)
        self._db.write(batch)

    def expire(self, before_ms: int, *, limit: int = 10_000) -> int:
        """Forget up to ``limit`` first verdicts decided before ``before_ms``; return how many.

        Reads the expiry index from its oldest entry, so a call with nothing due costs one
        seek (and a step over the deletion markers of the last calls, until RocksDB compacts
        them: ~20 ms after 100,000 deletions). A command id forgotten here is decided afresh
        if it comes again.
        """
        batch = WriteBatch(raw_mode=True)
        end = b"t/" + _AT.pack(max(before_ms, 0))
        count = 0
        for key, _ in prefixed(self._db, b"t/"):
            if count >= limit or b"t/" + key >= end:
                break
            batch.delete(b"t/" + key)
            batch.delete(b"r/" + key[_AT.size:])
            count += 1
        if count:
            self._db.write(batch)
        return count

    def verdict_count(self) -> int:
        """How many first verdicts are remembered (a full scan of the index: for tests and benches)."""
        return sum(1 for _ in prefixed(self._db, b"t/"))

    def close(self) -> None:
        """Flush and close the database."""
        self._db.close()


_AT = struct.Struct(">Q")
_LENGTH = struct.Struct(">I")


def _id_key(aggregate_id: str, command_id: str) -> bytes:
    # surrogatepass: the core accepts any str; an id the codec would refuse cannot crash here.
    aggregate = aggregate_id.encode("utf-8", "surrogatepass")
    return _LENGTH.pack(len(aggregate)) + aggregate + command_id.encode("utf-8", "surrogatepass")


def _saga_key(aggregate_id: str, saga: str, correlation_id: str) -> bytes:
    # JSON, not '/'-joined: ids may hold '/', and ("a/b", "c") must not meet ("a", "b/c").
    # surrogatepass: the core accepts any str; an id the codec would refuse cannot crash here.
    text = json.dumps([aggregate_id, saga, correlation_id], ensure_ascii=False)
    return b"s/" + text.encode("utf-8", "surrogatepass")
