"""Running one activity attempt for the workflow agent: when, where, and for how long.

An async ``fn`` runs as a task on the loop; a sync one in the agent's thread pool (a
blocking call must not stall the loop). The attempt starts at ``not_before`` and is given up
at ``timeout_at``; a sync call's thread cannot be killed, so its late result is dropped.
Every thread here is a daemon: a stopping worker abandons the attempts that outlast its
grace instead of waiting for them (docs/operations.md, "Stopping").

Most attempts are a sync call due now with no timeout. ``ThreadedAttempts`` runs those
on its own threads without an asyncio task or any future per attempt: the thread appends
the result to a queue and wakes the loop once for however many results arrived meanwhile,
so a busy worker pays one loop wake-up per batch of results instead of several hand-offs
(and a ``Condition`` or two) per attempt.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

from ....core.workflow import ActivityResult, Attempt, RunActivity
from ....core.workflow.attempt_ends import attempt_raised


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
    except asyncio.TimeoutError:  # given up at timeout_at, or the function raised TimeoutError
        return ActivityResult(effect.path, effect.attempt, timed_out=True)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the attempt failed; the policy decides
        return attempt_raised(effect.path, effect.attempt, exc)
    return ActivityResult(effect.path, effect.attempt, value=value)


async def _settled(running: Awaitable[Any]) -> Any:
    value = await running
    # A sync function may return an awaitable (``lambda a: client.call(...)``): await it too.
    while inspect.isawaitable(value):
        value = await value
    return value


T = TypeVar("T")


class DaemonPool(concurrent.futures.Executor):
    """A thread pool for sync attempts whose threads never hold the process at exit.

    ``ThreadPoolExecutor`` joins its threads when the interpreter exits, so a sync activity
    sleeping 15 s held a stopping worker for 15 s after its grace had given the attempt up.
    These threads are daemons, started on demand up to ``threads``.

    Args:
        threads: Most calls running at once.
        name: The threads' name prefix.
    """

    def __init__(self, threads: int, name: str) -> None:
        self._max = threads
        self._name = name
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue())
        self._threads: list[threading.Thread] = []
        self._idle = 0  # as ThreadedAttempts._idle: threads waiting, less those promised
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        """Queue ``fn(*args, **kwargs)``; return its future."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("the activity pool is shut down: the worker is stopping")
            self._queue.put((future, functools.partial(fn, *args, **kwargs)))
            if self._idle > 0:
                self._idle -= 1
                return future
            if len(self._threads) >= self._max:
                return future
            thread = threading.Thread(target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True)
            self._threads.append(thread)
        thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Let the threads end after their current call; ``cancel_futures`` drops queued ones."""
        with self._lock:
            self._shut = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, call = item
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as exc:  # noqa: BLE001 - the caller's future carries it
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future, call  # a finished call's arguments are not kept alive
            with self._lock:
                self._idle += 1


def runs_threaded(effect: RunActivity, now_s: float) -> bool:
    """Whether ``ThreadedAttempts`` can run ``effect``: a sync call, due now, no timeout."""
    return (
        effect.timeout_at is None
        and effect.not_before / 1000 <= now_s
        and not inspect.iscoroutinefunction(effect.fn)
    )


class ThreadedAttempts(Generic[T]):
    """Runs sync attempts on its own threads; hands their results to the loop in batches.

    Its threads take attempts from one ``SimpleQueue``: unlike a ``ThreadPoolExecutor``
    there is no ``concurrent.futures.Future`` (and its ``Condition``) per attempt. Threads
    start on demand, up to ``threads``.

    Args:
        threads: Most attempts running at once.
        loop: The agent's event loop.
        deliver: Called on the loop with ``(token, effect, attempt, result)`` tuples in the
            order the attempts ended. ``result`` is an ``ActivityResult``, or an awaitable
            the function returned (``lambda a: client.call(...)``), which the caller awaits.
        name: The threads' name prefix.
    """

    def __init__(
        self,
        threads: int,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[list[tuple[T, RunActivity, Attempt, Any]]], None],
        name: str = "tidings-activity",
    ) -> None:
        self._max = threads
        self._loop = loop
        self._deliver = deliver
        self._name = name
        self._queue: queue.SimpleQueue[_Queued[T] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # Threads that finished an attempt and wait for the next, less those already
        # promised to an attempt submitted since: a submit takes one or starts a thread
        # (ThreadPoolExecutor's rule), so two attempts never count on one idle thread.
        self._idle = 0
        self._lock = threading.Lock()
        self._ended: collections.deque[tuple[T, RunActivity, Attempt, Any]] = collections.deque()
        self._woken = False

    def submit(self, token: T, effect: RunActivity, attempt: Attempt) -> Skippable:
        """Queue the attempt; ``cancel()`` the returned handle to skip it if it has not
        started (a started call runs to its end; its result is then stale)."""
        queued = _Queued(token, effect, attempt)
        self._queue.put(queued)
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                return queued
            if len(self._threads) >= self._max:
                return queued  # it waits for the first thread that ends its attempt
        thread = threading.Thread(target=self._serve, name=f"{self._name}_{len(self._threads)}",
                                  daemon=True)
        self._threads.append(thread)
        thread.start()
        return queued

    def close(self) -> None:
        """Let every thread end after its current attempt; queued attempts are dropped."""
        for _ in self._threads:
            self._queue.put(None)

    def _serve(self) -> None:
        while True:
            queued = self._queue.get()
            if queued is None:
                return
            if not queued.skipped:
                self._run(queued.token, queued.effect, queued.attempt)
            with self._lock:
                self._idle += 1

    def _run(self, token: T, effect: RunActivity, attempt: Attempt) -> None:
        try:
            value = effect.fn(attempt)
        except Exception as exc:  # noqa: BLE001 - the attempt failed; the policy decides
            result: Any = attempt_raised(effect.path, effect.attempt, exc)
        else:
            result = value if inspect.isawaitable(value) else ActivityResult(
                effect.path, effect.attempt, value=value)
        self._ended.append((token, effect, attempt, result))
        if not self._woken:
            self._woken = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop closed: the worker is stopping
                pass

    def _drain(self) -> None:
        # Cleared first: a result appended from here on wakes the loop again.
        self._woken = False
        ended = []
        while self._ended:
            ended.append(self._ended.popleft())
        if ended:
            self._deliver(ended)


class Skippable(Protocol):
    """What cancels a queued attempt before it starts."""

    def cancel(self) -> Any:
        ...


class _Queued(Generic[T]):
    __slots__ = ("token", "effect", "attempt", "skipped")

    def __init__(self, token: T, effect: RunActivity, attempt: Attempt) -> None:
        self.token = token
        self.effect = effect
        self.attempt = attempt
        self.skipped = False

    def cancel(self) -> bool:
        self.skipped = True
        return True


async def settle_returned(effect: RunActivity, returned: Awaitable[Any]) -> ActivityResult:
    """Await what a sync activity function returned; return how the attempt ended."""
    try:
        value = await _settled(returned)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the attempt failed; the policy decides
        return attempt_raised(effect.path, effect.attempt, exc)
    return ActivityResult(effect.path, effect.attempt, value=value)
