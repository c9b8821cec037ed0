"""``WorkflowFlow``: async stages that start one workflow per element of a stream (SPEC §7).

``WorkflowFlow.run(handle, id_of, parallelism, timeout)`` returns a stage: a function
from an async iterable of inputs to an async iterator of ``(id, outcome)``::

    outcomes = WorkflowFlow.run(enrich, lambda order: f"enrich-{order}", 8, timeout=300)
    async for instance_id, outcome in outcomes(orders()):
        ...

The stage works like a ``mapAsync``: it keeps at most ``parallelism`` elements between
their start and the moment their outcome is yielded, pulls the next element only when
there is room (so a slow consumer slows the starts), and yields in input order. An
outcome is yielded as soon as it and every earlier one are known, even while the source
has nothing new. The stage is not durable: if the process stops, the workflows resume
and the stage does not, so the source must replay from an offset of its own (commit only
after an element's outcome was yielded) and ``id_of`` must compute the id from the
element, so that a replayed element reaches the instance it started before (a second
start of an id stores nothing).

The handle is anything with the ``WorkflowHandle`` shape: ``await start(id, input)`` and
``await result(id, timeout) -> Outcome`` (``RunsWorkflows``).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from ....core.workflow import Outcome

T = TypeVar("T")
R = TypeVar("R")


class StartsWorkflows(Protocol):
    """What ``WorkflowFlow.start`` needs of a handle: an idempotent, durable ``start``."""

    async def start(self, instance_id: str, input: Any = None) -> None: ...


class RunsWorkflows(StartsWorkflows, Protocol):
    """What ``WorkflowFlow.run`` needs of a handle: ``start`` and ``result``."""

    async def result(self, instance_id: str, timeout: float | None = None) -> Outcome: ...


class WorkflowStage(Generic[T, R]):
    """A stage: call it with an async iterable of inputs to get an async iterator of results.

    Each call is a fresh run over its source; the stage itself holds no state between calls.
    """

    def __init__(self, parallelism: int, work: Callable[[T], Awaitable[R]]) -> None:
        self.parallelism = parallelism
        self._work = work

    def __call__(self, source: AsyncIterable[T]) -> AsyncIterator[R]:
        return _ordered(source, self.parallelism, self._work)


class WorkflowFlow:
    """Stages that start workflows from a stream; see the module docstring."""

    @staticmethod
    def run(
        handle: RunsWorkflows,
        id_of: Callable[[T], str],
        parallelism: int,
        timeout: float | timedelta,
    ) -> WorkflowStage[T, tuple[str, Outcome]]:
        """Return the stage that starts one workflow per element and yields ``(id, outcome)``.

        Outcomes come in input order; ``Faulted`` and ``Cancelled`` are yielded like
        ``Finished``. At most ``parallelism`` elements are between their start and their
        yielded outcome. That does not bound other instances of the same workflow: ones
        resumed after a restart, or ones whose timeout failed an earlier stage, run anyway.

        The stage raises ``TimeoutError`` when an element's workflow has not ended within
        ``timeout`` seconds of its start; the workflow itself carries on. Any other error of
        ``id_of``, ``start`` or ``result`` (e.g. ``SchemaError``, ``BrokerError``) fails the
        stage too. When the stage fails or its consumer stops early, the waits still running
        are cancelled; the workflows they started are not.

        Raises:
            ValueError: ``parallelism`` is not an int of at least 1, ``timeout`` is not a
                positive finite number of seconds (or timedelta), ``id_of`` is not callable,
                or ``handle`` has no ``start``/``result``.
        """
        seconds = _check(handle, id_of, parallelism, ("start", "result"), timeout)

        async def one(instance_id: str, element: T) -> tuple[str, Outcome]:
            await handle.start(instance_id, element)
            try:
                # The handle's own deadline answers with its reason (e.g. "it is parked");
                # wait_for bounds a handle that would not honour the timeout.
                outcome = await asyncio.wait_for(handle.result(instance_id, seconds), seconds)
            except TimeoutError as exc:
                raise TimeoutError(
                    f"WorkflowFlow: workflow {instance_id!r} did not end within {seconds} s of its start; "
                    f"the stage fails and the workflow carries on ({exc or 'no outcome'})"
                ) from exc
            return instance_id, outcome

        def work(element: T) -> Awaitable[tuple[str, Outcome]]:
            return one(id_of(element), element)

        return WorkflowStage(parallelism, work)

    @staticmethod
    def start(
        handle: StartsWorkflows,
        id_of: Callable[[T], str],
        parallelism: int,
    ) -> WorkflowStage[T, str]:
        """Return the stage that starts one workflow per element and yields its id once stored.

        Ids come in input order, each once its start request is in the workflow's inbox
        (durable; a second start of the same id stores nothing). At most ``parallelism``
        starts are in flight. It does not wait for the workflows.

        Raises:
            ValueError: as for ``run`` (without the timeout).
        """
        _check(handle, id_of, parallelism, ("start",), None)

        async def one(instance_id: str, element: T) -> str:
            await handle.start(instance_id, element)
            return instance_id

        def work(element: T) -> Awaitable[str]:
            return one(id_of(element), element)

        return WorkflowStage(parallelism, work)


def _check(
    handle: object, id_of: object, parallelism: object, methods: tuple[str, ...], timeout: object
) -> float:
    """Refuse invalid arguments with every reason at once; return the timeout in seconds."""
    reasons = []
    missing = [name for name in methods if not callable(getattr(handle, name, None))]
    if missing:
        reasons.append(f"handle must be a workflow handle with {' and '.join(methods)}; {handle!r} has no "
                       f"{', '.join(missing)}")
    if not callable(id_of):
        reasons.append(f"id_of must be callable: id_of(element) -> str, not {id_of!r}")
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        reasons.append(f"parallelism must be an int of at least 1, not {parallelism!r}")
    seconds = math.inf
    if "result" in methods:
        if isinstance(timeout, timedelta):
            seconds = timeout.total_seconds()
        elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            seconds = float(timeout)
        else:
            seconds = math.nan
        if not (0 < seconds < math.inf):
            reasons.append(f"timeout must be a positive finite number of seconds or a timedelta, not {timeout!r}")
    if reasons:
        raise ValueError("WorkflowFlow: " + "; ".join(reasons))
    return seconds


async def _ordered(
    source: AsyncIterable[T], parallelism: int, work: Callable[[T], Awaitable[R]]
) -> AsyncIterator[R]:
    """Run ``work`` on each element, at most ``parallelism`` unyielded at once; yield in order.

    One loop waits for whichever comes first: the next element (pulled only when there is
    room) or any running element's end. A failed element fails the stage at once, not when
    it reaches the head, so a timeout is reported when it happens.
    """
    elements = aiter(source)
    running: deque[asyncio.Future[R]] = deque()
    pull: asyncio.Future[T] | None = None
    exhausted = False
    try:
        while True:
            if pull is None and not exhausted and len(running) < parallelism:
                pull = asyncio.ensure_future(anext(elements))
            if pull is None and not running:
                return
            waiting: set[asyncio.Future[Any]] = set(running)
            if pull is not None:
                waiting.add(pull)
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in running:
                if task.done() and task.exception() is not None:
                    task.result()  # raises it
            if pull is not None and pull.done():
                finished, pull = pull, None
                try:
                    element = finished.result()
                except StopAsyncIteration:
                    exhausted = True
                else:
                    running.append(asyncio.ensure_future(work(element)))
            while running and running[0].done():
                yield running.popleft().result()
    finally:
        leftovers: list[asyncio.Future[Any]] = list(running)
        if pull is not None:
            leftovers.append(pull)
        for task in leftovers:
            task.cancel()
        # Let the cancelled waits unwind (close their readers) before the stage ends.
        await asyncio.gather(*leftovers, return_exceptions=True)
