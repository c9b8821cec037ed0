"""``app.schedules`` declares the schedule aggregate and its dispatcher once, and the app
remembers the handle (the CLI's way to it)."""

from __future__ import annotations

import pytest

from tidings import App, DefinitionError, WorkflowContext
from tidings.shell.kinds.aggregate.handle import AggregateHandle
from tidings.shell.kinds.schedule.handle import ScheduleDispatch


def test_schedules_are_an_aggregate_with_a_dispatcher_and_the_app_keeps_the_handle() -> None:
    app = App("sched-declare")
    with pytest.raises(LookupError, match="declares no schedules"):
        app.schedule_handle()

    @app.workflow("remind")
    async def remind(ctx: WorkflowContext, text: str) -> str:
        return text

    handle = app.schedules([remind])
    assert app.schedule_handle() is handle and handle.workflows == ("remind",)
    kinds = {(h.kind, h.name): h for h in app.hosted}
    aggregate = kinds[("aggregate", "schedule")]
    # The hosted aggregate is the one the handle sends to, with a small cache and memtables.
    assert isinstance(aggregate, AggregateHandle) and aggregate is handle.aggregate
    assert aggregate.cache_size == 1_000 and aggregate.write_buffer_bytes == 4 * 1024 * 1024
    dispatcher = kinds[("schedule-dispatcher", "schedule")]
    assert isinstance(dispatcher, ScheduleDispatch) and dispatcher.aggregate is aggregate
    assert dispatcher.topic_specs() == []
    with pytest.raises(DefinitionError, match="already declared"):
        app.schedules([remind])
