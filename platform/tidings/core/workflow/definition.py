"""``WorkflowDefinition``: a named, validated workflow body, built at declaration time."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidings.core.workflow.context import WorkflowContext
from tidings.core.workflow.updates import UpdateDeclaration
from tidings.core.workflow.values import ValueCodec
from tidings.errors import DefinitionError

WorkflowBody = Callable[[WorkflowContext, Any], Coroutine[Any, Any, Any]]
"""``async def body(ctx, input) -> result``."""


@dataclass(frozen=True, slots=True, eq=False)
class WorkflowDefinition:
    """A workflow: its stored name, its body, and the types its input and result are read as.

    Build one with ``define_workflow``. The name is a persistent contract: it is part of
    every topic name and idempotency key.
    """

    name: str
    body: WorkflowBody
    input_type: Any = None
    result_type: Any = None
    codec: ValueCodec = field(default_factory=ValueCodec, repr=False)
    updates: Mapping[str, UpdateDeclaration] = field(default_factory=dict, repr=False)
    """The updates it takes, by name (``core/workflow/updates.py``); any other is rejected."""


UpdatesOption = Iterable[str | UpdateDeclaration] | Mapping[str, Any]
"""``updates=``: names, ``UpdateDeclaration``s, or a mapping of name to payload type."""


def update_declarations(workflow: str, updates: UpdatesOption | None) -> dict[str, UpdateDeclaration]:
    """Read the ``updates=`` option into declarations by name.

    Raises:
        DefinitionError: A name is not a non-empty string, or one is declared twice.
    """
    if updates is None:
        return {}
    items: list[UpdateDeclaration] = []
    if isinstance(updates, Mapping):
        items = [value if isinstance(value, UpdateDeclaration) else UpdateDeclaration(str(name), value)
                 for name, value in updates.items()]
    else:
        for item in updates:
            items.append(item if isinstance(item, UpdateDeclaration) else UpdateDeclaration(item))
    problems: list[str] = []
    declared: dict[str, UpdateDeclaration] = {}
    for item in items:
        if not isinstance(item.name, str) or not item.name:
            problems.append(f"an update's name must be a non-empty string, got {item.name!r}")
        elif item.name in declared:
            problems.append(f"update {item.name!r} is declared twice")
        elif item.validator is not None and not callable(item.validator):
            problems.append(f"the validator of update {item.name!r} is not callable")
        else:
            declared[item.name] = item
    if problems:
        raise DefinitionError(f"workflow {workflow!r}", problems)
    return declared


def define_workflow(
    name: str,
    body: WorkflowBody,
    *,
    input_type: Any = None,
    result_type: Any = None,
    updates: UpdatesOption | None = None,
) -> WorkflowDefinition:
    """Validate ``body`` and return its definition; nothing runs and no I/O happens.

    Args:
        name: The workflow's stored name: letters, digits, ``-``, ``_`` and ``.``.
        body: ``async def body(ctx, input)``.
        input_type: How the stored input is read; default: the annotation of ``input``.
        result_type: How the stored result is read; default: the return annotation.
        updates: The updates the body takes with ``ctx.wait_update``: names, a mapping of
            name to payload type, or ``UpdateDeclaration``s (with a validator).

    Raises:
        DefinitionError: Every problem found, listed at once.
    """
    problems: list[str] = []
    if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
        problems.append(f"the name {name!r} must be non-empty letters, digits, '-', '_' or '.'")
    if not inspect.iscoroutinefunction(body):
        problems.append(f"the body {getattr(body, '__qualname__', body)!r} must be an 'async def' function")
    else:
        parameters = list(inspect.signature(body).parameters.values())
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if len(positional) < 2 or len(required) > 2:
            problems.append("the body must take exactly (ctx, input)")
    if problems:
        raise DefinitionError(f"workflow {name!r}", problems)
    hints = _hints(body)
    names = list(inspect.signature(body).parameters)
    if input_type is None and len(names) >= 2:
        input_type = hints.get(names[1])
    if result_type is None:
        result_type = hints.get("return")
    return WorkflowDefinition(name=name, body=body, input_type=input_type, result_type=result_type,
                              updates=update_declarations(name, updates))


def _hints(body: Callable[..., Any]) -> dict[str, Any]:
    # Annotations that cannot be resolved (forward references to local classes) simply
    # leave the value untyped: plain JSON values are still valid inputs and results.
    try:
        return typing.get_type_hints(body)
    except Exception:  # noqa: BLE001 - any failure to resolve means "untyped"
        return {}
