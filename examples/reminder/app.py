"""Ada's daily reminder: the seed's schedule example, a workflow started every day at 09:00 Oslo time.

The app declares the workflow ``reminder``, whose input is a ``ScheduledRun[str]`` (the
schedule's id, the due time the run serves, and the schedule's input: the reminder's text),
and the schedules that may start it. ``create_schedules`` creates ``ada-daily``: daily at
09:00 in Europe/Oslo, catch-up ``latest``. A create with the same content stores nothing,
so it is safe to call at every start of the program.

Run it from a checkout, with a broker (``tidings broker start`` prints its address)::

    export TIDINGS_BOOTSTRAP=127.0.0.1:9092
    tidings worker examples.reminder.app:app          # in one terminal
    python -m examples.reminder.app                   # creates ada-daily (again: no change)

or create the schedule from the command line instead of ``python -m``::

    tidings schedule create examples.reminder.app:app ada-daily reminder \\
        --input '"Drink water"' --daily 09:00 --zone Europe/Oslo
    tidings schedule show examples.reminder.app:app ada-daily

Every day at 09:00 Oslo time (08:00 UTC in winter, 07:00 UTC in summer) the worker then
starts the run ``ada-daily@2026-11-15T08:00:00.0000000Z`` (the schedule id and the due time
in UTC), whose activity ``send`` writes the reminder: to the log, and as a line to the file
``$REMINDER_LOG`` when it is set. ``tidings outcomes examples.reminder.app:app reminder``
prints each run's result.

Two environment variables, read at import: ``REMINDER_APP`` names the App (default
``reminder``; tests give each run a fresh name) and ``REMINDER_LOG`` the file.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import time
from pathlib import Path

from tidings import App, Attempt, CatchUp, Retry, ScheduledRun, ScheduleRule, WorkflowContext

log = logging.getLogger(__name__)

app = App(os.environ.get("REMINDER_APP", "reminder"))

#: Ada's schedule: its id, its input and its rule, as the seed writes them.
ADA_SCHEDULE = "ada-daily"
ADA_TEXT = "Drink water"
ADA_RULE = ScheduleRule.daily(time(9, 0), "Europe/Oslo")


def send_reminder(attempt: Attempt, run: ScheduledRun[str]) -> str:
    """Deliver one reminder: the seed's ``sendReminder``, here a line in a file and the log.

    An activity runs at least once (a crash after it and before its result is stored runs
    it again), so it passes ``attempt.idempotency_key`` along, as a real notification
    service would be given it: the key holds the run id, so it differs per due time and
    stays the same across the attempts of one run. This stand-in honours the key itself:
    a key already in ``$REMINDER_LOG`` is not written again.

    Returns:
        The reminder as delivered: ``"09:00 Europe/Oslo: Drink water"``.
    """
    local = run.due.astimezone(ADA_RULE.tz)
    line = f"{local:%H:%M} {ADA_RULE.zone}: {run.input}"
    path = os.environ.get("REMINDER_LOG")
    if path:
        target = Path(path)
        seen = target.read_text(encoding="utf-8").splitlines() if target.exists() else []
        if not any(entry.startswith(f"{attempt.idempotency_key} ") for entry in seen):
            with target.open("a", encoding="utf-8") as out:
                out.write(f"{attempt.idempotency_key} {line}\n")
    log.info("reminder for %s: %s (%s)", run.schedule, line, attempt.idempotency_key)
    return line


@app.workflow("reminder")
async def reminder(ctx: WorkflowContext, run: ScheduledRun[str]) -> str:
    """Remind Ada of ``run.input``: one activity, retried up to three times.

    Args:
        ctx: The workflow's steps.
        run: What the schedule gives each run: its id, the due time (UTC), the text.

    Returns:
        The reminder as delivered.
    """
    return await ctx.activity("send", Retry.times(3), lambda attempt: send_reminder(attempt, run))


#: The schedules of this app may start ``reminder`` only.
schedules = app.schedules([reminder])


async def create_schedules() -> None:
    """Create Ada's schedule; with the same content again it stores nothing (call at every start).

    Raises:
        ValueError: ``ada-daily`` exists with other content (``tidings schedule change``
            changes it) or was deleted.
    """
    await schedules.create(ADA_SCHEDULE, reminder, ADA_TEXT, ADA_RULE, CatchUp.LATEST)


def main() -> None:
    """``python -m examples.reminder.app``: create the schedules and say when Ada is next reminded."""
    async def create() -> None:
        await create_schedules()
        state = await schedules.state(ADA_SCHEDULE)
        due = state.next_due()
        print(f"{ADA_SCHEDULE}: {state.status}, {ADA_RULE}, next due "
              f"{'-' if due is None else due.isoformat()}")

    try:
        asyncio.run(create())
    finally:
        # The schedule commands went through the app's client: stop its producer and threads.
        app.client().close()


if __name__ == "__main__":
    main()
