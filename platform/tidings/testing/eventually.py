"""Poll until a condition holds, instead of sleeping in tests.

``assert_eventually(lambda: len(seen) == 3, message="three outcomes")`` calls the predicate until
it returns a truthy value (which is returned) or the timeout passes (AssertionError). A predicate
may also raise AssertionError while the condition does not hold yet.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")

_RETRY_ON: tuple[type[BaseException], ...] = (AssertionError,)


def assert_eventually(
    predicate: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str | None = None,
    retry_on: tuple[type[BaseException], ...] = _RETRY_ON,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """Call ``predicate`` until it returns a truthy value, then return that value.

    The predicate is always called at least once, and once more at the deadline.

    Args:
        predicate: The condition; falsy results and ``retry_on`` exceptions mean "not yet".
        timeout: Seconds to keep trying.
        interval: Seconds between attempts.
        message: What was awaited, for the failure message.
        retry_on: Exceptions that mean "not yet"; any other exception propagates at once.
        clock: A monotonic clock (tests of this helper pass a fake one).
        sleep: Sleeps between attempts (tests of this helper pass a fake one).

    Returns:
        The predicate's first truthy result.

    Raises:
        AssertionError: The condition did not hold within ``timeout``; the last exception the
            predicate raised, if any, is the ``__cause__``.
    """
    deadline = clock() + timeout
    attempts = 0
    while True:
        attempts += 1
        error: BaseException | None = None
        result: object = None
        try:
            value = predicate()
        except retry_on as exc:
            error = exc
        else:
            if value:
                return value
            result = value
        now = clock()
        if now >= deadline:
            raise AssertionError(_failure(message, timeout, attempts, result, error)) from error
        sleep(min(interval, deadline - now))


@overload
async def assert_eventually_async(
    predicate: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str | None = ...,
    retry_on: tuple[type[BaseException], ...] = ...,
    clock: Callable[[], float] = ...,
) -> T: ...


@overload
async def assert_eventually_async(
    predicate: Callable[[], T],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str | None = ...,
    retry_on: tuple[type[BaseException], ...] = ...,
    clock: Callable[[], float] = ...,
) -> T: ...


async def assert_eventually_async(
    predicate: Callable[[], Awaitable[T]] | Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str | None = None,
    retry_on: tuple[type[BaseException], ...] = _RETRY_ON,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Await ``predicate`` until it returns a truthy value; the asyncio twin of the above.

    Args:
        predicate: A sync or async condition; falsy results and ``retry_on`` exceptions mean
            "not yet".
        timeout: Seconds to keep trying.
        interval: Seconds between attempts (``asyncio.sleep``, so the loop keeps running).
        message: What was awaited, for the failure message.
        retry_on: Exceptions that mean "not yet"; any other exception propagates at once.
        clock: A monotonic clock.

    Returns:
        The predicate's first truthy result.

    Raises:
        AssertionError: The condition did not hold within ``timeout``.
    """
    deadline = clock() + timeout
    attempts = 0
    while True:
        attempts += 1
        error: BaseException | None = None
        result: object = None
        try:
            outcome = predicate()
            value = await outcome if inspect.isawaitable(outcome) else outcome
        except retry_on as exc:
            error = exc
        else:
            if value:
                return value
            result = value
        now = clock()
        if now >= deadline:
            raise AssertionError(_failure(message, timeout, attempts, result, error)) from error
        await asyncio.sleep(min(interval, deadline - now))


def _failure(
    message: str | None,
    timeout: float,
    attempts: int,
    result: object,
    error: BaseException | None,
) -> str:
    last = f"last error: {error!r}" if error is not None else f"last result: {result!r}"
    what = message or "condition"
    return f"{what} did not hold within {timeout:g} s ({attempts} attempts; {last})"
