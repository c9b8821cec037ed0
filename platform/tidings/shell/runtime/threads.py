"""A thread of its own for a Kafka client's blocking calls.

``asyncio.to_thread`` runs on the loop's default pool: min(32, cores + 4) threads, six on
a 2-core machine. The worker's long-polling readers (a workflow's replies reader, the
events tail of its sends, catch-up reads) each hold one of those threads for a poll's
whole wait, so with a few workflows every other blocking call, a transaction's commit
included, queued behind them: 200-300 ms per call, measured. A client that blocks gets
its own thread instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class OwnThread:
    """Runs one client's blocking calls, one at a time, on a thread of its own.

    Args:
        name: The thread's name (shown in stack dumps and profiles).
    """

    def __init__(self, name: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(1, name)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """Call ``function(*args)`` on the thread and return its result."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def close(self) -> None:
        """Let the thread end after the call it is making, if any."""
        self._executor.shutdown(wait=False)
