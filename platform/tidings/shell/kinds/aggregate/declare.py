"""``app.aggregate(...)`` validated: the definition frozen, its topics named, its handle built.

Declaring does no I/O. ``declare_aggregate`` lists every problem at once and returns the
handle; ``App.aggregate`` registers it with ``app.host(handle)``, as every kind is.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

from ....codec.payloads import type_registry
from ....core.aggregate import DEFAULT_COMMAND_RETENTION, AggregateDefinition, Decision
from ....core.workflow.retry import Retry
from ....errors import DefinitionError
from ...runtime.context import KindContext
from ...runtime.topics import deadletter_topic, topic_name
from .agent import Admit, AggregateTopics
from .handle import AggregateHandle

C = TypeVar("C")
E = TypeVar("E")
S = TypeVar("S")


def declare_aggregate(
    context: KindContext,
    name: str,
    initial: S,
    decide: Callable[[C, S], Decision],
    fold: Callable[[E, S], S],
    *,
    command: Any,
    event: Any,
    cache_size: int = 100_000,
    command_retention: timedelta = DEFAULT_COMMAND_RETENTION,
    write_buffer_bytes: int | None = None,
    admit: Admit | None = None,
) -> AggregateHandle[C, E, S]:
    """Validate an aggregate of ``context`` and return its handle (see ``App.aggregate``).

    Raises:
        DefinitionError: listing every problem with the definition.
    """
    reasons: list[str] = []
    if not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 1:
        reasons.append(f"cache_size must be a positive int, not {cache_size!r}")
    if any(declared.name == name for declared in context.declared("aggregate")):
        reasons.append(f"an aggregate named {name!r} is already declared")
    shortest = max(Retry.command.deadline or timedelta(0), timedelta(seconds=context.command_timeout))
    if isinstance(command_retention, timedelta) and command_retention < shortest:
        reasons.append(f"command_retention {command_retention} is shorter than the resends the "
                       f"platform makes itself ({shortest}: Retry.command and command_timeout); "
                       f"a resend after it would be applied again")
    registries = []
    for what, types_ in (("command", command), ("event", event)):
        try:
            registries.append(type_registry(_models(types_)))
        except DefinitionError as exc:
            reasons.extend(f"{what}=: {reason}" for reason in exc.reasons)
            registries.append({})
        except TypeError as exc:
            reasons.append(f"{what}=: {exc}")
            registries.append({})
    try:
        commands, events = registries
        definition = AggregateDefinition(name, initial, decide, fold, commands, events,
                                         command_retention)
    except DefinitionError as exc:
        reasons.extend(exc.reasons)
    if reasons:
        raise DefinitionError(f"aggregate {name!r}", reasons)
    topics = AggregateTopics(
        commands=topic_name(context.name, "aggregate", name, "commands"),
        events=topic_name(context.name, "aggregate", name, "events"),
        deadletter=deadletter_topic(context.name),
        verdicts=topic_name(context.name, "aggregate", name, "verdicts"),
    )
    return AggregateHandle(context, definition, topics, cache_size, write_buffer_bytes, admit)


def _models(declared: Any) -> list[type]:
    """Flatten ``Model``, ``A | B``, ``Union[A, B]`` or an iterable of models to a list."""
    if isinstance(declared, types.UnionType) or typing.get_origin(declared) is typing.Union:
        return [model for arg in typing.get_args(declared) for model in _models(arg)]
    if isinstance(declared, type):
        return [declared]
    if isinstance(declared, Iterable) and not isinstance(declared, (str, bytes)):
        return [model for item in declared for model in _models(item)]
    raise TypeError(f"expected a pydantic model class, a union or a list of them, not {declared!r}")
