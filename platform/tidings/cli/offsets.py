"""``tidings offsets show|move MODULE:APP``: an App's consumer-group offsets, and moving them.

``show`` is where an operator looks first when a worker seems stuck: the group's members
and, per partition, the committed offset, the log's end and the lag between them. ``move``
commits other offsets for the group (to skip a record a worker cannot get past, or to read
a topic again), after showing the change and asking. Kafka takes offsets only from a group
with no members, so ``move`` checks that first and says what to do when it is not so.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..shell.runtime.admin import GroupDescription, KafkaAdmin, Position
from ..errors import BrokerError
from .kafka import EXIT_STATUS_EPILOG, add_kafka_arguments, connection, reach_kafka
from .loading import load_app

_DESCRIPTION = """\
The committed offsets of an App's consumer group. A worker of MODULE:APP reads as the
group named after the App (e.g. bank); --group names another group.

  show  the group's state and members, then one line per partition of every topic the
        group reads: the committed offset (the next record the group will be given), the
        log's start and end, the lag (records not yet processed) and the member holding it.
  move  commit new offsets in TOPIC for the group, in one partition (--partition) or all:
        --to earliest, --to latest, --to OFFSET, or --shift N (from the committed offset;
        +1 skips one record, -5 reads five again). It prints each change and asks first
        (--yes does not ask). Kafka takes offsets only from a group with no members: stop
        every worker of the App first, then move, then start them again.

Examples:

  tidings offsets show examples.bank.app:app
  tidings offsets move examples.bank.app:app bank.aggregate.account.commands --partition 2 --shift 1
  tidings offsets move examples.bank.app:app bank.aggregate.account.commands --to latest --yes

What moving an offset does to each kind of topic, and the stuck-worker runbook:
docs/operations.md. Exit status: 0 when shown or moved (or nothing to move), 1 on an
error, when the group has members, or when the move is not confirmed.
"""


def register(subparsers: Any) -> None:
    """Add the ``offsets`` command with its ``show`` and ``move`` subcommands."""
    parser = subparsers.add_parser(
        "offsets",
        help="show a consumer group's offsets and lag, or move them",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    actions = parser.add_subparsers(dest="offsets_action", metavar="ACTION", required=True)

    show = actions.add_parser(
        "show",
        help="print the group's members and each partition's committed offset, end and lag",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    _common(show)
    show.add_argument("--topic", help="only this topic")
    show.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    show.set_defaults(run=run_show)

    move = actions.add_parser(
        "move",
        help="commit new offsets for the group (its workers stopped)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXIT_STATUS_EPILOG,
    )
    _common(move)
    move.add_argument("topic", metavar="TOPIC", help="the topic, as `show` prints it")
    move.add_argument(
        "--partition", type=int, action="append", metavar="P",
        help="only this partition (again for more); default: every partition of TOPIC",
    )
    target = move.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", type=_target, metavar="earliest|latest|OFFSET", help="where to move to")
    target.add_argument("--shift", type=int, metavar="N", help="move by N records from the committed offset")
    move.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    move.set_defaults(run=run_move)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", metavar="MODULE:APP", help="where the App is, e.g. examples.bank.app:app")
    parser.add_argument("--group", help="the consumer group (default: the App's name, the group of its workers)")
    add_kafka_arguments(parser)


def _target(text: str) -> str | int:
    if text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give earliest, latest or an offset (0 or more)")
    return offset


# -- show ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One partition as ``show`` prints it; ``committed`` None when the group has committed none."""

    topic: str
    partition: int
    committed: int | None
    start: int | None
    end: int | None
    #: Index (from 1) of the member holding the partition in the group description.
    member: int | None

    @property
    def lag(self) -> int | None:
        """Records after the committed offset (None when unknown or nothing is committed)."""
        if self.committed is None or self.end is None:
            return None
        return max(self.end - self.committed, 0)


def run_show(args: argparse.Namespace) -> int:
    """Print the group's members and offsets."""
    app = load_app(args.app)
    kafka = connection(args, app)
    reach_kafka(kafka, None)
    admin = KafkaAdmin(kafka)
    group = args.group or app.name
    description = admin.describe_group(group)
    committed = admin.committed(group)
    rows = group_offsets(admin, description, committed, only_topic=args.topic)
    if args.json:
        print(json.dumps(show_json(description, rows)))
    else:
        for line in show_lines(description, rows):
            print(line)
    return 0


def group_offsets(
    admin: KafkaAdmin, description: GroupDescription, committed: Mapping[Position, int], *, only_topic: str | None
) -> list[PartitionOffsets]:
    """Return a row for every partition of every topic the group has committed in or is assigned.

    Raises:
        BrokerError: Kafka did not answer, or ``only_topic`` does not exist.
    """
    holders = {
        position: index
        for index, member in enumerate(description.members, start=1)
        for position in member.assignment
    }
    topics = {topic for topic, _ in committed} | {topic for topic, _ in holders}
    if only_topic is not None:
        topics = {only_topic}
    positions: list[Position] = []
    missing: list[Position] = []
    for topic in sorted(topics):
        try:
            positions += [(topic, partition) for partition in admin.partitions(topic)]
        except BrokerError:
            if only_topic is not None:
                raise
            # A topic deleted since the group read it still has its committed offsets.
            missing += sorted(position for position in committed if position[0] == topic)
    ranges = admin.log_range(positions)
    rows = [
        PartitionOffsets(topic, partition, committed.get((topic, partition)), *ranges[(topic, partition)],
                         holders.get((topic, partition)))
        for topic, partition in positions
    ]
    rows += [PartitionOffsets(topic, partition, committed[(topic, partition)], None, None, None)
             for topic, partition in missing]
    return sorted(rows, key=lambda row: (row.topic, row.partition))


def show_lines(description: GroupDescription, rows: Sequence[PartitionOffsets]) -> list[str]:
    """Return ``show``'s table: the group and its members, then one line per partition."""
    lines = [f"group {description.group}: {description.state}, {_count(len(description.members), 'member')}"]
    for index, member in enumerate(description.members, start=1):
        static = f" instance {member.instance_id}" if member.instance_id else ""
        held = _count(len(member.assignment), "partition")
        lines.append(f"  #{index} {member.member_id} on {member.host}{static}, {held}")
    if not rows:
        lines.append(
            f"no committed offsets and no assigned partitions: no worker of group {description.group} "
            "has read anything yet (a worker's group is its App's name; --group names another)"
        )
        return lines
    table = [["TOPIC", "PARTITION", "COMMITTED", "START", "END", "LAG", "MEMBER"]]
    for row in rows:
        numbers = [row.committed, row.start, row.end, row.lag]
        holder = f"#{row.member}" if row.member is not None else "-"
        table.append([row.topic, str(row.partition), *("-" if n is None else str(n) for n in numbers), holder])
    widths = [max(len(cells[column]) for cells in table) for column in range(len(table[0]))]
    lines.append("")
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
              for cells in table]
    return lines


def show_json(description: GroupDescription, rows: Iterable[PartitionOffsets]) -> dict[str, Any]:
    """Return ``show --json``'s object."""
    return {
        "group": description.group,
        "state": description.state,
        "members": [
            {
                "member_id": member.member_id,
                "client_id": member.client_id,
                "host": member.host,
                "instance_id": member.instance_id,
                "partitions": [{"topic": topic, "partition": partition} for topic, partition in member.assignment],
            }
            for member in description.members
        ],
        "partitions": [
            {
                "topic": row.topic,
                "partition": row.partition,
                "committed": row.committed,
                "start": row.start,
                "end": row.end,
                "lag": row.lag,
                "member": row.member,
            }
            for row in rows
        ],
    }


# -- move ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Move:
    """One partition's committed offset, before and after a move."""

    topic: str
    partition: int
    before: int | None
    after: int
    start: int
    end: int
    #: Why ``after`` is not what was asked (it was outside the log).
    note: str = ""

    @property
    def changes(self) -> bool:
        return self.after != self.before

    def describe(self) -> str:
        """One line for the confirmation prompt."""
        before = "none" if self.before is None else str(self.before)
        if self.before is None or not self.changes:
            effect = "" if self.changes else "unchanged"
        elif self.after > self.before:
            effect = f"skips {_count(self.after - self.before, 'record')}"
        else:
            effect = f"reads {_count(self.before - self.after, 'record')} again"
        details = ", ".join(part for part in (effect, self.note, f"log {self.start}..{self.end}") if part)
        return f"  {self.topic}/{self.partition}: {before} -> {self.after} ({details})"


def plan_moves(
    positions: Iterable[Position],
    committed: Mapping[Position, int],
    ranges: Mapping[Position, tuple[int, int]],
    *,
    to: str | int | None = None,
    shift: int | None = None,
) -> list[Move]:
    """Return where each partition's committed offset goes (``--to`` or ``--shift``).

    An offset before the log's start or after its end is clamped to it, with a note: Kafka
    would otherwise apply the group's reset policy at the next read.

    Raises:
        SystemExit: ``--shift`` on a partition with no committed offset to shift from.
    """
    moves: list[Move] = []
    for position in sorted(positions):
        start, end = ranges[position]
        before = committed.get(position)
        if shift is not None:
            if before is None:
                raise SystemExit(
                    f"tidings: {position[0]}/{position[1]} has no committed offset to shift from; "
                    "use --to earliest|latest|OFFSET for it"
                )
            wanted = before + shift
        elif to == "earliest":
            wanted = start
        elif to == "latest":
            wanted = end
        elif isinstance(to, int):
            wanted = to
        else:
            raise ValueError("plan_moves needs to= or shift=")
        after = min(max(wanted, start), end)
        note = "" if after == wanted else f"{wanted} is outside the log"
        moves.append(Move(position[0], position[1], before, after, start, end, note))
    return moves


def run_move(args: argparse.Namespace) -> int:
    """Commit new offsets for the group, once it has no members and the change is confirmed."""
    app = load_app(args.app)
    kafka = connection(args, app)
    reach_kafka(kafka, None)
    admin = KafkaAdmin(kafka)
    group = args.group or app.name
    description = admin.describe_group(group)
    if not description.idle:
        print(refusal(description, args.app), file=sys.stderr)
        return 1
    committed = admin.committed(group)
    known = {spec.name for spec in app.topic_specs()} | {topic for topic, _ in committed}
    if args.topic not in known:
        raise SystemExit(
            f"tidings: {args.topic} is neither a topic of {app.name} nor one group {group} has offsets in; "
            f"`tidings offsets show {args.app}` lists the group's topics"
        )
    partitions = admin.partitions(args.topic)
    chosen = args.partition or partitions
    unknown = sorted(set(chosen) - set(partitions))
    if unknown:
        raise SystemExit(f"tidings: {args.topic} has no partition {unknown[0]} (it has 0..{len(partitions) - 1})")
    positions = [(args.topic, partition) for partition in sorted(set(chosen))]
    moves = plan_moves(positions, committed, admin.log_range(positions), to=args.to, shift=args.shift)
    changes = [move for move in moves if move.changes]
    print(f"group {group} ({description.state}), {args.topic}:")
    for move in moves:
        print(move.describe())
    if not changes:
        print("nothing to move")
        return 0
    if not args.yes and not confirm(f"Move {_count(len(changes), 'committed offset')}? [y/N] "):
        print("nothing moved (answer y, or pass --yes when no one is there to answer)", file=sys.stderr)
        return 1
    admin.commit(group, {(move.topic, move.partition): move.after for move in changes})
    print(f"moved {_count(len(changes), 'committed offset')} of group {group}")
    return 0


def refusal(description: GroupDescription, app_spec: str) -> str:
    """Say why offsets cannot move now, and what to do."""
    members = "".join(
        f"\n  {member.member_id} on {member.host}"
        + (f" (instance {member.instance_id})" if member.instance_id else "")
        for member in description.members
    )
    return (
        f"tidings: group {description.group} is {description.state} with "
        f"{_count(len(description.members), 'member')}, and Kafka moves a group's offsets only when it has "
        f"none:{members}\n"
        "Stop every worker of the group (a worker run with TIDINGS_INSTANCE_ID stays a member "
        "until its session times out, seconds after it stops), check that "
        f"`tidings offsets show {app_spec}` says EMPTY, move the offsets, then start the workers again."
    )


def confirm(question: str, *, ask: Callable[[str], str] = input) -> bool:
    """Ask ``question``; only an answer starting with y is a yes (no input at all: no)."""
    try:
        return ask(question).strip().lower().startswith("y")
    except EOFError:
        print()  # end the question's line
        return False


def _count(number: int, noun: str) -> str:
    if number == 0:
        return f"no {noun}s"
    return f"{number} {noun}{'' if number == 1 else 's'}"
