"""How an activity attempt that raised ended: timed out, or failed with its exception.

One rule for every place an attempt runs (the worker's task, its executor and its threads,
and the in-memory test runtime), so they cannot classify the same exception differently.
An attempt that raises ``TimeoutError`` (``tidings.AttemptTimedOut``, asyncio's, a socket's
or an HTTP client's: all are ``TimeoutError`` since Python 3.11) ran out of time, as one
the worker gives up at its ``timeout_at`` does: a timed-out attempt is retried whatever the
policy's error filter says, and its journal record names ``TimeoutError``. Any other
exception is the attempt's error, for the policy's filter to judge.
"""

from __future__ import annotations

from tidings.core.workflow.inbox import ActivityResult


def attempt_raised(path: str, attempt: int, error: Exception) -> ActivityResult:
    """Return how attempt ``attempt`` of the activity at ``path`` ended when it raised ``error``.

    Args:
        path: The step's path.
        attempt: The attempt's number (1-based).
        error: What the activity function raised (or its awaitable did).

    Returns:
        ``ActivityResult(timed_out=True)`` for a ``TimeoutError``, else one carrying ``error``.
    """
    if isinstance(error, TimeoutError):
        return ActivityResult(path, attempt, timed_out=True)
    return ActivityResult(path, attempt, error=error)
