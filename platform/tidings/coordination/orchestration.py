"""Orchestrations: coordinations that ask for actions when the stored events run out.

An orchestration is stepped with the stored events of one instance, ``Some(event)`` being the
event itself and ``None`` meaning "no more stored events". Its results are ``Continue(value)``
(progress) or ``Break(actions)`` (stop here: run these actions, whose outcomes will be stored as
new events, and step the orchestration again). Running actions is not its business: it only
returns what to run, so the whole business logic is pure and tested by feeding events.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, ParamSpec, TypeVar

from tidings.coordination.builder import Await, Flavor, Instruction, check_body, start_body
from tidings.coordination.coordination import Coordination, retn
from tidings.coordination.debounce import PASSTHROUGH, DebouncePolicy, Debounced
from tidings.coordination.operators import CONCAT, EXHAUST, MERGE, Flattened, Mapped, Switched
from tidings.coordination.parallel import zipped
from tidings.coordination.step import Step

E = TypeVar("E")
T = TypeVar("T")
U = TypeVar("U")
A = TypeVar("A")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Continue(Generic[T]):
    """A result of an orchestration: it made progress and produced ``value``."""

    value: T


@dataclass(frozen=True, slots=True)
class Break(Generic[A]):
    """A result of an orchestration: it cannot go on until ``actions`` have run.

    ``actions`` is stored as a tuple whatever sequence it is given as, so
    ``Break([a]) == Break((a,))``.
    """

    actions: tuple[A, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))


Outcome = Continue[T] | Break[A]


class Orchestration(Coordination[Any, Any], Generic[E, T, A]):
    """A coordination over ``E | None`` whose results are ``Continue(T)`` or ``Break(A...)``.

    ``Orchestration(c)`` views any coordination with such results as an orchestration. Its
    ``map`` and ``*_map`` operators see the ``Continue`` values and pass a ``Break`` on
    unchanged; operators that keep results as they are (``take``, ``filter``, ``take_until``
    ...) see the raw results and return orchestrations.
    """

    __slots__ = ("_inner",)

    def __init__(self, inner: Coordination[Any, Any]) -> None:
        self._inner: Coordination[Any, Any] = (
            inner._inner if isinstance(inner, Orchestration) else inner
        )

    def __call__(self, event: E | None) -> Step[E | None, Continue[T] | Break[A]]:
        step = self._inner(event)
        next_ = step.next
        if next_ is None or isinstance(next_, Orchestration):
            return step
        return Step(step.results, Orchestration(next_))

    def _like(self, node: Coordination[Any, Any]) -> Orchestration[E, T, A]:
        return Orchestration(node)

    def map(self, f: Callable[[T], U]) -> Orchestration[E, U, A]:  # type: ignore[override]
        """Transform every ``Continue`` value with ``f``; a ``Break`` passes unchanged."""
        return Orchestration(Mapped(self, functools.partial(_map_continue, f)))

    def switch_map(  # type: ignore[override]
        self, f: Callable[[T], Orchestration[E, U, A]]
    ) -> Orchestration[E, U, A]:
        """``switch_map`` over ``Continue`` values; a ``Break`` is emitted as it is."""
        return Orchestration(Switched(self, _bind(f), None))

    def merge_map(  # type: ignore[override]
        self, f: Callable[[T], Orchestration[E, U, A]]
    ) -> Orchestration[E, U, A]:
        """``merge_map`` over ``Continue`` values; a ``Break`` is emitted as it is."""
        return Orchestration(Flattened(self, _bind(f), MERGE))

    def concat_map(  # type: ignore[override]
        self, f: Callable[[T], Orchestration[E, U, A]]
    ) -> Orchestration[E, U, A]:
        """``concat_map`` over ``Continue`` values; a ``Break`` is emitted as it is."""
        return Orchestration(Flattened(self, _bind(f), CONCAT))

    def exhaust_map(  # type: ignore[override]
        self, f: Callable[[T], Orchestration[E, U, A]]
    ) -> Orchestration[E, U, A]:
        """``exhaust_map`` over ``Continue`` values; a ``Break`` is emitted as it is."""
        return Orchestration(Flattened(self, _bind(f), EXHAUST))

    def debounce(  # type: ignore[override]
        self, duration: Callable[[T], Orchestration[E, Any, A]]
    ) -> Orchestration[E, T, A]:
        """Debounce the ``Continue`` values; a ``Break`` of the source is emitted at once.

        ``duration(value)`` is an orchestration: its first ``Continue`` ends the quiet period,
        and its ``Break`` results (typically the action that starts a timer) are emitted. On
        ``None`` nothing is flushed: the pending value waits for the next run.
        """
        return Orchestration(Debounced(self, _checked_duration(duration), None, _DEBOUNCE))


def _map_continue(f: Callable[[Any], Any], item: Outcome[Any, Any]) -> Outcome[Any, Any]:
    return Continue(f(item.value)) if isinstance(item, Continue) else item


def _bind(f: Callable[[Any], Any]) -> Callable[[Outcome[Any, Any]], Coordination[Any, Any]]:
    def mapper(item: Outcome[Any, Any]) -> Coordination[Any, Any]:
        if isinstance(item, Break):
            return retn(item)
        return _expect_orchestration(f(item.value), "the mapper returned")

    return mapper


def _checked_duration(f: Callable[[Any], Any]) -> Callable[[Any], Coordination[Any, Any]]:
    def duration(value: Any) -> Coordination[Any, Any]:
        return _expect_orchestration(f(value), "the debounce duration returned")

    return duration


_DEBOUNCE: Final = DebouncePolicy(
    value_of=lambda item: item.value if isinstance(item, Continue) else PASSTHROUGH,
    ends_quiet=lambda item: isinstance(item, Continue),
)


def _expect_orchestration(value: object, what: str) -> Orchestration[Any, Any, Any]:
    if isinstance(value, Orchestration):
        return value
    raise TypeError(
        f"{what} {value!r}, not an Orchestration; lift a coordination with orchestrate(c) "
        "or orchestrate(c, actions=[...]), or view one whose results are Continue/Break "
        "with Orchestration(c)"
    )


class _Lifted(Coordination[Any, Any]):
    __slots__ = ("_source", "_actions")

    def __init__(self, source: Coordination[Any, Any], actions: tuple[Any, ...] | None) -> None:
        self._source = source
        self._actions = actions

    def __call__(self, event: Any) -> Step[Any, Any]:
        if event is None:
            # Still waiting when the stored events run out: ask for what would move it on.
            return Step([] if self._actions is None else [Break(self._actions)], None)
        step = self._source(event)
        return Step(
            [Continue(result) for result in step.results],
            None if step.next is None else _Lifted(step.next, self._actions),
        )


def orchestrate(
    source: Coordination[E, T], actions: Sequence[A] | None = None
) -> Orchestration[E, T, A]:
    """Lift a coordination into an orchestration.

    Each result becomes ``Continue(result)``. On ``None`` (no more stored events) the
    orchestration finishes: with no result, or, when ``actions`` is given, with
    ``Break(actions)``: the actions that produce the events it is waiting for.

    Args:
        source: The coordination over the (non-``None``) events.
        actions: The actions to request when still waiting at the end of stored events.
    """
    return Orchestration(_Lifted(source, None if actions is None else tuple(actions)))


def all_orchestrations(coordinations: Sequence[Coordination[Any, Any]]) -> bool:
    """Whether every coordination is an orchestration (``zip``/``both`` then give one).

    Raises:
        TypeError: If some are orchestrations and some are not.
    """
    flags = [isinstance(c, Orchestration) for c in coordinations]
    if all(flags):
        return True
    if any(flags):
        raise TypeError(
            "cannot combine orchestrations with plain coordinations; lift the coordinations "
            "with orchestrate(c) or orchestrate(c, actions=[...])"
        )
    return False


def _combine_outcomes(items: tuple[Outcome[Any, Any], ...]) -> Outcome[Any, Any]:
    if all(isinstance(item, Continue) for item in items):
        return Continue(tuple(item.value for item in items))  # type: ignore[union-attr]
    return Break(tuple(action for item in items if isinstance(item, Break) for action in item.actions))


def _keep_actions(buffers: tuple[tuple[Any, ...], ...]) -> list[Any]:
    # The reference dropped a waiting side's Break when another side finished without a
    # result; the runtime must hear about every action, so they are gathered in one Break.
    actions = [
        action
        for buffer in buffers
        for item in buffer
        if isinstance(item, Break)
        for action in item.actions
    ]
    return [Break(tuple(actions))] if actions else []


def zip_orchestrations(
    orchestrations: Sequence[Coordination[Any, Any]],
) -> Orchestration[Any, tuple[Any, ...], Any]:
    """Zip orchestrations: ``Continue`` of a tuple, or one ``Break`` of every side's actions.

    Args:
        orchestrations: The sides, all orchestrations.
    """
    return Orchestration(
        zipped(tuple(orchestrations), combine=_combine_outcomes, leftovers=_keep_actions)
    )


# -- the builder -------------------------------------------------------------------------------


def _classify(yielded: object) -> Instruction:
    if isinstance(yielded, Orchestration):
        return Await(yielded)
    if isinstance(yielded, Coordination):
        raise TypeError(
            f"an @orchestration body yielded the coordination {yielded!r}; lift it with "
            "orchestrate(c) or orchestrate(c, actions=[...])"
        )
    raise TypeError(
        f"an @orchestration body yielded {yielded!r}; yield an Orchestration (let!) or "
        "both(o1, o2, ...) (let! ... and!)"
    )


def _resume(item: Any) -> tuple[bool, Any]:
    if isinstance(item, Continue):
        return True, item.value
    # A Break ends the rest of the body: nothing after it can run before the actions have.
    return False, item


ORCHESTRATION: Final = Flavor(
    name="orchestration",
    classify=_classify,
    resume=_resume,
    finish=lambda value: [Continue(value)],
    tail_calls=False,
)


def orchestration(
    fn: Callable[P, Generator[Any, Any, T]],
) -> Callable[P, Orchestration[Any, T, Any]]:
    """Turn a generator function into a factory of orchestrations.

    ``x = yield o`` waits for the first result of the orchestration ``o``: a ``Continue``
    resumes the body with its value, a ``Break`` is emitted and ends the body.
    ``a, b = yield both(o1, o2)`` waits for both in any order. ``return v`` emits
    ``Continue(v)`` (also for ``None``: reaching the end says the orchestration is complete).

    Args:
        fn: The body, a generator function.

    Returns:
        A function with ``fn``'s parameters that returns a fresh orchestration per call.

    Raises:
        DefinitionError: If ``fn`` is not a generator function.
    """
    check_body(ORCHESTRATION, fn)

    @functools.wraps(fn)
    def factory(*args: P.args, **kwargs: P.kwargs) -> Orchestration[Any, T, Any]:
        return Orchestration(start_body(ORCHESTRATION, fn, args, kwargs))

    return factory
