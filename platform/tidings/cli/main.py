"""The ``tidings`` command: one argparse subcommand per module of ``tidings.cli``.

To add a command ``foo``: write ``tidings/cli/foo.py`` with ``register(subparsers)``, which adds
its parser and sets ``run`` (``Callable[[argparse.Namespace], int]``, the exit code) with
``set_defaults``; then add ``"foo"`` to :data:`COMMANDS`. Nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import TypeAlias

from tidings.errors import KafkaUnreachable, TidingsError

from .kafka import CONNECT_TIMEOUT_S, HINT, UNREACHABLE_EXIT_CODE

# What each command module's register() receives: the result of add_subparsers().
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

# The command modules, in the order `tidings --help` lists them.
COMMANDS: tuple[str, ...] = (
    "worker", "send", "topics", "broker", "demo", "start", "signal", "update", "query", "cancel", "result", "status", "outcomes",
    "deadletters", "offsets", "acls",
    "journal", "replay", "saga", "schedule", "list", "describe", "console",
)


def build_parser(commands: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """Build the parser with ``commands`` (default: every one of :data:`COMMANDS`) registered.

    Returns:
        The top-level parser.

    Raises:
        TypeError: A command module has no ``register`` function.
    """
    parser = argparse.ArgumentParser(
        prog="tidings",
        description="Event-sourced aggregates, sagas and durable workflows on Apache Kafka.",
        epilog="Exit status: 0 success; 1 an error or a refused command; 2 a usage error or a "
        f"timeout; {UNREACHABLE_EXIT_CODE} no Kafka broker answered within --timeout or "
        f"{CONNECT_TIMEOUT_S:g} s (one line on stderr names the bootstrap servers). "
        "`tidings worker` waits for Kafka instead (docs/operations.md).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in commands:
        module = importlib.import_module(f"{__package__}.{name}")
        register = getattr(module, "register", None)
        if not callable(register):
            raise TypeError(f"{module.__name__} must define register(subparsers)")
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tidings`` command line.

    Args:
        argv: The arguments after the program name (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Only the command asked for is imported: a worker's start (and so its recovery after a
    # crash) does not wait for the local broker's certificates code, the console, the
    # listing readers... (133 modules, cryptography's among them). Anything else, `--help`
    # or a mistyped command, gets every command.
    wanted = arguments[0] if arguments and arguments[0] in COMMANDS else None
    parser = build_parser(COMMANDS if wanted is None else (wanted,))
    args = parser.parse_args(arguments)
    # What `tidings worker --processes N` starts its children with.
    args.argv = arguments
    try:
        return int(args.run(args))
    except KafkaUnreachable as exc:
        # One line, whatever the command: the servers tried, why, and what to check.
        print(f"tidings: {exc}: {HINT}", file=sys.stderr)
        return UNREACHABLE_EXIT_CODE
    except TidingsError as exc:
        print(f"tidings: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
