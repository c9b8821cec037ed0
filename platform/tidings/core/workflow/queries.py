"""Queries: read-only handlers over an instance's state, answered without journaling anything.

A body is a function with no object fields, so it exposes state by registering handlers that
close over its variables: ``await ctx.on_query("items", lambda: list(items))``. Registering
journals nothing and takes no step path (adding a handler to a deployed workflow changes no
journal), so a replay registers the same handlers again as the body runs again; a later
registration of the same name replaces the earlier one.

A query (inbox kind ``query_handler``; ``query`` is the status query) names a handler and gives
its positional ``args`` (a JSON array, or none). The worker that owns the instance calls the
handler on the instance's live state, or on the state a replay rebuilt, and answers:

- ``answered`` with the handler's value (JSON text) and the instance's status;
- ``failed`` when the handler raised, returned something that cannot be stored as JSON, or ran
  longer than its bound (``QUERY_BUDGET_S``); the instance is untouched;
- ``rejected`` (nothing dead-lettered) when no handler of that name is registered or the args
  are no JSON array; ``not_found`` when the instance was never started.

Which state answers:

- running: the live state, as the last input left it;
- parked: the state the body had reached when it parked (the handlers stay registered; after a
  restart the replay parks at the same point and registers the same ones);
- ended: the final state. An ended instance keeps no frames, so its journal is replayed with
  the body run through its end (``replay_through_end``) and the handlers it registered answer
  with the values their variables held when it ended. The host replays on each such query
  (the cost of one replay); nothing of it is kept or stored.

A handler runs on the worker's decision thread. It is bounded by a trace hook that raises
``QueryTimeout`` in it once it has run ``QUERY_BUDGET_S`` (a loop in Python code ends there);
a handler stuck inside one C call (``time.sleep``, a huge ``sum``) cannot be interrupted and
delays the worker until it returns. A handler must read, never change, the state: a change is
journaled nowhere and lost on the next replay.

Pure: no I/O. ``register_step`` is part of ``WorkflowInstance`` (it uses its private fields),
as the handlers of ``steps.py`` are.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from tidings.core.limits import MAX_PAYLOAD_BYTES
from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.fibers import Fiber
from tidings.core.workflow.requests import StepRequest
from tidings.errors import DefinitionError, QueryTimeout, SchemaError, WorkflowQueryFailed, WorkflowQueryRejected

if TYPE_CHECKING:
    from tidings.core.workflow.interpreter import WorkflowInstance

QUERY_BUDGET_S: Final = 1.0
"""How long one handler may run before it is stopped (answered ``failed``)."""
MAX_ANSWER_BYTES: Final = MAX_PAYLOAD_BYTES
"""The largest answer sent (UTF-8 bytes of JSON), so a reply always fits one record."""
MAX_QUERY_NAME: Final = 200
"""The longest query name a body may register (the inbox's id limits hold for the request)."""

QueryHandler = Callable[..., Any]
"""``handler(*args)``: returns a JSON-storable value read from the body's variables."""


class QueryRegisterRequest(StepRequest[None]):
    """``ctx.on_query``."""

    __slots__ = ("name", "handler")

    def __init__(self, name: str, handler: QueryHandler) -> None:
        self.name = name
        self.handler = handler


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    """The answer to one query: ``answered`` (``result``: JSON text), ``failed`` (``error``,
    ``reason``) or ``rejected`` (``reason``)."""

    answer: str
    result: str | None = None
    error: StepError | None = None
    reason: str | None = None


def register_step(instance: WorkflowInstance, fiber: Fiber, request: QueryRegisterRequest) -> Any:
    """``await ctx.on_query(name, handler)``: remember the handler; journal nothing, take no path."""
    name, handler = request.name, request.handler
    problems = []
    if not isinstance(name, str) or not name or len(name) > MAX_QUERY_NAME:
        problems.append(f"a query's name must be a string of 1 to {MAX_QUERY_NAME} characters, got {name!r:.100}")
    if not callable(handler):
        problems.append(f"the handler of query {name!r:.100} is not callable: pass a function, e.g. lambda: items")
    elif inspect.iscoroutinefunction(handler):
        problems.append(f"the handler of query {name!r:.100} is async: a query reads state, it awaits nothing")
    if problems:
        return None, DefinitionError("on_query", problems)
    handlers = instance._queries
    if handlers is None:
        handlers = instance._queries = {}
    handlers[name] = handler
    return None, None


def read_args(data: bytes | None) -> list[Any] | str:
    """A query's args from the request's payload: a list, or why it is refused."""
    if data is None or data.strip() in (b"", b"null"):
        return []
    try:
        args = json.loads(data)
    except ValueError as exc:
        return f"the query's args are not JSON: {exc}"
    if not isinstance(args, list):
        return f"a query's args are a JSON array of positional arguments, got a {type(args).__name__}"
    return args


def run_query(instance: WorkflowInstance, name: str, args: list[Any], *,
              budget_s: float = QUERY_BUDGET_S, clock: Callable[[], float] = time.monotonic) -> QueryAnswer:
    """Call the instance's handler ``name`` with ``args``; never raises, changes nothing.

    ``clock`` measures the bound (the only time read here: it limits the handler, it decides
    nothing that is stored).
    """
    handlers = instance._queries or {}
    handler = handlers.get(name)
    if handler is None:
        known = ", ".join(sorted(handlers)[:20]) or "none"
        status = instance.status.value if instance.status is not None else "not started"
        return QueryAnswer("rejected", reason=(
            f"{instance.definition.name} {instance.instance_id!r} ({status}) has no query {name[:100]!r} "
            f"(registered: {known}); the body registers one with await ctx.on_query(name, handler)"))
    try:
        value = bounded(lambda: handler(*args), budget_s, clock)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()  # a coroutine nobody will run
            raise TypeError("the handler returned an awaitable; a query handler is a plain function")
    except QueryTimeout:
        error = StepError(ErrorKind.DEADLINE_EXCEEDED,
                          f"query {name!r} ran longer than {budget_s:g} s and was stopped; a handler only reads state")
        return QueryAnswer("failed", error=error, reason=error.message)
    except Exception as exc:  # noqa: BLE001 - the handler is user code: whatever it raises is its answer
        error = StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, f"query {name!r} raised: ")
        return QueryAnswer("failed", error=error, reason=error.message)
    try:
        text = instance.definition.codec.encode(value)
    except ValueError as exc:
        error = StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, f"the answer to query {name!r} cannot be stored: ")
        return QueryAnswer("failed", error=error, reason=error.message)
    size = len(text.encode())
    if size > MAX_ANSWER_BYTES:
        error = StepError(ErrorKind.NOT_RETRYABLE, f"the answer to query {name!r} is {size:,} bytes of JSON, "
                          f"more than {MAX_ANSWER_BYTES:,}: return less (e.g. a page of it, chosen by its args)")
        return QueryAnswer("failed", error=error, reason=error.message)
    return QueryAnswer("answered", result=text)


def caller_args(args: Any) -> list[Any] | None:
    """A caller's ``args`` as the list sent (None: none); the hosted handle and the runtime's alike.

    Raises:
        TypeError: ``args`` is no sequence of positional arguments (a string is none either).
    """
    if args is None:
        return None
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"a query's args are a list of positional arguments, not {args!r:.100}")
    return list(args)


def query_value(reply: Any, what: str, definition: Any, type: Any = None) -> Any:
    """The value a caller gets from a query's reply (``InboxReply`` or ``WorkflowReply``), read
    as ``type``; the hosted handle and ``WorkflowTestRuntime`` both read replies with it.

    Raises:
        WorkflowQueryRejected: ``rejected`` (no such handler, unusable args).
        WorkflowQueryFailed: ``failed`` (the handler raised or overran).
        SchemaError: Any other answer (an older worker), or a value that does not read as ``type``.
    """
    if reply.answer == "rejected":
        raise WorkflowQueryRejected(f"{what} was rejected: {reply.reason}")
    if reply.answer == "failed":
        raise WorkflowQueryFailed(f"{what} failed: {reply.reason}", reply.error)
    if reply.answer != "answered":
        raise SchemaError(f"the worker answered {reply.answer!r} to {what}; is it an older tidings? "
                          "Upgrade the workers first")
    try:
        return definition.codec.decode(reply.result or "null", type)
    except ValueError as exc:
        raise SchemaError(f"the answer to {what} does not read as {type!r}: {exc}") from exc


def bounded(call: Callable[[], Any], budget_s: float, clock: Callable[[], float] = time.monotonic) -> Any:
    """Run ``call`` on this thread; raise ``QueryTimeout`` inside it once it ran ``budget_s``.

    A trace hook (this thread's only, restored after) checks the time at each line and call of
    Python code; a thread could not be stopped, and a handler must read the body's variables
    on the thread that owns them. One C call that never returns is not interrupted.
    """
    deadline = clock() + budget_s
    previous = sys.gettrace()

    def hook(frame: FrameType, event: str, arg: Any) -> Any:
        if clock() > deadline:
            raise QueryTimeout()
        return hook

    sys.settrace(hook)
    try:
        return call()
    finally:
        sys.settrace(previous)
