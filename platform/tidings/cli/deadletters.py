"""``tidings deadletters MODULE:APP [--follow]``: print an App's dead letters as JSON lines.

The dead-letter topic holds Avro ``DeadLetter`` records (``core/records.py``): the bytes a
worker could not use, where they came from and why. This prints each as one JSON line an
operator can read, filter with ``jq`` and replay from (docs/operations.md). Any producer can
write to the topic, so a record there that is not a dead letter is printed as an
``unreadable`` line instead of stopping the command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ..shell.runtime.admin import KafkaAdmin
from ..shell.client.follower import TopicFollower
from ..shell.runtime.groups import DEFAULT_PREFIX
from ..shell.runtime.connection import KafkaConnection
from ..inspection.deadletters import dead_letter_line
from ..shell.runtime.topics import deadletter_topic
from .interrupts import interruptible
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
Print every dead letter of the App at MODULE:APP, one JSON line each, read from its
dead-letter topic ({app}.deadletter) from the beginning of every partition:

  {"reason": "not an Avro single-object record: ...", "error_type": "DecodeError",
   "origin": {"topic": "bank.aggregate.account.commands", "partition": 2, "offset": 17},
   "timestamp": "2026-11-30T00:13:53.357Z", "key": "alice", "key_encoding": "utf-8",
   "value": "AG5vdCBhdnJv", "value_encoding": "base64", "original_size": 9, "truncated": false,
   "headers": {}, "letter": {"partition": 0, "offset": 4}}

(one line in the output). origin is the record that failed; key and value are its bytes,
as text when they are UTF-8 ("utf-8"), else base64 ("base64"); truncated says whether
the worker kept only the first bytes of a value of original_size bytes; letter is where
the dead letter itself is. A record on the topic that is not a dead letter prints as
{"unreadable": "why", "letter": ..., "key": ..., "value": ...}.

Without --follow it stops at the end the topic had when it started, and exits 0. With
--follow it then prints dead letters as workers write them, until Ctrl-C (exit 0). Examples:

  tidings deadletters examples.bank.app:app --since 1h
  tidings deadletters examples.bank.app:app --follow | jq -c 'select(.error_type == "SchemaError")'

How to replay one, and what to do when a worker is stuck: docs/operations.md.
"""

#: ``--since`` durations: a number and a unit.
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def register(subparsers: Any) -> None:
    """Add the ``deadletters`` command."""
    parser = subparsers.add_parser(
        "deadletters",
        help="print an App's dead letters as JSON lines",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.bank.app:app")
    parser.add_argument("--follow", action="store_true", help="keep printing new dead letters until Ctrl-C")
    parser.add_argument("--limit", type=_positive, metavar="N", help="stop after N lines")
    parser.add_argument(
        "--since",
        type=_since,
        metavar="WHEN",
        help="only letters written since WHEN: a duration back from now (90s, 30m, 2h, 7d) "
        "or an ISO 8601 time (2026-11-30T08:00:00Z; UTC when it names no zone)",
    )
    add_kafka_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    kafka = connection(args, app)
    reach_kafka(kafka, None)
    topic = deadletter_topic(app.name)
    # Says "run tidings topics apply" for a missing topic, and gives up on an unreachable
    # broker in seconds, before the follower's consumer starts retrying.
    KafkaAdmin(kafka).partitions(topic)
    if args.follow:
        interruptible()
    try:
        asyncio.run(
            print_dead_letters(kafka, topic, follow=args.follow, limit=args.limit, since_ms=args.since, out=_print,
                               group_prefix=f"{app.name}.")
        )
    except KeyboardInterrupt:
        # Ctrl-C is how --follow is meant to end: not a failure, and no traceback.
        pass
    except BrokenPipeError:
        # The reader went away (`| head`): what it wanted was printed. Python would report
        # the pipe again when it flushes stdout at exit, so point stdout at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _print(line: str) -> None:
    print(line, flush=True)  # flushed: another process may read it live


async def print_dead_letters(
    connection: KafkaConnection,
    topic: str,
    *,
    follow: bool,
    limit: int | None = None,
    since_ms: int | None = None,
    out: Callable[[str], None],
    group_prefix: str = DEFAULT_PREFIX,
) -> int:
    """Hand one JSON line per record of ``topic`` to ``out``; return how many.

    Args:
        connection: The Kafka cluster and its client properties.
        topic: The dead-letter topic.
        follow: Wait for new records after the end the topic had at start.
        limit: Stop after this many lines.
        since_ms: Skip letters written before this time (ms since the epoch).
        out: Takes each line.
        group_prefix: The prefix of the reader's group id (never joined, nothing committed):
            the app's ``{app}.``, which its workers' ACLs cover (``groups.py``).

    Raises:
        BrokerError: The topic does not exist, or reading it failed.
    """
    follower = TopicFollower(connection, topic, follow=follow, group_prefix=group_prefix)
    printed = 0
    try:
        await follower.start()
        while (chunk := await follower.next_chunk()) is not None:
            for record in chunk:
                line, written_ms = dead_letter_line(record)
                if since_ms is not None and (written_ms is None or written_ms < since_ms):
                    continue
                out(json.dumps(line))
                printed += 1
                if limit is not None and printed >= limit:
                    return printed
    finally:
        follower.close()
    return printed


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _since(text: str, *, now: datetime | None = None) -> int:
    """Return ``--since WHEN`` as ms since the epoch: a duration back from now, or an ISO time."""
    now = now or datetime.now(UTC)
    duration = _DURATION.match(text.strip())
    if duration:
        amount, unit = duration.groups()
        moment = now - timedelta(**{_UNITS[unit]: float(amount)})
    else:
        try:
            moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither a duration (90s, 30m, 2h, 7d) nor an ISO 8601 time (2026-11-30T08:00:00Z)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
