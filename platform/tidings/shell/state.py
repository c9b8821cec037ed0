"""RocksDB state of one aggregate definition on one worker (rocksdict).

The events topic is the source of truth; this store is a cache of it that survives
restarts, so a worker does not re-read the whole journal. Per partition it records the
next events-topic offset it has applied, and it writes instances, replies and that offset
in one write batch, so the store is always a consistent prefix of the journal.

Keys:
    ``i/{aggregate_id}``            instance: version, recent command ids, persisted state
    ``r/{aggregate_id}/{command}``  the encoded first reply to a command
    ``o/{partition}``               next events offset applied for that partition
    ``s/["id","saga","corr"]``      this instance started that saga for that correlation id
    ``meta/schema``                 fingerprint of the state type and the subscribed sagas;
                                    a change wipes the store (rebuilt from the journal)
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Generic, TypeVar, cast

from pydantic import TypeAdapter
from rocksdict import Options, Rdict, WriteBatch

from ..core.aggregate import AggregateInstance

S = TypeVar("S")


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
            f"{definition_name}\n{schema}\nsagas {subscribed}".encode()
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
        version, recent = json.loads(head)
        state = self._adapter.validate_json(state_json)
        return AggregateInstance(aggregate_id, version, state, state, tuple(recent))

    def reply(self, aggregate_id: str, command_id: str) -> bytes | None:
        """Return the encoded first reply to ``command_id``, if stored."""
        return self._db.get(_reply_key(aggregate_id, command_id))

    def saga_started(self, aggregate_id: str, saga: str, correlation_id: str) -> bool:
        """Whether ``aggregate_id`` has started ``saga`` for ``correlation_id`` (stored)."""
        return self._db.get(_saga_key(aggregate_id, saga, correlation_id)) is not None

    def offset(self, partition: int) -> int | None:
        """Return the next events offset applied for ``partition``, or None if never."""
        raw = self._db.get(b"o/%d" % partition)
        return None if raw is None else int(raw)

    def write(
        self,
        instances: Iterable[AggregateInstance[S]],
        replies: Mapping[tuple[str, str], bytes],
        forget: Iterable[tuple[str, str]],
        offsets: Mapping[int, int],
        sagas: Iterable[tuple[str, str, str]] = (),
    ) -> None:
        """Write instances, replies, forgotten replies, started sagas and offsets atomically.

        ``sagas`` holds ``(aggregate id, saga name, correlation id)`` of each start.
        """
        batch = WriteBatch(raw_mode=True)
        for aggregate_id, saga, correlation_id in sagas:
            batch.put(_saga_key(aggregate_id, saga, correlation_id), b"1")
        for instance in instances:
            head = json.dumps([instance.version, list(instance.recent)]).encode()
            body = self._adapter.dump_json(instance.state)
            batch.put(b"i/" + instance.aggregate_id.encode(), head + b"\n" + body)
        for (aggregate_id, command_id), reply in replies.items():
            batch.put(_reply_key(aggregate_id, command_id), reply)
        for aggregate_id, command_id in forget:
            batch.delete(_reply_key(aggregate_id, command_id))
        for partition, offset in offsets.items():
            batch.put(b"o/%d" % partition, b"%d" % offset)
        self._db.write(batch)

    def close(self) -> None:
        """Flush and close the database."""
        self._db.close()


def _reply_key(aggregate_id: str, command_id: str) -> bytes:
    return f"r/{aggregate_id}/{command_id}".encode()


def _saga_key(aggregate_id: str, saga: str, correlation_id: str) -> bytes:
    # JSON, not '/'-joined: ids may hold '/', and ("a/b", "c") must not meet ("a", "b/c").
    # surrogatepass: the core accepts any str; an id the codec would refuse cannot crash here.
    text = json.dumps([aggregate_id, saga, correlation_id], ensure_ascii=False)
    return b"s/" + text.encode("utf-8", "surrogatepass")



def open_cache(path: Path, fingerprint: bytes, options: Options) -> Rdict:
    """Open the RocksDB store at ``path``, a cache of a journal marked with ``fingerprint``.

    A store written with another fingerprint (the state type changed shape) is unreadable:
    it is wiped, and the caller rebuilds it from the journal.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    db = Rdict(str(path), options)
    if db.get(b"meta/schema") not in (None, fingerprint):
        db.close()
        shutil.rmtree(path)
        db = Rdict(str(path), options)
    db[b"meta/schema"] = fingerprint
    return db


def prefixed(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(key without prefix, value)`` for the keys starting with ``prefix``, in key order.

    For stores opened in raw mode (bytes keys and values). RocksDB keeps keys sorted, so
    the scan starts at ``prefix`` and stops at the first key past it.
    """
    for key, value in db.items(from_key=prefix):
        key = cast(bytes, key)
        if not key.startswith(prefix):
            return
        yield key[len(prefix):], cast(bytes, value)
