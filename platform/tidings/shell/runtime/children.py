"""Child processes that never outlive the process that started them.

A worker left running after its parent died keeps its consumer group's partitions and its
RocksDB lock: the next start waits or fails. On Linux the kernel SIGKILLs a child whose parent
dies, however it dies, once the child asked for it (``prctl(PR_SET_PDEATHSIG)``). Used by
``tidings worker --processes N`` and by the test kit's ``WorkerProcess``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """Return a ``preexec_fn`` that has the kernel SIGKILL the child when its parent dies.

    Everything is looked up here, in the parent: between fork and exec the child may run
    only the bare call (another thread of the parent may have held a lock at the fork).
    None where there is no ``prctl`` (not Linux). The signal follows the *thread* that
    started the child: start children from a thread that lives as long as they should.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    getppid, kill_self = os.getppid, os._exit

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal will come.
        if getppid() != parent:
            kill_self(1)

    return preexec
