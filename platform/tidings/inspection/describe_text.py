"""What ``tidings describe`` says of a workflow instance, from its journal and status: pure.

``describe_workflow`` turns the journal (oldest first), the latest status record and the
children's statuses into one JSON-ready dict; ``describe_lines`` prints it for a person.
The steps it waits on are the ``StepStarted`` records no ``StepCompleted``/``StepFailed``
has ended; a timer's and a timed wait's due time is stored with the step. Signals received
and not yet consumed by a wait are those whose seq no step end names.

A running activity shows the attempts that failed and will be retried (``StepAttemptFailed``,
``workflowjournal.v5``): how many, the last one's error, and when the next is due. What the
journal does not hold is said, not guessed: the owning worker counts attempts in memory, so
after a restart it begins at attempt 1 again (the records journaled before stay, and say so)
and an attempt running now is journaled only when it ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.saga_records import SagaJournalEntry
from ..core.workflow.child_records import ChildOutcome
from ..core.workflow.failures import StepError
from ..core.workflow.journal import (
    CancelRequested,
    Ended,
    JournalRecord,
    SignalReceived,
    Started,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepKind,
    StepStarted,
)
from ..core.workflow.paths import child_id
from ..shell.kinds.workflow.index import InstanceStatus
from .journal_text import duration, instant, journal_lines, summary, value

#: Journal lines ``describe`` prints under "recent" unless ``--journal`` asks for all.
RECENT = 5


def _iso(ms: int | None) -> str | None:
    return instant(ms).strip() or None


def _status(status: InstanceStatus | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return {"status": status.status, "since": _iso(status.at), "reason": status.reason}


def describe_workflow(
    workflow: str, instance_id: str, records: Sequence[JournalRecord], status: InstanceStatus | None,
    children: Mapping[str, InstanceStatus | None], now_ms: int,
) -> dict[str, Any]:
    """Everything ``describe`` knows of one instance, as JSON-ready values.

    Args:
        records: The instance's journal, oldest first.
        status: Its latest status record (None: none on the status topic).
        children: The latest status of each child id (``{instance_id}:{path}``) its journal started.
        now_ms: Now, to say how long a wait has lasted and when a timer is due.
    """
    started = records[0] if records and isinstance(records[0], Started) else None
    ended = records[-1] if records and isinstance(records[-1], Ended) else None
    closed = {r.path for r in records if isinstance(r, (StepCompleted, StepFailed))}
    reported = {r.path: r for r in records if isinstance(r, ChildOutcome)}
    consumed = {r.signal for r in records if isinstance(r, (StepCompleted, StepFailed)) and r.signal is not None}
    waiting = [r for r in records if isinstance(r, StepStarted) and r.path not in closed]
    failures = [r for r in records if isinstance(r, StepFailed)]
    steps = {r.path: r for r in records if isinstance(r, StepStarted)}
    described: dict[str, Any] = {
        "workflow": workflow,
        "id": instance_id,
        "summary": summary(workflow, instance_id, records),
        "status": _status(status),
        "records": len(records),
        "started": None if started is None else {"at": _iso(started.at), "input": started.input,
                                                  "run": started.run or 1},
        "ended": None if ended is None else {"at": _iso(ended.at), "outcome": ended.outcome,
                                              "result": ended.result,
                                              "error": None if ended.error is None else ended.error.message,
                                              "causes": _causes(ended.error)},
        "parent": None if started is None or not started.parent_workflow else {
            "workflow": started.parent_workflow, "id": started.parent_id, "step": started.parent_path},
        "cancel_requested": next((_iso(r.at) for r in records if isinstance(r, CancelRequested)), None),
        "waiting": [] if ended is not None else [
            _waiting(step, [r for r in records if isinstance(r, StepAttemptFailed) and r.path == step.path], now_ms)
            for step in waiting],
        "pending_signals": [{"name": r.name, "at": _iso(r.at), "payload": r.payload}
                            for r in records if isinstance(r, SignalReceived) and r.seq not in consumed],
        "last_failure": None if not failures else {
            "step": failures[-1].path, "name": steps[failures[-1].path].name if failures[-1].path in steps else None,
            "at": _iso(failures[-1].at), "attempt": failures[-1].attempt,
            "kind": failures[-1].error.kind.value if failures[-1].error.kind is not None else None,
            "message": failures[-1].error.message, "causes": _causes(failures[-1].error)},
        "children": [],
    }
    for step in (r for r in records if isinstance(r, StepStarted) and r.kind == StepKind.CHILD_START):
        child = child_id(instance_id, step.path)
        outcome = reported.get(step.path)
        described["children"].append({
            "workflow": step.name, "id": child, "step": step.path,
            "status": _status(children.get(child)),
            "reported": None if outcome is None else outcome.outcome,
        })
    return described


def _causes(error: StepError | None) -> list[str]:
    # The exceptions behind a failure (since workflowjournal.v6), nearest first: "Type: message".
    return [] if error is None else [str(cause) for cause in error.causes]


def _caused_lines(causes: Sequence[str], full: bool) -> list[str]:
    return [f"  caused by {value(cause, full=full)}" for cause in causes]


def _waiting(step: StepStarted, attempts: Sequence[StepAttemptFailed], now_ms: int) -> dict[str, Any]:
    wait: dict[str, Any] = {"step": step.path, "kind": step.kind, "name": step.name or None,
                            "since": _iso(step.at), "for_ms": max(now_ms - step.at, 0)}
    if step.due is not None:
        wait["due"] = _iso(step.due)
        wait["due_in_ms"] = step.due - now_ms
    if step.kind == StepKind.ACTIVITY:
        wait["failed_attempts"] = len(attempts)
        last = attempts[-1] if attempts else None
        # A count that did not go up means a worker began the step again (a restart: from 1).
        restarts = sum(1 for before, after in zip(attempts, attempts[1:]) if after.attempt <= before.attempt)
        wait["restarts"] = restarts
        wait["last_failure"] = None if last is None else {
            "attempt": last.attempt, "at": _iso(last.at), "type": last.error.type, "message": last.error.message,
            "causes": _causes(last.error)}
        wait["next_attempt"] = None if last is None else {
            "attempt": last.attempt + 1, "due": _iso(last.retry_at), "due_in_ms": last.retry_at - now_ms}
    return wait


def _attempt_lines(wait: Mapping[str, Any], full: bool) -> list[str]:
    failed = wait["failed_attempts"]
    if not failed:
        return ["no attempt has failed yet (one running now is journaled when it ends)"]
    last, due = wait["last_failure"], wait["next_attempt"]
    left = due["due_in_ms"]
    when = f"in {duration(left)}" if left >= 0 else f"{duration(-left)} ago: it is running, or its worker restarted"
    return [f"{failed} failed attempt{'s' if failed != 1 else ''} journaled"
            + (f" (a worker began the step again from attempt 1: {wait['restarts']} "
               f"restart{'s' if wait['restarts'] != 1 else ''})" if wait["restarts"] else ""),
            f"last failure: attempt {last['attempt']} at {last['at']}: {value(last['message'], full=full)}",
            *_caused_lines(last["causes"], full),
            f"next attempt: {due['attempt']} due {due['due']} ({when})"]


def describe_lines(described: Mapping[str, Any], records: Sequence[JournalRecord], *,
                   whole_journal: bool = False, full: bool = False) -> list[str]:
    """``describe_workflow``'s dict for a person: one fact a line, then the journal's last lines."""
    lines = [str(described["summary"])]

    def fact(label: str, text: str) -> None:
        lines.append(f"  {label:<16}{text}")

    status = described["status"]
    if status is not None:
        reason = f" ({status['reason']})" if status["reason"] else ""
        fact("status", f"{status['status']} since {status['since']}{reason}")
    elif records:
        fact("status", "no status record yet (the worker publishes it after the start is stored)")
    if described["started"] is not None:
        run = described["started"].get("run", 1)
        fact("started", f"{described['started']['at']} with {value(described['started']['input'], full=full)}"
             + (f" (run {run}: continued as new {run - 1} times)" if run > 1 else ""))
    if described["ended"] is not None:
        ended = described["ended"]
        told = f": {value(ended['error'], full=full)}" if ended["error"] is not None else ""
        fact("ended", f"{ended['at']} {ended['outcome']}{told}")
        for line in _caused_lines(ended["causes"], full):
            fact("", line)
    parent = described["parent"]
    if parent is not None:
        fact("parent", f"{parent['workflow']} {parent['id']} (its step {parent['step']})")
    if described["cancel_requested"]:
        fact("cancel", f"requested at {described['cancel_requested']}")
    for index, wait in enumerate(described["waiting"]):
        text = f"step {wait['step']} {wait['kind']}" + (f" {wait['name']}" if wait["name"] else "")
        text += f" since {wait['since']} ({duration(wait['for_ms'])})"
        if "due" in wait:
            left = wait["due_in_ms"]
            text += f", due {wait['due']} " + (f"(in {duration(left)})" if left >= 0 else f"({duration(-left)} ago)")
        fact("waiting on" if index == 0 else "", text)
        if wait["kind"] == StepKind.ACTIVITY:
            lines.extend(f"  {'':<16}  {line}" for line in _attempt_lines(wait, full))
    for index, signal in enumerate(described["pending_signals"]):
        fact("signals waiting" if index == 0 else "",
             f"{signal['name']} at {signal['at']}: {value(signal['payload'], full=full)}")
    failure = described["last_failure"]
    if failure is not None:
        named = f" {failure['name']}" if failure["name"] else ""
        attempt = f", attempt {failure['attempt']}" if failure["attempt"] is not None else ""
        fact("last failure", f"step {failure['step']}{named} at {failure['at'] or '?'}{attempt}: "
                             f"{failure['kind'] or 'error'}: {value(failure['message'], full=full)}")
        for line in _caused_lines(failure["causes"], full):
            fact("", line)
    for index, child in enumerate(described["children"]):
        status_text = child["status"]["status"] if child["status"] else (child["reported"] or "no status yet")
        fact("children" if index == 0 else "", f"{child['workflow']} {child['id']}: {status_text}")
    journal = journal_lines(records, full=full)
    if journal:
        shown = journal if whole_journal or len(journal) <= RECENT else journal[-RECENT:]
        lines.append("journal:" if len(shown) == len(journal)
                     else f"journal (last {len(shown)} of {len(journal)} records; --journal shows all):")
        lines.extend(f"  {line}" for line in shown)
    return lines


# -- sagas ---------------------------------------------------------------------------------


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def describe_saga(name: str, saga_id: str, entries: Sequence[SagaJournalEntry], now_ms: int) -> dict[str, Any]:
    """Where a saga stands from its journal (oldest first): status, state, and what it expects.

    The expectations are the commands of the last state entered that carry ``Expect``: each
    is due ``within`` after the state's entry (the journal stores when), and is resent every
    ``resend_every`` until its reply comes or it is due; whether a reply came already is
    the owning worker's (it cancels the timer), not the journal's: a saga that moved on has
    none of its old state's expectations left.
    """
    last = entries[-1]
    status = "FAULTED" if last.transition == "fault" else "ENDED" if last.ended else "RUNNING"
    current = next((e for e in reversed(entries) if not e.ended), last)
    expectations = [] if last.ended else [
        {"aggregate": c.aggregate, "aggregate_id": c.aggregate_id, "command_id": c.command_id, "type": c.type,
         "due": _iso(current.entered_at_ms + c.expect_within_ms),
         "due_in_ms": current.entered_at_ms + c.expect_within_ms - now_ms,
         "resend_every_ms": c.resend_every_ms}
        for c in current.commands if c.expect_within_ms is not None
    ]
    return {
        "saga": name, "id": saga_id, "status": status, "since": _iso(current.entered_at_ms),
        "transition": last.transition, "cause": last.cause, "reason": last.reason,
        "state": _text(last.state), "records": len(entries),
        "started": _iso(entries[0].entered_at_ms),
        "commands": [{"aggregate": c.aggregate, "aggregate_id": c.aggregate_id, "command_id": c.command_id,
                      "type": c.type, "command": _text(c.payload)} for c in current.commands],
        "expectations": expectations,
    }


def saga_lines(described: Mapping[str, Any], entries: Sequence[SagaJournalEntry], *, full: bool = False) -> list[str]:
    """``describe_saga``'s dict for a person, then one line per journal record."""
    lines = [f"{described['saga']} {described['id']}: {described['status'].lower()}, "
             f"{described['records']} records since {described['started']}"]

    def fact(label: str, text: str) -> None:
        lines.append(f"  {label:<16}{text}")

    fact("status", f"{described['status']} since {described['since']} (by {described['transition']}"
                   + (f", cause {described['cause']}" if described["cause"] else "") + ")")
    if described["reason"]:
        fact("reason", value(described["reason"], full=full))
    fact("state", value(described["state"], full=full))
    for index, command in enumerate(described["commands"]):
        fact("sent" if index == 0 else "", f"{command['type']} to {command['aggregate']} {command['aggregate_id']} "
                                           f"(command {command['command_id']}): {value(command['command'], full=full)}")
    for index, expect in enumerate(described["expectations"]):
        left = expect["due_in_ms"]
        when = f"in {duration(left)}" if left >= 0 else f"{duration(-left)} ago"
        every = f", resent every {duration(expect['resend_every_ms'])}" if expect["resend_every_ms"] else ""
        fact("expecting" if index == 0 else "",
             f"a reply from {expect['aggregate']} {expect['aggregate_id']} to {expect['type']} "
             f"by {expect['due']} ({when}){every}")
    lines.append("journal:")
    width = len(str(entries[-1].seq))
    for entry in entries:
        sent = f", sent {', '.join(f'{c.type} to {c.aggregate} {c.aggregate_id}' for c in entry.commands)}" \
            if entry.commands else ""
        ended = " (ended)" if entry.ended else ""
        why = f": {value(entry.reason, full=full)}" if entry.reason else f" {value(_text(entry.state), full=full)}"
        lines.append(f"  {instant(entry.entered_at_ms)}  #{entry.seq:<{width}}  {entry.transition}{ended}{why}{sent}")
    return lines
