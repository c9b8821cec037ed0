"""The schedule aggregate's rules, pure: create, change, pause, resume, delete, fire, report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter

from tidings.codec.payloads import type_registry
from tidings.core.aggregate import AggregateDefinition, AggregateInstance, Ignore, Persist, handle, restore
from tidings.core.records import CommandEnvelope
from tidings.core.schedule import MAX_CATCH_UP_RUNS, CatchUp, ScheduleRule
from tidings.core.schedule.aggregate import (
    COMMAND_TYPES,
    EVENT_TYPES,
    INITIAL_STATE,
    SCHEDULE_AGGREGATE,
    ChangeSchedule,
    CreateSchedule,
    DeleteSchedule,
    FireSchedule,
    PauseSchedule,
    ReportStart,
    ResumeSchedule,
    RunsDecided,
    RunStarted,
    ScheduleCommand,
    ScheduleCreated,
    ScheduleState,
    decide,
    fold,
)

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
EVERY_10S = ScheduleRule.every(10 * SECOND)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def create(**overrides: Any) -> CreateSchedule:
    fields: dict[str, Any] = {
        "workflow": "remind", "input": "Drink water", "rule": EVERY_10S, "at": T0,
    }
    fields.update(overrides)
    return CreateSchedule(**fields)


def apply(state: ScheduleState, *commands: ScheduleCommand) -> ScheduleState:
    """Decide and fold each command in turn, as the hosted aggregate does."""
    for command in commands:
        decision = decide(command, state)
        if isinstance(decision, Persist):
            state = fold(decision.event, state)
    return state


def fire(state: ScheduleState, due: datetime, now: datetime) -> tuple[ScheduleState, tuple[datetime, ...]]:
    """Fire, returning the new state and the due times the fire decided."""
    decision = decide(FireSchedule(due=due, now=now), state)
    if isinstance(decision, Ignore):
        return state, ()
    assert isinstance(decision, Persist) and isinstance(decision.event, RunsDecided)
    return fold(decision.event, state), decision.event.runs


def created() -> ScheduleState:
    return apply(INITIAL_STATE, create())


def test_create_stores_the_schedule_and_its_first_due_time() -> None:
    decision = decide(create(), INITIAL_STATE)
    assert isinstance(decision, Persist) and isinstance(decision.event, ScheduleCreated)
    state = fold(decision.event, INITIAL_STATE)
    assert state.status == "active"
    assert (state.workflow, state.input, state.schedule_rule) == ("remind", "Drink water", EVERY_10S)
    assert state.next_due() == at(10)


def test_a_create_with_the_same_content_stores_nothing() -> None:
    state = created()
    assert state.same_content(create(at=at(500)))
    assert decide(create(at=at(500)), state) == Ignore()


def test_a_create_with_other_content_stores_nothing_and_is_told_apart() -> None:
    state = created()
    other = create(input="Eat lunch", at=at(5))
    assert decide(other, state) == Ignore()
    assert not state.same_content(other)
    assert state.input == "Drink water"


def test_a_deleted_id_can_never_be_created_again() -> None:
    state = apply(created(), DeleteSchedule(at=at(1)))
    assert state.status == "deleted"
    assert decide(create(at=at(2)), state) == Ignore()
    assert not state.same_content(create(at=at(2)))
    assert decide(ChangeSchedule(workflow="remind", rule=EVERY_10S, at=at(3)), state) == Ignore()
    assert state.next_due() is None
    assert fire(state, at(10), at(10))[1] == ()


def test_an_on_time_fire_decides_the_run_with_the_stored_workflow_and_input() -> None:
    state, runs = fire(created(), at(10), at(10.2))
    assert runs == (at(10),)
    assert [(run.due, run.workflow, run.input) for run in state.pending] == [(at(10), "remind", "Drink water")]
    assert state.next_due() == at(20)


def test_a_repeated_fire_stores_nothing() -> None:
    state, _ = fire(created(), at(10), at(10.2))
    assert decide(FireSchedule(due=at(10), now=at(10.5)), state) == Ignore()


def test_a_fire_more_than_a_second_early_is_refused() -> None:
    state = created()
    assert decide(FireSchedule(due=at(10), now=at(8.9)), state) == Ignore()
    assert fire(state, at(10), at(9.1))[1] == (at(10),)


def test_the_report_of_a_start_clears_the_pending_run_once() -> None:
    state, _ = fire(created(), at(10), at(10))
    decision = decide(ReportStart(dues=(at(10),)), state)
    assert decision == Persist(RunStarted(dues=(at(10),)))
    state = fold(decision.event, state)
    assert state.pending == ()
    assert decide(ReportStart(dues=(at(10),)), state) == Ignore()


def test_one_report_clears_many_runs_and_only_those_pending() -> None:
    state = apply(INITIAL_STATE, create(catch_up=CatchUp.ALL))
    state, runs = fire(state, at(10), at(15_005))
    assert len(runs) == 1_000
    decision = decide(ReportStart(dues=(runs[0], runs[0], runs[1], at(3))), state)
    assert decision == Persist(RunStarted(dues=(runs[0], runs[1])))
    state = fold(decision.event, state)
    assert [run.due for run in state.pending] == list(runs[2:])


def test_catch_up_latest_runs_only_the_most_recent_missed_due_time() -> None:
    _, runs = fire(created(), at(10), at(15_005))
    assert runs == (at(15_000),)


def test_catch_up_all_runs_the_most_recent_thousand_oldest_first() -> None:
    state = apply(INITIAL_STATE, create(rule=ScheduleRule.every(SECOND), catch_up=CatchUp.ALL))
    state, runs = fire(state, at(1), at(1_500.5))
    assert len(runs) == MAX_CATCH_UP_RUNS
    assert runs[0] == at(501) and runs[-1] == at(1_500)
    assert len(state.pending) == MAX_CATCH_UP_RUNS


def test_catch_up_none_runs_nothing_missed_but_later_fires_are_on_time() -> None:
    state = apply(INITIAL_STATE, create(catch_up=CatchUp.NONE))
    state, runs = fire(state, at(10), at(1_000))
    assert runs == ()
    # The dropped due times are handled and stored: the next due time's fire is on time.
    assert state.handled_through == at(1_000)
    assert fire(state, at(1_010), at(1_010.1))[1] == (at(1_010),)


def test_catch_up_none_still_runs_a_fire_fifty_seconds_late() -> None:
    state = apply(INITIAL_STATE, create(rule=ScheduleRule.every(timedelta(hours=1)), catch_up=CatchUp.NONE))
    assert fire(state, at(3_600), at(3_650))[1] == (at(3_600),)


def test_nothing_inside_a_pause_runs_and_resume_runs_the_next_due_time() -> None:
    state, _ = fire(created(), at(10), at(10))
    state = apply(state, PauseSchedule(at=at(15)))
    assert state.status == "paused" and state.next_due() is None
    assert fire(state, at(20), at(20))[1] == ()
    state = apply(state, ResumeSchedule(at=at(45)))
    assert state.next_due() == at(50)
    # A late fire after the resume (LATEST) does not pick a due time inside the pause.
    assert fire(state, at(50), at(50.1))[1] == (at(50),)


def test_a_resume_before_the_pause_or_when_not_paused_stores_nothing() -> None:
    state = apply(created(), PauseSchedule(at=at(15)))
    assert decide(ResumeSchedule(at=at(14)), state) == Ignore()
    assert decide(ResumeSchedule(at=at(16)), created()) == Ignore()
    assert decide(PauseSchedule(at=at(16)), state) == Ignore()


def test_a_change_moves_the_anchor_and_no_earlier_due_time_runs() -> None:
    state = apply(created(), ChangeSchedule(
        workflow="remind2", input="Stretch", rule=ScheduleRule.every(30 * SECOND), at=at(25),
    ))
    assert state.next_due() == at(55)
    # A fire for the old due time 20 s (a stale index) decides nothing.
    assert fire(state, at(20), at(26))[1] == ()
    state, runs = fire(state, at(55), at(55))
    assert runs == (at(55),)
    assert (state.pending[0].workflow, state.pending[0].input) == ("remind2", "Stretch")


def test_a_run_decided_before_a_change_pause_or_delete_keeps_what_was_stored() -> None:
    state, _ = fire(created(), at(10), at(10))
    state = apply(
        state,
        ChangeSchedule(workflow="other", input="Other", rule=EVERY_10S, at=at(11)),
        PauseSchedule(at=at(12)),
        DeleteSchedule(at=at(13)),
    )
    assert state.status == "deleted"
    assert [(run.due, run.workflow, run.input) for run in state.pending] == [(at(10), "remind", "Drink water")]
    assert isinstance(decide(ReportStart(dues=(at(10),)), state), Persist)


def test_a_change_while_paused_stays_paused() -> None:
    state = apply(created(), PauseSchedule(at=at(12)), ChangeSchedule(workflow="w", rule=EVERY_10S, at=at(13)))
    assert state.status == "paused" and state.next_due() is None
    state = apply(state, ResumeSchedule(at=at(14)))
    assert state.next_due() == at(23)


def test_pauses_that_ended_before_a_fire_are_dropped_from_the_state() -> None:
    state = created()
    for index in range(5):
        state = apply(state, PauseSchedule(at=at(100 * index + 1)), ResumeSchedule(at=at(100 * index + 2)))
    state, _ = fire(state, at(1_000), at(1_000))
    assert state.pauses == ()


def test_commands_carry_aware_instants_and_valid_rules_only() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="time zone"):
        PauseSchedule(at=datetime(2026, 1, 1))
    with pytest.raises(ValidationError, match="unknown rule kind"):
        create(rule={"kind": "hourly"})


def _definition() -> AggregateDefinition[Any, Any, ScheduleState]:
    return AggregateDefinition(
        SCHEDULE_AGGREGATE, INITIAL_STATE, decide, fold,
        type_registry(COMMAND_TYPES), type_registry(EVENT_TYPES),
    )


def test_hosted_as_an_ordinary_aggregate_its_journal_rebuilds_the_state() -> None:
    from tidings.codec.payloads import payload_of

    definition = _definition()
    instance: AggregateInstance[ScheduleState] = AggregateInstance.new("ada-daily", INITIAL_STATE)
    stored = []
    for number, command in enumerate([create(), FireSchedule(due=at(10), now=at(10)), PauseSchedule(at=at(11))]):
        envelope = CommandEnvelope(
            command_id=f"c{number}", correlation_id=f"c{number}", aggregate_id="ada-daily",
            type=type(command).__tidings_type__, payload=b"{}", timestamp_ms=0,
        )
        handled = handle(definition, instance, envelope, command, now_ms=0, encode=payload_of)
        instance = handled.instance
        stored.extend(handled.stored)
    assert [event.version for event in stored] == [1, 2, 3]
    assert [event.type for event in stored] == ["schedule.created", "schedule.runs-decided", "schedule.paused"]

    rebuilt: AggregateInstance[ScheduleState] = AggregateInstance.new("ada-daily", INITIAL_STATE)
    for event in stored:
        value = definition.event_types[event.type].model_validate_json(event.payload)
        next_instance = restore(definition, rebuilt, event, value)
        assert next_instance is not None
        rebuilt = next_instance
    assert rebuilt.state == instance.state
    # The state round-trips through the JSON the aggregate store keeps in RocksDB.
    adapter = TypeAdapter(ScheduleState)
    assert adapter.validate_json(adapter.dump_json(rebuilt.state)) == rebuilt.state


def test_a_read_answers_the_state_and_stores_nothing() -> None:
    from tidings.core.aggregate import Defer
    from tidings.core.schedule.aggregate import ReadSchedule, ScheduleRead

    state = created()
    decision = decide(ReadSchedule(), state)
    assert decision == Defer(ScheduleRead(state=state))
    assert fold(decision.event, state) is state
    assert ReadSchedule in COMMAND_TYPES and ScheduleRead in EVENT_TYPES
