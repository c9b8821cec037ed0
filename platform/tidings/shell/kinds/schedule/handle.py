"""``app.schedules([workflow, ...])``'s handle: create, change, pause, resume, delete, state.

A schedule is the aggregate ``schedule`` (``core/schedule/aggregate.py``), declared by
``declare_schedules`` like any other aggregate (``App.schedules`` hosts it and the
dispatcher with ``app.host``), so the worker hosts it with no code of its own
and every call here is a command answered through the app's replies topic. The handle
checks what it can before sending (the workflow is one of the listed ones, the id fits its
run ids, the input is JSON), stamps each command with this process's clock, and reads the
state back when a create stores nothing, to tell a repeated create from a conflicting one.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ....core.limits import check_id
from ....core.schedule import aggregate as schedule_aggregate
from ....core.schedule import MAX_SCHEDULE_ID_BYTES, CatchUp, ScheduleRule
from ....core.schedule.admission import admit
from ....core.records import CommandEnvelope
from ....core.schedule.aggregate import (
    ChangeSchedule,
    CreateSchedule,
    DeleteSchedule,
    FireSchedule,
    PauseSchedule,
    ReadSchedule,
    ResumeSchedule,
    ScheduleCommand,
    ScheduleRead,
    ScheduleState,
)
from ....errors import DefinitionError
from .dispatcher import ScheduleDispatcher
from ..aggregate.declare import declare_aggregate
from ..aggregate.handle import AggregateHandle
from ..workflow.handle import WorkflowHandle, workflow_named
from ...runtime.context import KindContext
from ...runtime.hosting import Runtime
from .store import ScheduleStore
from ...runtime.topics import TopicSpec

#: Schedules a worker keeps in memory per partition of the schedule aggregate.
SCHEDULE_CACHE_SIZE = 1_000
#: RocksDB memtable size of the schedule aggregate's store on a worker.
SCHEDULE_WRITE_BUFFER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class ScheduleHandle:
    """What ``app.schedules`` returns: the schedule aggregate and the workflows it may start.

    ``clock`` gives the instant each command is about (the creation, change, pause, resume
    or delete); it is this process's clock, and a test may pass its own.
    """

    aggregate: AggregateHandle[Any, Any, ScheduleState]
    workflows: tuple[str, ...]
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    async def create(
        self,
        schedule_id: str,
        workflow: WorkflowHandle | str,
        input: Any,
        rule: ScheduleRule,
        catch_up: CatchUp = CatchUp.LATEST,
    ) -> None:
        """Create schedule ``schedule_id``: start ``workflow`` with ``ScheduledRun(id, due,
        input)`` at each due time of ``rule``. Returns once the schedule is stored.

        A create with the same content as the stored schedule stores nothing and returns,
        so a program can create its schedules at every start.

        Raises:
            ValueError: the workflow is not one ``app.schedules`` listed, the id is unusable (``LimitError``),
                the input is not JSON, the id holds a schedule with other content, or the
                id was deleted (a deleted id can never be created again).
        """
        command = CreateSchedule(
            workflow=self._workflow(workflow), input=_json(input), rule=_rule(rule),
            catch_up=CatchUp(catch_up), at=self.clock(),
        )
        if await self._send(schedule_id, command) is not None:
            return
        state = await self.state(schedule_id)
        if state.same_content(command):
            return
        if state.status == "deleted":
            raise ValueError(f"schedule {schedule_id!r} was deleted; a deleted id cannot be created again")
        raise ValueError(
            f"schedule {schedule_id!r} exists with other content ({state.workflow}, {state.input!r}, "
            f"{state.schedule_rule}, {state.catch_up}); change it with change()"
        )

    async def create_latest(self, schedule_id: str, workflow: WorkflowHandle | str, input: Any,
                            rule: ScheduleRule) -> None:
        """``create`` with ``CatchUp.LATEST``, the default policy."""
        await self.create(schedule_id, workflow, input, rule, CatchUp.LATEST)

    async def change(
        self,
        schedule_id: str,
        workflow: WorkflowHandle | str,
        input: Any,
        rule: ScheduleRule,
        catch_up: CatchUp = CatchUp.LATEST,
    ) -> None:
        """Replace the schedule's workflow, input, rule and policy; no due time at or before
        the change runs, and a run decided before it starts as it was decided.

        Raises:
            ValueError: the schedule does not exist or was deleted, or as ``create``.
        """
        command = ChangeSchedule(
            workflow=self._workflow(workflow), input=_json(input), rule=_rule(rule),
            catch_up=CatchUp(catch_up), at=self.clock(),
        )
        if await self._send(schedule_id, command) is None:
            raise ValueError(f"schedule {schedule_id!r} does not exist or was deleted")

    async def pause(self, schedule_id: str) -> bool:
        """Pause the schedule: no due time from now until the resume runs.

        Returns:
            Whether this call paused it (False: absent, deleted, or already paused).
        """
        return await self._send(schedule_id, PauseSchedule(at=self.clock())) is not None

    async def resume(self, schedule_id: str) -> bool:
        """Resume a paused schedule from the first due time after now.

        Returns:
            Whether this call resumed it (False: absent, deleted, or not paused).
        """
        return await self._send(schedule_id, ResumeSchedule(at=self.clock())) is not None

    async def delete(self, schedule_id: str) -> bool:
        """Delete the schedule for ever; runs already decided still start.

        Returns:
            Whether this call deleted it (False: absent or already deleted).
        """
        return await self._send(schedule_id, DeleteSchedule(at=self.clock())) is not None

    async def state(self, schedule_id: str) -> ScheduleState:
        """Return the schedule's state as its aggregate holds it (``status`` ``absent`` when
        it was never created)."""
        reply = await self._send(schedule_id, ReadSchedule())
        if not isinstance(reply, ScheduleRead):
            raise TypeError(f"the schedule aggregate answered a read with {reply!r}")
        return reply.state

    async def _send(self, schedule_id: str, command: ScheduleCommand) -> Any:
        _check_schedule_id(schedule_id)
        return await self.aggregate.send(schedule_id, command)

    def _workflow(self, workflow: WorkflowHandle | str) -> str:
        name = workflow if isinstance(workflow, str) else workflow.name
        if name not in self.workflows:
            raise ValueError(
                f"workflow {name!r} is not one app.schedules([...]) lists: {list(self.workflows)}"
            )
        return name


@dataclass(frozen=True)
class ScheduleDispatch:
    """The dispatcher as a hosted kind: it fires the schedules of the journal partitions a
    worker owns and starts their runs (``kinds/schedule/dispatcher.py``).

    It declares no topic of its own: it reads the schedule aggregate's journal and writes
    to its commands topic and to the inboxes of the workflows the schedules start.
    """

    context: KindContext
    aggregate: AggregateHandle[Any, Any, ScheduleState]

    @property
    def kind(self) -> str:
        return "schedule-dispatcher"

    @property
    def name(self) -> str:
        return self.aggregate.name

    def topic_specs(self) -> list[TopicSpec]:
        return []

    def open(self, runtime: Runtime) -> ScheduleDispatcher:
        store = ScheduleStore(runtime.store_path(self.kind, self.name))
        return ScheduleDispatcher(self.aggregate, workflow=self._workflow, store=store, runtime=runtime)

    def _workflow(self, name: str) -> WorkflowHandle:
        return workflow_named(self.context, name)


def admit_on_worker(envelope: CommandEnvelope, command: ScheduleCommand, now_ms: int) -> ScheduleCommand:
    """The schedule aggregate's ``admit``: the command's instants judged by this worker's
    clock, and a fire given a fresh random start token (``core/schedule/admission.py``)."""
    token = secrets.token_hex(16) if isinstance(command, FireSchedule) else ""
    return admit(command, now=datetime.fromtimestamp(now_ms / 1000, UTC), token=token,
                 asks_reply=bool(envelope.reply_to))


def _check_schedule_id(schedule_id: str) -> None:
    # Shorter than other ids, so that every run id ``{schedule}@{due}`` fits the id limit.
    check_id(schedule_id, "schedule id", max_bytes=MAX_SCHEDULE_ID_BYTES)


def _rule(rule: ScheduleRule) -> dict[str, Any]:
    if not isinstance(rule, ScheduleRule):
        raise TypeError(f"a rule is a ScheduleRule (daily, weekly or every), not {type(rule).__name__}")
    return rule.to_data()


def _json(value: Any) -> Any:
    """The input's stored, JSON form: a pydantic model as its JSON data, a plain value as is."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise ValueError(f"a schedule's input must be JSON or a pydantic model: {exc}") from exc


def workflow_names(workflows: Iterable[WorkflowHandle | str]) -> tuple[str, ...]:
    """The names of the listed workflows, checked to be handles or names."""
    names: list[str] = []
    for workflow in workflows:
        name = workflow if isinstance(workflow, str) else getattr(workflow, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"app.schedules lists workflow handles or names, not {workflow!r}")
        names.append(name)
    return tuple(dict.fromkeys(names))


def declare_schedules(
    context: KindContext, workflows: Iterable[WorkflowHandle | str]
) -> tuple[AggregateHandle[Any, Any, ScheduleState], ScheduleDispatch, ScheduleHandle]:
    """Validate ``app.schedules(workflows)``: the schedule aggregate, its dispatcher, the handle.

    ``App.schedules`` hosts the aggregate and the dispatcher (``app.host``) and returns the
    handle.

    Raises:
        DefinitionError: ``context`` declares an aggregate named ``schedule`` already.
        TypeError: ``workflows`` lists something that is no workflow handle or name.
    """
    if any(h.name == schedule_aggregate.SCHEDULE_AGGREGATE for h in context.declared("aggregate")):
        raise DefinitionError(f"App {context.name!r}.schedules", [
            f"an aggregate named {schedule_aggregate.SCHEDULE_AGGREGATE!r} is already declared: "
            "call app.schedules once, listing every workflow a schedule may start",
        ])
    names = workflow_names(workflows)
    aggregate: AggregateHandle[Any, Any, ScheduleState] = declare_aggregate(
        context, schedule_aggregate.SCHEDULE_AGGREGATE, schedule_aggregate.INITIAL_STATE,
        schedule_aggregate.decide, schedule_aggregate.fold,
        command=schedule_aggregate.COMMAND_TYPES, event=schedule_aggregate.EVENT_TYPES,
        # A schedule gets a few commands per due time: memory per idle schedule matters
        # more than a RocksDB read per command (the dispatcher keeps its own index).
        cache_size=SCHEDULE_CACHE_SIZE,
        # Small memtables too: a schedule's store sees a few small writes per due time.
        write_buffer_bytes=SCHEDULE_WRITE_BUFFER_BYTES,
        admit=admit_on_worker,
    )
    return aggregate, ScheduleDispatch(context, aggregate), ScheduleHandle(aggregate, names)


__all__ = ["ScheduleDispatch", "ScheduleHandle", "declare_schedules", "workflow_names"]
