"""The ``@coordination`` builder: the article's computation expression as a generator.

Inside a body decorated with ``@coordination``:

- ``x = yield c`` is ``let! x = c``: wait for the first result of ``c``;
- ``a, b = yield both(c1, c2)`` is ``let! a = c1 and! b = c2`` (any order);
- ``yield emit(v)`` is ``yield v``: emit ``v`` on the current event;
- ``yield emit_from(c)`` is ``yield! c``: emit every result of ``c`` until it finishes;
- ``return v`` emits ``v`` and finishes; reaching the end (or ``return None``) finishes with
  no result (``None`` can still be emitted with ``yield emit(None)``).

Semantics are the reference's: ``let!`` is ``take(1)`` then ``switch_map``, so the rest of the
body runs on the event that produced the value; ``yield``/``yield!`` append, so what follows
starts on the event where the emitted part finished.

A Python generator cannot be copied, yet a coordination must be an immutable value that can be
stepped from the same state twice. So a body is identified by its factory and the values sent
into it so far; a position is rebuilt by replaying those values into a fresh generator. Each
body invocation keeps the generator of the position reached last, so stepping forward, the
common case, costs one ``send`` and no replay. The body must therefore be deterministic: a
function of its arguments and of the values it receives.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Final, Generic, ParamSpec, TypeVar

from tidings.coordination.coordination import Coordination
from tidings.coordination.step import Step
from tidings.errors import DefinitionError, NondeterminismError

E = TypeVar("E")
T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Emit(Generic[T]):
    """The ``yield v`` instruction; make it with :func:`emit`."""

    value: T


@dataclass(frozen=True, slots=True)
class EmitFrom(Generic[E, T]):
    """The ``yield! c`` instruction; make it with :func:`emit_from`."""

    source: Coordination[E, T]


def emit(value: T) -> Emit[T]:
    """Emit ``value`` on the current event (``yield emit(v)`` is the article's ``yield v``).

    Args:
        value: The result to emit.
    """
    return Emit(value)


def emit_from(source: Coordination[E, T]) -> EmitFrom[E, T]:
    """Emit every result of ``source`` until it finishes (the article's ``yield! c``).

    The body resumes on the event that finished ``source``. In tail position (the last thing
    the body does) it costs nothing per level, so a body can recurse into itself this way for
    ever.

    Args:
        source: The coordination whose results to emit.
    """
    return EmitFrom(source)


@dataclass(frozen=True, slots=True)
class Await:
    """``let!``: resume the body with the first result of ``source``."""

    source: Coordination[Any, Any]


@dataclass(frozen=True, slots=True)
class Done:
    """The body returned ``value``."""

    value: Any


Instruction = Await | Emit[Any] | EmitFrom[Any, Any] | Done


@dataclass(frozen=True, slots=True)
class Flavor:
    """What distinguishes the coordination builder from the orchestration builder.

    Attributes:
        name: The decorator's name, for messages.
        classify: Turns a yielded object into an instruction, or raises ``TypeError``.
        resume: For the first result of an awaited coordination: ``(True, value)`` resumes
            the body with ``value``; ``(False, item)`` emits ``item`` and ends the body.
        finish: The results of ``return value``.
        tail_calls: Whether ``yield emit_from(c)`` followed by the end is just ``c``.
    """

    name: str
    classify: Callable[[object], Instruction]
    resume: Callable[[Any], tuple[bool, Any]]
    finish: Callable[[Any], list[Any]]
    tail_calls: bool


class _History:
    """The values sent into a body so far, newest first (a persistent list)."""

    # A plain class, not a dataclass: a generated repr or == would recurse down the list.
    __slots__ = ("value", "parent")

    def __init__(self, value: Any, parent: _History | None) -> None:
        self.value = value
        self.parent = parent


class _Runner:
    """Rebuilds one body invocation at any position; caches the generator last advanced."""

    __slots__ = ("_start", "_flavor", "_lock", "_cached")

    def __init__(self, start: Callable[[], Generator[Any, Any, Any]], flavor: Flavor) -> None:
        self._start = start
        self._flavor = flavor
        self._lock = threading.Lock()
        self._cached: tuple[Generator[Any, Any, Any], _History | None] | None = None

    @property
    def flavor(self) -> Flavor:
        return self._flavor

    def instruction_at(self, history: _History | None) -> Instruction:
        """Return what the body does after receiving the values of ``history``."""
        # Taking the generator out under the lock means two threads never share it; the loser
        # simply replays its own.
        with self._lock:
            cached, self._cached = self._cached, None
        if history is not None and cached is not None and cached[1] is history.parent:
            generator = cached[0]
            instruction = self._send(generator, history.value)
        else:
            generator = self._start()
            instruction = self._replay(generator, history)
        if not isinstance(instruction, Done):
            with self._lock:
                self._cached = (generator, history)
        return instruction

    def _replay(
        self, generator: Generator[Any, Any, Any], history: _History | None
    ) -> Instruction:
        values: list[Any] = []
        while history is not None:
            values.append(history.value)
            history = history.parent
        instruction = self._send(generator, None)
        for value in reversed(values):
            if isinstance(instruction, Done):
                raise NondeterminismError(
                    "a coordination body ended earlier when replayed than when it first ran;"
                    " bodies must be deterministic"
                )
            instruction = self._send(generator, value)
        return instruction

    def _send(self, generator: Generator[Any, Any, Any], value: Any) -> Instruction:
        try:
            yielded = generator.send(value)
        except StopIteration as stop:
            return Done(stop.value)
        return self._flavor.classify(yielded)


_UNKNOWN: Final = object()


class _Position:
    """A point in a body: the values received so far; its instruction is computed once."""

    __slots__ = ("_runner", "_history", "_instruction", "_after_none")

    def __init__(self, runner: _Runner, history: _History | None) -> None:
        self._runner = runner
        self._history = history
        self._instruction: Any = _UNKNOWN
        self._after_none: _Position | None = None

    @property
    def flavor(self) -> Flavor:
        return self._runner.flavor

    @property
    def instruction(self) -> Instruction:
        # Memoized: a position is a value, so computing it again would give the same answer.
        if self._instruction is _UNKNOWN:
            self._instruction = self._runner.instruction_at(self._history)
        return self._instruction  # type: ignore[no-any-return]

    def after(self, value: Any) -> _Position:
        """The position reached by sending ``value`` at this one."""
        if value is not None:
            return _Position(self._runner, _History(value, self._history))
        # Emits resume with None; keeping that successor lets every copy of this position
        # share one replay.
        if self._after_none is None:
            self._after_none = _Position(self._runner, _History(None, self._history))
        return self._after_none


class Body(Coordination[Any, Any]):
    """A running body: at ``position``, stepping ``pending`` (the awaited or emitted source).

    ``pending`` is ``None`` before the instruction at ``position`` has seen an event.
    """

    __slots__ = ("_position", "_pending")

    def __init__(self, position: _Position, pending: Coordination[Any, Any] | None) -> None:
        self._position = position
        self._pending = pending

    def __call__(self, event: Any) -> Step[Any, Any]:
        results: list[Any] = []
        position, pending = self._position, self._pending
        flavor = position.flavor
        # One loop runs every instruction this event reaches, so a body that emits many values
        # or binds many times on one event does not nest Python calls.
        while True:
            instruction = position.instruction
            if isinstance(instruction, Done):
                results.extend(flavor.finish(instruction.value))
                return Step(results, None)
            if isinstance(instruction, Emit):
                results.append(instruction.value)
                position, pending = position.after(None), None
                continue
            if isinstance(instruction, EmitFrom):
                source = instruction.source if pending is None else pending
                rest = position.after(None)
                if flavor.tail_calls and _ends_without_result(rest.instruction):
                    # yield! in tail position: the body is just the source now, so the body
                    # does not stay on the stack of every later step.
                    step = source(event)
                    return Step(results + step.results, step.next)
                step = source(event)
                results.extend(step.results)
                if step.next is not None:
                    return Step(results, Body(position, step.next))
                position, pending = rest, None
                continue
            source = instruction.source if pending is None else pending
            step = source(event)
            if step.results:
                # let! is take(1) then switch_map: the rest runs on this same event.
                resumed, value = flavor.resume(step.results[0])
                if not resumed:
                    results.append(value)
                    return Step(results, None)
                position, pending = position.after(value), None
                continue
            if step.next is None:
                # The awaited coordination finished without a value: the body can never resume.
                return Step(results, None)
            return Step(results, Body(position, step.next))


def _ends_without_result(instruction: Instruction) -> bool:
    return isinstance(instruction, Done) and instruction.value is None


def start_body(
    flavor: Flavor, fn: Callable[..., Generator[Any, Any, Any]], args: Any, kwargs: Any
) -> Body:
    """Return the coordination of a fresh invocation of the body ``fn(*args, **kwargs)``."""
    runner = _Runner(lambda: fn(*args, **kwargs), flavor)
    return Body(_Position(runner, None), None)


def check_body(flavor: Flavor, fn: Callable[..., Any]) -> None:
    """Reject, at declaration time, a function that cannot be a body.

    Raises:
        DefinitionError: If ``fn`` is not a generator function.
    """
    if not inspect.isgeneratorfunction(fn):
        raise DefinitionError(
            f"@{flavor.name} {getattr(fn, '__qualname__', fn)!r}",
            ["it must be a generator function: its steps are written `x = yield ...`"],
        )


def _classify(yielded: object) -> Instruction:
    if isinstance(yielded, Emit | EmitFrom):
        return yielded
    if isinstance(yielded, Coordination):
        return Await(yielded)
    raise TypeError(
        f"a @coordination body yielded {yielded!r}; yield a Coordination (let!), both(...) "
        "(let! ... and!), emit(value) (yield) or emit_from(coordination) (yield!)"
    )


COORDINATION: Final = Flavor(
    name="coordination",
    classify=_classify,
    resume=lambda item: (True, item),
    finish=lambda value: [] if value is None else [value],
    tail_calls=True,
)


def coordination(
    fn: Callable[P, Generator[Any, Any, T | None]],
) -> Callable[P, Coordination[Any, Any]]:
    """Turn a generator function into a factory of coordinations (the article's builder).

    Example::

        @coordination
        def b_then_a():
            b = yield event(lambda e: e.b)
            a = yield event(lambda e: e.a if e.a == b else None)
            return a + b

    Args:
        fn: The body: a generator function using the instructions listed in this module.

    Returns:
        A function with ``fn``'s parameters that returns a fresh coordination per call.

    Raises:
        DefinitionError: If ``fn`` is not a generator function.
    """
    check_body(COORDINATION, fn)

    @functools.wraps(fn)
    def factory(*args: P.args, **kwargs: P.kwargs) -> Coordination[Any, Any]:
        return start_body(COORDINATION, fn, args, kwargs)

    return factory
