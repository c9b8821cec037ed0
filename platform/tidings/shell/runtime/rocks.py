"""RocksDB helpers every kind's store shares: open a journal's cache, scan a key prefix.

A store is a cache of a journal on Kafka: it survives restarts so that a worker need not
re-read the journal, and it is wiped and rebuilt when its fingerprint changes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from rocksdict import Options, Rdict


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
