"""``WorkflowDefinition``: a named, validated workflow body, built at declaration time."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from tidings.core.workflow.context import WorkflowContext
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


def define_workflow(
    name: str,
    body: WorkflowBody,
    *,
    input_type: Any = None,
    result_type: Any = None,
) -> WorkflowDefinition:
    """Validate ``body`` and return its definition; nothing runs and no I/O happens.

    Args:
        name: The workflow's stored name: letters, digits, ``-``, ``_`` and ``.``.
        body: ``async def body(ctx, input)``.
        input_type: How the stored input is read; default: the annotation of ``input``.
        result_type: How the stored result is read; default: the return annotation.

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
    return WorkflowDefinition(name=name, body=body, input_type=input_type, result_type=result_type)


def _hints(body: Callable[..., Any]) -> dict[str, Any]:
    # Annotations that cannot be resolved (forward references to local classes) simply
    # leave the value untyped: plain JSON values are still valid inputs and results.
    try:
        return typing.get_type_hints(body)
    except Exception:  # noqa: BLE001 - any failure to resolve means "untyped"
        return {}
