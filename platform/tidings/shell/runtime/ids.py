"""Random request ids without a system call per id.

``uuid.uuid4()`` reads 16 bytes of ``os.urandom``, and CPython lets the GIL go around that
``getrandom`` call. In a client whose other threads are busy (its reply reader, its
producer's delivery reports) the caller then waits until one of them gives the GIL back:
measured 300 µs a call beside one busy thread, and 17 % of a client's event loop thread at
1,000 commands in flight. ``RandomIds`` reads the same kernel source a block at a time.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Final

#: Ids drawn from one read of ``os.urandom``.
BLOCK_IDS: Final = 256


class RandomIds:
    """Ids of the form ``uuid.uuid4().hex`` gives (version 4, RFC 4122 variant), as random.

    Thread-safe. A forked child draws a fresh block before its first id, so parent and child
    never hand out the same bytes.
    """

    def __init__(self, block_ids: int = BLOCK_IDS) -> None:
        self._block = 16 * block_ids
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0
        # Not os.getpid() at every id (a system call each): the child is told at the fork.
        # A weak reference, so the registration (it cannot be undone) keeps nothing alive.
        forget = weakref.WeakMethod(self._forget)
        os.register_at_fork(after_in_child=lambda: _call(forget))

    def hex(self) -> str:
        """Return a new id: 32 lowercase hex digits."""
        with self._lock:
            if self._at >= len(self._pool):
                self._pool, self._at = os.urandom(self._block), 0
            at = self._at
            self._at = at + 16
            raw = bytearray(self._pool[at:at + 16])
        raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
        raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
        return raw.hex()

    def _forget(self) -> None:
        # In the child, right after the fork: its only thread, so no lock (one held by a
        # parent's thread at the fork would never be released here); a fresh one instead.
        self._lock = threading.Lock()
        self._pool, self._at = b"", 0


def _call(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    bound = method()
    if bound is not None:
        bound()
