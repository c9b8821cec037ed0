"""The example command lines in ``tidings <command> --help`` name Apps, workflows and inputs that exist.

tests/integration/test_shop_example.py runs the same lines against a worker.
"""

from __future__ import annotations

import argparse
import json
import shlex

import pytest
from pydantic import TypeAdapter

from tidings.cli.loading import load_app
from tidings.cli.main import COMMANDS, build_parser
from tidings.shell.kinds.workflow.handle import workflow_named


def example_lines() -> list[str]:
    """Every line of a command's help that starts with ``tidings`` (a pipe's tail cut off)."""
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    lines = []
    for name in COMMANDS:
        help_text = subparsers.choices[name].format_help()
        lines += [line.strip().split(" | ")[0] for line in help_text.splitlines()
                  if line.strip().startswith("tidings ")]
    return lines


def test_the_workflow_commands_have_examples() -> None:
    commands = {shlex.split(line)[1] for line in example_lines()}
    assert {"start", "signal", "cancel", "result", "status", "outcomes", "journal", "send"} <= commands


def test_the_operator_commands_have_examples() -> None:
    commands = {tuple(shlex.split(line)[1:3]) for line in example_lines()}
    assert {("deadletters", "examples.bank.app:app"), ("offsets", "show"), ("offsets", "move")} <= commands


@pytest.mark.parametrize("line", example_lines())
def test_a_help_example_parses_and_names_what_its_app_declares(line: str) -> None:
    args = build_parser().parse_args(shlex.split(line)[1:])
    if not hasattr(args, "app"):
        return  # `tidings broker ...` and the like name no App
    app = load_app(args.app)
    if hasattr(args, "workflow"):
        handle = workflow_named(app, args.workflow)
        if args.command == "start":
            TypeAdapter(handle.definition.input_type).validate_python(json.loads(args.input))
        if args.command == "signal":
            json.loads(args.payload)
    if hasattr(args, "aggregate"):
        assert args.aggregate in {h.name for h in app.aggregates}
    if args.command == "offsets" and getattr(args, "topic", None):
        assert args.topic in {spec.name for spec in app.topic_specs()}
