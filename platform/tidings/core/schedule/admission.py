"""What a worker takes of the times a schedule command claims, judged by its own clock (pure).

Any producer allowed to write the schedule commands topic (every client must be, to create
schedules) can write any schedule command, including the dispatcher's own ``schedule.fire``
and ``schedule.report-start``. So the instants a command carries are the sender's claim, and
the worker that hosts the schedule aggregate judges them before ``decide`` sees them
(``admit``, called by the aggregate agent with the worker's clock; docs/schedules.md,
"Clocks"):

- **A fire** is decided at the worker's instant, not the claimed ``now``. A fire that claims
  an instant more than ``AHEAD_LIMIT`` (one second) ahead of the worker's clock is refused
  with the reason (``CommandRefused``: dead-lettered), so no fire can make a due time run
  before the worker's clock reaches it. A fire that asks for a reply is refused too: its
  reply would carry the start token of the runs it decides.
- **The fire is given its start token** here, a random value the caller draws: the runs
  it decides are stored with it, and only a start report carrying it clears them
  (``aggregate._reported``).
- **Create, change, pause, resume and delete** are the client's to send, with the
  client's instant. An instant ahead of the worker's clock is replaced by the worker's:
  a schedule cannot be anchored, paused or resumed in the future, and a client whose clock
  is fast is not refused for it. An instant in the past is kept: it can only make due
  times that have passed already run now (as after downtime), never one early.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from tidings.core.schedule.aggregate import (
    ChangeSchedule,
    CreateSchedule,
    DeleteSchedule,
    FireSchedule,
    PauseSchedule,
    ResumeSchedule,
    ScheduleCommand,
)
from tidings.core.schedule.runs import format_due, utc
from tidings.errors import CommandRefused

AHEAD_LIMIT: Final = timedelta(seconds=1)
"""How far ahead of the worker's clock a fire may claim to be (a dispatcher on another
worker may run a little fast)."""


def admit(command: ScheduleCommand, *, now: datetime, token: str, asks_reply: bool) -> ScheduleCommand:
    """Return ``command`` as the worker decides it: its instants judged by ``now``.

    Args:
        command: The decoded command, as the sender wrote it.
        now: The worker's clock.
        token: The start token a fire's runs get (drawn at random by the caller).
        asks_reply: The command's envelope names a ``reply_to``.

    Raises:
        CommandRefused: a fire more than ``AHEAD_LIMIT`` ahead of ``now``, or one that
            asks for a reply.
    """
    now = utc(now)
    match command:
        case FireSchedule():
            if asks_reply:
                raise CommandRefused(
                    "schedule.fire is the dispatcher's command and asks for no reply (the reply would "
                    "carry its runs' start tokens); send it without reply_to"
                )
            ahead = command.now - now
            if ahead > AHEAD_LIMIT:
                raise CommandRefused(
                    f"schedule.fire claims now={format_due(command.now)}, {ahead.total_seconds():.1f} s "
                    f"ahead of this worker's clock ({format_due(now)}); a fire more than "
                    f"{AHEAD_LIMIT.total_seconds():g} s ahead is refused: a forged fire, or a dispatcher "
                    "whose clock is fast (set it right)"
                )
            return FireSchedule(due=command.due, now=now, token=token)
        case CreateSchedule() | ChangeSchedule() | PauseSchedule() | ResumeSchedule() | DeleteSchedule():
            if command.at > now:
                return command.model_copy(update={"at": now})
            return command
        case _:
            return command


__all__ = ["AHEAD_LIMIT", "admit"]
