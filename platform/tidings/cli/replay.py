"""``tidings replay MODULE:APP WORKFLOW``: would the code now park running instances?"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..inspection.journals import Journals
from ..shell.kinds.workflow.handle import workflow_named
from ..testing.replaying import replay
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Replay every running instance's journal of WORKFLOW against the code now on disk (the App
MODULE:APP as it is imported now), with the interpreter a worker runs, and report each
instance that would park after a deploy: where the code and its journal part (the step's
path, what the journal holds there, what the code now has) and the ctx.version change that
keeps such instances on the old steps. No worker runs and nothing is sent: activities,
timers and sends are not carried out. Ended instances are not replayed (their body never
runs again). Run it in CI before a deploy:

  tidings journal examples.shop.app:app enrich --export enrich.jsonl
  tidings replay examples.shop.app:app enrich --file enrich.jsonl

(the first where production's broker is reachable, the second in CI, on the new code)

  enrich: 2,113 running instances replayed, 7,887 ended (not replayed); 2,113 would park, 0 would fault.

  2,113 instances would park at step 2: the journal holds activity 'reserve', the code now has activity 'charge'
    order-17, order-18, ... and 2,093 more (--json lists every one)
    the worker would say: the body produced step 2 (activity 'charge') where the journal holds step 2 (...)
    fix: in the body, right after step 1, branch on a version so instances that had passed it keep the old steps:
        if await ctx.version('charge-at-2', 2) >= 2:
            ...  # the new code, from activity 'charge' on
        else:
            ...  # the old code, from activity 'reserve' on

--from-topic (the default) reads the workflow's journal topic whole; --file reads an export
(JSON lines, docs/testing.md; - for standard input). A record that cannot be read is one
line in the report and its instance is not checked. Progress goes to stderr every 1,000
instances; --json prints the report as one JSON object on stdout.

Exit status: 0 no instance would park or fault and every record was read; 1 some would
park or fault, or records could not be read; 2 a usage error (unknown workflow, a bad
--limit, a file that cannot be read or is no export of WORKFLOW).
"""


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--limit takes a whole number of instances, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--limit must be 1 or more, got {value}")
    return value


def register(subparsers: Any) -> None:
    """Add the ``replay`` command."""
    parser = subparsers.add_parser(
        "replay", help="would the code now park running workflow instances? (a deploy check)",
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is (the code to check)")
    parser.add_argument("workflow", metavar="WORKFLOW", help="the workflow's name, e.g. enrich")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-topic", action="store_true",
                        help="read the journals from the workflow's journal topic (the default)")
    source.add_argument("--file", metavar="EXPORT",
                        help="read the journals from an export file (tidings journal --export; - for stdin)")
    parser.add_argument("--limit", type=_limit, metavar="N", help="check at most N running instances")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for Kafka (default 30)")
    add_kafka_arguments(parser)
    parser.epilog = EXIT_STATUS_EPILOG
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    try:
        workflow_named(app, args.workflow)
    except LookupError as exc:
        print(f"tidings: {exc.args[0]}", file=sys.stderr)
        return 2
    started = time.monotonic()
    kafka = None
    if args.file is None:
        kafka = connection(args, app)
        reach_kafka(kafka, args.timeout)

    def read(journals: Journals) -> None:
        print(f"read {journals.records:,} records of {len(journals):,} instances"
              f"{f', {len(journals.errors):,} unreadable' if journals.errors else ''} "
              f"in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)

    def progress(done: int, total: int) -> None:
        print(f"replayed {done:,} of {total:,} instances ({time.monotonic() - started:.1f} s)",
              file=sys.stderr, flush=True)

    try:
        file = "/dev/stdin" if args.file == "-" else args.file
        report = replay(app, args.workflow, file=file, bootstrap=kafka, limit=args.limit,
                        timeout=args.timeout, progress=progress, on_read=read)
    except ValueError as exc:  # the file's header names another workflow or format
        print(f"tidings: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tidings: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else 1
