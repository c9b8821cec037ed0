"""Running one activity attempt for the workflow agent: when, where, and for how long.

An async ``fn`` runs as a task on the loop; a sync one in the agent's thread pool (a
blocking call must not stall the loop). The attempt starts at ``not_before`` and is given up
at ``timeout_at``; a sync call's thread cannot be killed, so its late result is dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from ...core.workflow import ActivityResult, Attempt, RunActivity


async def run_attempt(
    effect: RunActivity,
    attempt: Attempt,
    executor: concurrent.futures.Executor,
    clock: Callable[[], float],
) -> ActivityResult:
    """Make the attempt ``effect`` asks for and return how it ended (never raises but cancel).

    Args:
        effect: The ``RunActivity`` effect.
        attempt: What ``fn`` receives (idempotency key, number, cancellation).
        executor: Where a sync ``fn`` runs.
        clock: Seconds since the epoch, for ``not_before`` and ``timeout_at`` (ms).
    """
    delay = effect.not_before / 1000 - clock()
    if delay > 0:
        await asyncio.sleep(delay)
    try:
        if inspect.iscoroutinefunction(effect.fn):
            running: Awaitable[Any] = effect.fn(attempt)
        else:
            running = asyncio.get_running_loop().run_in_executor(executor, effect.fn, attempt)
        if effect.timeout_at is not None:
            value = await asyncio.wait_for(_settled(running), max(0.0, effect.timeout_at / 1000 - clock()))
        else:
            value = await _settled(running)
    except asyncio.TimeoutError:
        return ActivityResult(effect.path, effect.attempt, timed_out=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the attempt failed; the policy decides
        return ActivityResult(effect.path, effect.attempt, error=exc)
    return ActivityResult(effect.path, effect.attempt, value=value)


async def _settled(running: Awaitable[Any]) -> Any:
    value = await running
    # A sync function may return an awaitable (``lambda a: client.call(...)``): await it too.
    while inspect.isawaitable(value):
        value = await value
    return value
