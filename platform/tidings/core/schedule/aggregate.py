"""The schedule aggregate, pure: a schedule's commands, events, state, ``decide`` and ``fold``.

A schedule is an ordinary tidings aggregate (``SCHEDULE_AGGREGATE``), hosted like any other:
its journal is ``{app}.aggregate.schedule.events`` keyed ``{id}/{version}``, so its state is
rebuilt from the journal and the dispatcher's due-time index is only a hint. The rules:

- **Create** stores the workflow, the input (JSON-ready), the rule, the catch-up policy and
  the instant of creation (the anchor). A create with the same content as the live schedule
  stores nothing, so a program can create its schedules at every start; a create of an id
  that exists with other content, or that was ever deleted, stores nothing either (the
  handle reads the state to say which).
- **Change** replaces workflow, input, rule and policy and moves the anchor to the change:
  no due time at or before it runs.
- **Pause** / **resume** open and close a pause; nothing inside it runs (``decide_fire``).
- **Delete** is final: the id can never be created again, so a run id never belongs to two
  schedules.
- **Fire** decides, from the schedule's own state and with ``decide_fire``, which due times
  run, and stores each as a pending run with the workflow and input it gets *now*; a change,
  pause or delete after that does not touch a pending run. A fire more than a second early,
  a repeated fire and a fire for a paused or deleted schedule store nothing.
- **Report start** removes a pending run once the dispatcher has stored its start; a crash
  before it leaves the run pending, and the dispatcher starts it again under the same id.
  The report must carry the run's start token: a random value the worker drew when it
  admitted the fire that decided the run, stored with the run in the journal (which only
  workers read), so a report from anyone else is refused (``CommandRefused``) and clears
  nothing. A report for a due time no fire decided is refused too.

Time is an argument: each command carries the instant it is about (``at``, or the fire's
``now``). The worker does not take the sender's word for it: ``admission.admit`` judges it
by the worker's own clock before ``decide`` sees the command.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from tidings.core.aggregate import Decision, Defer, Ignore, Persist
from tidings.core.schedule.due_times import FireRefused, Pause, decide_fire, next_due
from tidings.core.schedule.rules import CatchUp, ScheduleRule
from tidings.core.schedule.runs import format_due, utc
from tidings.errors import CommandRefused

SCHEDULE_AGGREGATE: Final = "schedule"
"""The aggregate name every app's schedules are stored under (a persistent contract)."""

Status = Literal["absent", "active", "paused", "deleted"]


def _aware(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def _rule_data(value: Any) -> dict[str, Any]:
    # Validate on the way in so a command with a nonsense rule fails at decoding, not
    # in every later fire.
    if isinstance(value, ScheduleRule):
        return value.to_data()
    return ScheduleRule.from_data(value).to_data()


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- commands -------------------------------------------------------------------------------


class _Content(_Model):
    """What a create or a change sets: the workflow, its input, the rule and the catch-up."""

    workflow: str
    input: Any = None
    rule: dict[str, Any]
    catch_up: CatchUp = CatchUp.LATEST
    at: datetime

    check_rule = field_validator("rule", mode="before")(_rule_data)
    check_at = field_validator("at")(utc)


# Siblings, not parent and child: ``case CreateSchedule()`` must not match a change.
class CreateSchedule(_Content):
    __tidings_type__: ClassVar[str] = "schedule.create"


class ChangeSchedule(_Content):
    __tidings_type__: ClassVar[str] = "schedule.change"


class PauseSchedule(_Model):
    __tidings_type__: ClassVar[str] = "schedule.pause"
    at: datetime
    check_at = field_validator("at")(utc)


class ResumeSchedule(_Model):
    __tidings_type__: ClassVar[str] = "schedule.resume"
    at: datetime
    check_at = field_validator("at")(utc)


class DeleteSchedule(_Model):
    __tidings_type__: ClassVar[str] = "schedule.delete"
    at: datetime
    check_at = field_validator("at")(utc)


class FireSchedule(_Model):
    """The dispatcher's fire: ``due`` is its index's hint, ``now`` the instant of the fire.

    ``token`` is set by the worker that admits the fire (``admission.admit``), never taken
    from the sender: the runs the fire decides are stored with it, and only a report that
    carries it clears them.
    """

    __tidings_type__: ClassVar[str] = "schedule.fire"
    due: datetime
    now: datetime
    token: str = ""
    check_due = field_validator("due")(utc)
    check_now = field_validator("now")(utc)


class ReportStart(_Model):
    """The dispatcher stored the starts of the runs for ``dues`` (one report for a whole
    catch-up: a fire under ``CatchUp.ALL`` may decide a thousand runs).

    ``tokens`` are the start tokens of those runs (each distinct token once), as the journal
    stored them with the runs: the proof that a worker, which reads the journal, reports.
    """

    __tidings_type__: ClassVar[str] = "schedule.report-start"
    dues: tuple[datetime, ...]
    tokens: tuple[str, ...] = ()

    @field_validator("dues")
    @classmethod
    def _check_dues(cls, dues: tuple[datetime, ...]) -> tuple[datetime, ...]:
        return tuple(utc(due) for due in dues)


class ReadSchedule(_Model):
    """Ask for the schedule's state: answered with a deferred ``ScheduleRead``, never stored."""

    __tidings_type__: ClassVar[str] = "schedule.read"


ScheduleCommand = (
    CreateSchedule | ChangeSchedule | PauseSchedule | ResumeSchedule | DeleteSchedule
    | FireSchedule | ReportStart | ReadSchedule
)

# -- events ---------------------------------------------------------------------------------


class _Stored(_Model):
    """What a stored create or change holds (the command's content, already checked)."""

    workflow: str
    input: Any = None
    rule: dict[str, Any]
    catch_up: CatchUp
    at: datetime


# Siblings, as the commands are: ``case ScheduleCreated()`` must not match a change.
class ScheduleCreated(_Stored):
    __tidings_type__: ClassVar[str] = "schedule.created"


class ScheduleChanged(_Stored):
    __tidings_type__: ClassVar[str] = "schedule.changed"


class SchedulePaused(_Model):
    __tidings_type__: ClassVar[str] = "schedule.paused"
    at: datetime


class ScheduleResumed(_Model):
    __tidings_type__: ClassVar[str] = "schedule.resumed"
    at: datetime


class ScheduleDeleted(_Model):
    __tidings_type__: ClassVar[str] = "schedule.deleted"
    at: datetime


class RunsDecided(_Model):
    """A fire's decision: ``runs`` (oldest first) start with ``workflow`` and ``input``, and
    every due time at or before ``through`` is handled. ``token``: the runs' start token
    (empty in runs decided before tokens existed)."""

    __tidings_type__: ClassVar[str] = "schedule.runs-decided"
    runs: tuple[datetime, ...]
    through: datetime
    workflow: str
    input: Any = None
    token: str = ""


class RunStarted(_Model):
    """The runs for ``dues`` were started: no longer pending."""

    __tidings_type__: ClassVar[str] = "schedule.run-started"
    dues: tuple[datetime, ...]


class ScheduleRead(_Model):
    """The answer to ``ReadSchedule``: the schedule's state. Deferred, so never stored, and
    its fold changes nothing."""

    __tidings_type__: ClassVar[str] = "schedule.read-reply"
    state: ScheduleState


ScheduleEvent = (
    ScheduleCreated | ScheduleChanged | SchedulePaused | ScheduleResumed | ScheduleDeleted
    | RunsDecided | RunStarted | ScheduleRead
)

# -- state ----------------------------------------------------------------------------------


class PendingRun(_Model):
    """A decided run not yet reported started: what it starts is fixed at the decision.
    ``token``: its start token, which the report of its start must carry."""

    due: datetime
    workflow: str
    input: Any = None
    token: str = ""


class PauseSpan(_Model):
    start: datetime
    end: datetime | None = None


class ScheduleState(_Model):
    """One schedule. ``absent`` before its create; ``deleted`` for ever after its delete."""

    status: Status = "absent"
    workflow: str = ""
    input: Any = None
    rule: dict[str, Any] | None = None
    catch_up: CatchUp = CatchUp.LATEST
    anchor: datetime | None = None
    handled_through: datetime | None = None
    pauses: tuple[PauseSpan, ...] = ()
    pending: tuple[PendingRun, ...] = ()

    @property
    def schedule_rule(self) -> ScheduleRule | None:
        return None if self.rule is None else ScheduleRule.from_data(self.rule)

    def same_content(self, command: CreateSchedule) -> bool:
        """Whether a create would store what the schedule already holds."""
        return (
            self.status in ("active", "paused")
            and self.workflow == command.workflow
            and self.input == command.input
            and self.rule == command.rule
            and self.catch_up == command.catch_up
        )

    def next_due(self) -> datetime | None:
        """The next due time a fire should be made for, or ``None`` (absent, deleted,
        paused). A pending run is not a due time: the dispatcher restarts those itself."""
        rule = self.schedule_rule
        if rule is None or self.anchor is None or self.status != "active":
            return None
        floor = self.anchor if self.handled_through is None else max(self.anchor, self.handled_through)
        return next_due(rule, floor, anchor=self.anchor, pauses=self._pauses())

    def _pauses(self) -> tuple[Pause, ...]:
        return tuple(Pause(span.start, span.end) for span in self.pauses)

    def without_tokens(self) -> ScheduleState:
        """The state as a read shows it: the pending runs' start tokens blanked, since the
        read's reply goes to whoever asked."""
        if not any(run.token for run in self.pending):
            return self
        pending = tuple(run.model_copy(update={"token": ""}) for run in self.pending)
        return self.model_copy(update={"pending": pending})


ScheduleRead.model_rebuild()

INITIAL_STATE: Final = ScheduleState()

# -- decide and fold --------------------------------------------------------------------------


def decide(command: ScheduleCommand, state: ScheduleState) -> Decision:
    """Decide one schedule command from the schedule's own state (see the module's rules)."""
    match command:
        case CreateSchedule():
            if state.status != "absent":  # same content, other content, or deleted: nothing
                return Ignore()
            return Persist(ScheduleCreated(
                workflow=command.workflow, input=command.input, rule=command.rule,
                catch_up=command.catch_up, at=command.at,
            ))
        case ChangeSchedule():
            if state.status not in ("active", "paused"):
                return Ignore()
            return Persist(ScheduleChanged(
                workflow=command.workflow, input=command.input, rule=command.rule,
                catch_up=command.catch_up, at=command.at,
            ))
        case PauseSchedule():
            return Persist(SchedulePaused(at=command.at)) if state.status == "active" else Ignore()
        case ResumeSchedule():
            if state.status != "paused" or not state.pauses or command.at < state.pauses[-1].start:
                return Ignore()
            return Persist(ScheduleResumed(at=command.at))
        case DeleteSchedule():
            if state.status in ("absent", "deleted"):
                return Ignore()
            return Persist(ScheduleDeleted(at=command.at))
        case FireSchedule():
            return _fire(command, state)
        case ReadSchedule():
            return Defer(ScheduleRead(state=state.without_tokens()))
        case ReportStart():
            reported = _reported(command, state)
            return Persist(RunStarted(dues=reported)) if reported else Ignore()
        case _:
            raise TypeError(f"not a schedule command: {command!r}")


def _reported(command: ReportStart, state: ScheduleState) -> tuple[datetime, ...]:
    """The pending runs a start report clears; refuses a report no dispatcher could make.

    Every due time it names must be a pending run whose token the report carries, or one
    a fire decided that is no longer pending (a repeated report, which clears nothing).

    Raises:
        CommandRefused: a due time is pending and the report lacks its token, or no fire
            decided it (it is after every due time handled).
    """
    pending = {run.due: run for run in state.pending}
    tokens = frozenset(command.tokens)
    reported: list[datetime] = []
    for due in dict.fromkeys(command.dues):
        run = pending.get(due)
        if run is None:
            if state.handled_through is None or due > state.handled_through:
                raise CommandRefused(
                    f"schedule.report-start names {format_due(due)}, a due time no fire decided; "
                    "only the dispatcher reports the runs it started"
                )
            continue  # started and reported before: a repeat clears nothing
        if run.token and run.token not in tokens:
            raise CommandRefused(
                f"schedule.report-start for the run due {format_due(due)} lacks its start token; "
                "only the dispatcher that read the run from the journal can report its start"
            )
        reported.append(due)
    return tuple(reported)


def _fire(command: FireSchedule, state: ScheduleState) -> Decision:
    rule = state.schedule_rule
    # A paused schedule's next due time is covered by its open pause, so a fire decides
    # nothing now; the resume's fire handles the pause as decide_fire's rules say.
    if rule is None or state.anchor is None or state.status != "active":
        return Ignore()
    pauses = state._pauses()
    decision = decide_fire(
        rule, state.catch_up, due=command.due, now=command.now, anchor=state.anchor,
        handled_through=state.handled_through, pauses=pauses,
    )
    if isinstance(decision, FireRefused):
        return Ignore()
    floor = state.anchor if state.handled_through is None else max(state.anchor, state.handled_through)
    oldest = next_due(rule, floor, anchor=state.anchor, pauses=pauses)
    if not decision.runs and (oldest is None or oldest > decision.through):
        # No due time was handled (a repeated or stale fire): storing would only grow the
        # journal. Due times dropped by NONE or LATEST are handled, and must be stored, or a
        # later on-time fire would still see them as its oldest and call itself late.
        return Ignore()
    return Persist(RunsDecided(
        runs=decision.runs, through=decision.through, workflow=state.workflow, input=state.input,
        token=command.token,
    ))


def fold(event: ScheduleEvent, state: ScheduleState) -> ScheduleState:
    """Apply one stored schedule event."""
    match event:
        case ScheduleCreated() | ScheduleChanged():
            return state.model_copy(update={
                "status": "paused" if state.status == "paused" else "active",
                "workflow": event.workflow, "input": event.input, "rule": event.rule,
                "catch_up": event.catch_up, "anchor": event.at,
                # A change moves the anchor past every earlier due time: none is pending a fire.
                "handled_through": event.at,
                "pauses": tuple(p for p in state.pauses if p.end is None),
            })
        case SchedulePaused():
            return state.model_copy(update={
                "status": "paused", "pauses": (*state.pauses, PauseSpan(start=event.at)),
            })
        case ScheduleResumed():
            last = state.pauses[-1]
            closed = PauseSpan(start=last.start, end=max(event.at, last.start))
            return state.model_copy(update={"status": "active", "pauses": (*state.pauses[:-1], closed)})
        case ScheduleDeleted():
            return state.model_copy(update={"status": "deleted", "pauses": ()})
        case RunsDecided():
            runs = tuple(
                PendingRun(due=due, workflow=event.workflow, input=event.input, token=event.token)
                for due in event.runs
            )
            # Pauses that ended before ``through`` can no longer cover a due time a fire
            # serves, so the state stays bounded however often a schedule is paused.
            pauses = tuple(p for p in state.pauses if p.end is None or p.end > event.through)
            return state.model_copy(update={
                "handled_through": event.through, "pending": (*state.pending, *runs), "pauses": pauses,
            })
        case RunStarted():
            return state.model_copy(update={
                "pending": tuple(run for run in state.pending if run.due not in set(event.dues)),
            })
        case ScheduleRead():
            return state  # the same object: the live state does not diverge from the stored
        case _:
            raise TypeError(f"not a schedule event: {event!r}")


COMMAND_TYPES: Final = (
    CreateSchedule, ChangeSchedule, PauseSchedule, ResumeSchedule, DeleteSchedule, FireSchedule,
    ReportStart, ReadSchedule,
)
EVENT_TYPES: Final = (
    ScheduleCreated, ScheduleChanged, SchedulePaused, ScheduleResumed, ScheduleDeleted,
    RunsDecided, RunStarted, ScheduleRead,
)

__all__ = [
    "COMMAND_TYPES",
    "EVENT_TYPES",
    "INITIAL_STATE",
    "SCHEDULE_AGGREGATE",
    "ChangeSchedule",
    "CreateSchedule",
    "DeleteSchedule",
    "FireSchedule",
    "PauseSchedule",
    "PauseSpan",
    "PendingRun",
    "ReadSchedule",
    "ReportStart",
    "ResumeSchedule",
    "RunStarted",
    "RunsDecided",
    "ScheduleChanged",
    "ScheduleCommand",
    "ScheduleCreated",
    "ScheduleDeleted",
    "ScheduleEvent",
    "SchedulePaused",
    "ScheduleRead",
    "ScheduleResumed",
    "ScheduleState",
    "decide",
    "fold",
]
