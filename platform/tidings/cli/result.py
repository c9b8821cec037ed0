"""``tidings result MODULE:APP WORKFLOW ID``: wait for an instance's outcome, print it as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..core.workflow import Faulted, Finished, Outcome, WorkflowDefinition
from .kafka import connection
from .start import add_workflow_parser, call, fail, workflow_handle

_DESCRIPTION = """\
Wait until the instance ID ends and print its outcome as JSON:
{"outcome": "finished", "value": ...}, {"outcome": "faulted", "error": {...}} or
{"outcome": "cancelled"}, for example:

  tidings result examples.shop.app:app enrich order-17

Exit status: 0 finished; 1 faulted, cancelled or no such instance; 2 not ended within
--timeout.
"""


def register(subparsers: Any) -> None:
    """Add the ``result`` command."""
    parser = add_workflow_parser(subparsers, "result", "wait for a workflow instance's outcome", _DESCRIPTION)
    parser.add_argument("--timeout", type=float, help="seconds to wait (default: the app's command timeout)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    handle = workflow_handle(args)
    try:
        outcome = call(handle, lambda: handle.result(args.instance_id, args.timeout, bootstrap=connection(args, handle.app)))
    except TimeoutError as exc:
        return fail(str(exc), 2)
    print(json.dumps(outcome_json(outcome, handle.definition)))
    return 0 if isinstance(outcome, Finished) else 1


def outcome_json(outcome: Outcome, definition: WorkflowDefinition) -> dict[str, Any]:
    """Return what the CLI prints for ``outcome``; ``tidings outcomes`` prints the same shape.

    ``{"outcome": "finished", "value": ...}`` (the value as the workflow stores it),
    ``{"outcome": "faulted", "error": {...}}`` or ``{"outcome": "cancelled"}``.
    """
    if isinstance(outcome, Finished):
        return {"outcome": "finished", "value": json.loads(definition.codec.encode(outcome.value))}
    if isinstance(outcome, Faulted):
        return {"outcome": "faulted", "error": outcome.error.to_json()}
    return {"outcome": "cancelled"}
