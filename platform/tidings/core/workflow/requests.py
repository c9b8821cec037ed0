"""Step requests: the awaitables ``ctx`` returns, and the ``subroutine`` decorator.

Awaiting a request yields the request itself to whoever drives the body's coroutine. The
interpreter drives bodies with ``coro.send()``, so it receives every request, decides it
(from the journal or live) and sends the result back, or throws ``WorkflowStepFailed``
in. A request is plain data: creating one does nothing, so the body's awaits are the only
points where the interpreter acts, and a request that is never awaited takes no step.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, Generic, ParamSpec, TypeVar

from tidings.core.workflow.retry import RetryPolicy

T = TypeVar("T")
P = ParamSpec("P")


class StepRequest(Generic[T]):
    """A request the interpreter decides; ``await`` it inside a workflow body."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, Any, T]:
        # The interpreter sends the step's value back in (or throws its failure).
        return (yield self)


class ActivityRequest(StepRequest[T]):
    """``ctx.activity``: call ``fn`` outside the interpreter under ``policy``."""

    __slots__ = ("name", "policy", "fn", "type")

    def __init__(self, name: str, policy: RetryPolicy, fn: Callable[..., Any], type: Any) -> None:
        self.name = name
        self.policy = policy
        self.fn = fn
        self.type = type


class TimerRequest(StepRequest[None]):
    """``ctx.sleep`` (``delay_ms``) or ``ctx.until`` (``due_ms``)."""

    __slots__ = ("delay_ms", "due_ms")

    def __init__(self, *, delay_ms: int | None = None, due_ms: int | None = None) -> None:
        self.delay_ms = delay_ms
        self.due_ms = due_ms


class NowRequest(StepRequest[Any]):
    """``ctx.now``."""

    __slots__ = ()


class GuidRequest(StepRequest[Any]):
    """``ctx.new_guid``."""

    __slots__ = ()


class RandomRequest(StepRequest[float]):
    """``ctx.random``."""

    __slots__ = ()


class SignalRequest(StepRequest[T]):
    """``ctx.wait_signal`` (``timeout_ms`` None) or ``ctx.wait_signal_for``."""

    __slots__ = ("name", "type", "timeout_ms")

    def __init__(self, name: str, type: Any, timeout_ms: int | None) -> None:
        self.name = name
        self.type = type
        self.timeout_ms = timeout_ms


class VersionRequest(StepRequest[int]):
    """``ctx.version``."""

    __slots__ = ("change_id", "latest")

    def __init__(self, change_id: str, latest: int) -> None:
        self.change_id = change_id
        self.latest = latest


class AllRequest(StepRequest[Any]):
    """``ctx.all`` / ``ctx.both`` / ``ctx.all_at_most``: every branch's result, in branch order.

    ``branches`` are awaitables, or with ``body`` set they are items and each branch is
    ``body(item)``; at most ``limit`` branches run at once (None: all).
    """

    __slots__ = ("branches", "body", "limit", "as_tuple")

    def __init__(
        self,
        branches: Sequence[Any],
        *,
        body: Callable[[Any], Awaitable[Any]] | None = None,
        limit: int | None = None,
        as_tuple: bool = False,
    ) -> None:
        self.branches = branches
        self.body = body
        self.limit = limit
        self.as_tuple = as_tuple


class RaceRequest(StepRequest[T]):
    """``ctx.race``: the first branch to finish decides."""

    __slots__ = ("branches",)

    def __init__(self, branches: Sequence[Awaitable[T]]) -> None:
        self.branches = branches


class CallRequest(StepRequest[T]):
    """A call of a ``@subroutine``: the interpreter runs it as a frame of its own."""

    __slots__ = ("fn", "args", "kwargs")

    def __init__(self, fn: Callable[..., Coroutine[Any, Any, T]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def start(self) -> Coroutine[Any, Any, T]:
        """Create the subroutine's coroutine."""
        return self.fn(*self.args, **self.kwargs)


def subroutine(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, StepRequest[T]]:
    """Let a workflow helper recurse or loop to any depth at a constant cost per step.

    Awaiting a plain ``async def`` helper nests its coroutine inside the caller's, so every
    resume walks the whole chain and CPython stops near depth 1,000. A call of a decorated
    helper instead returns a request; the interpreter starts the helper as a frame of its
    own on the branch's frame stack and resumes only the innermost frame::

        @subroutine
        async def wait_until_shipped(ctx: WorkflowContext, checks: int) -> int:
            if await ctx.activity("check", Retry.times(3), is_shipped):
                return checks
            await ctx.sleep(timedelta(minutes=5))
            return await wait_until_shipped(ctx, checks + 1)

    A decorated call may also be a branch of ``ctx.all``/``ctx.race``/``ctx.both``. Outside
    a workflow body the call is inert (nothing runs until the interpreter takes it).

    Args:
        fn: An ``async def`` helper that awaits only ``ctx`` steps and subroutine calls.

    Returns:
        A function with ``fn``'s signature whose call is a ``CallRequest``.
    """

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> StepRequest[T]:
        return CallRequest(fn, args, kwargs)

    call.__tidings_subroutine__ = fn  # type: ignore[attr-defined]
    return call
