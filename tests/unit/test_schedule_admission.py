"""What a worker takes of a schedule command's claims, pure: the fire's clock and start
tokens, the instants of create/change/pause/resume/delete, and who may report a start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tidings.core.aggregate import Defer, Ignore, Persist
from tidings.core.schedule import CatchUp, ScheduleRule
from tidings.core.schedule.admission import AHEAD_LIMIT, admit
from tidings.core.schedule.aggregate import (
    INITIAL_STATE,
    ChangeSchedule,
    CreateSchedule,
    DeleteSchedule,
    FireSchedule,
    PauseSchedule,
    ReadSchedule,
    ReportStart,
    ResumeSchedule,
    RunsDecided,
    RunStarted,
    ScheduleCommand,
    ScheduleRead,
    ScheduleState,
    decide,
    fold,
)
from tidings.errors import CommandRefused, RecordError

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EVERY_10S = ScheduleRule.every(timedelta(seconds=10))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def on_worker(command: ScheduleCommand, now: datetime, token: str = "t-1", asks_reply: bool = False) -> Any:
    """Admit, decide and fold ``command`` as the hosted aggregate does."""
    return admit(command, now=now, token=token, asks_reply=asks_reply)


def run(state: ScheduleState, command: ScheduleCommand, now: datetime, token: str = "t-1") -> ScheduleState:
    decision = decide(on_worker(command, now, token), state)
    return fold(decision.event, state) if isinstance(decision, Persist) else state


def created(catch_up: CatchUp = CatchUp.LATEST) -> ScheduleState:
    command = CreateSchedule(workflow="remind", input="x", rule=EVERY_10S, catch_up=catch_up, at=T0)
    return run(INITIAL_STATE, command, T0)


def test_a_fire_claiming_more_than_a_second_ahead_is_refused_with_the_reason() -> None:
    with pytest.raises(CommandRefused, match=r"3\.0 s ahead of this worker's clock") as refused:
        on_worker(FireSchedule(due=at(10), now=at(10)), now=at(7))
    assert isinstance(refused.value, RecordError)  # the agent dead-letters it
    # Up to the limit it is taken, and decided at the worker's instant, not the claimed one.
    admitted = on_worker(FireSchedule(due=at(10), now=at(8) + AHEAD_LIMIT), now=at(8))
    assert admitted == FireSchedule(due=at(10), now=at(8), token="t-1")


def test_a_forged_future_fire_runs_nothing_early() -> None:
    state = created()
    # The forger claims the due time has come; the worker's clock says 5 s to go.
    with pytest.raises(CommandRefused):
        run(state, FireSchedule(due=at(10), now=at(10)), now=at(5))
    # A claim within the limit is judged at the worker's instant: still early, nothing runs.
    assert decide(on_worker(FireSchedule(due=at(10), now=at(6)), now=at(5.5)), state) == Ignore()
    assert run(state, FireSchedule(due=at(10), now=at(10)), now=at(10)).pending[0].due == at(10)


def test_a_fire_claiming_the_past_is_decided_at_the_workers_instant() -> None:
    """A fire backdated to look on time is as late as the worker's clock says: under NONE,
    a due time missed by more than a minute does not run."""
    state = created(CatchUp.NONE)
    assert run(state, FireSchedule(due=at(10), now=at(10.5)), now=at(200)).pending == ()
    assert run(state, FireSchedule(due=at(10), now=at(10.5)), now=at(10.5)).pending[0].due == at(10)


def test_a_fire_that_asks_for_a_reply_is_refused() -> None:
    with pytest.raises(CommandRefused, match="reply_to"):
        on_worker(FireSchedule(due=at(10), now=at(10)), now=at(10), asks_reply=True)


def test_the_fire_gets_the_workers_token_and_its_runs_keep_it() -> None:
    forged = FireSchedule(due=at(10), now=at(10), token="chosen-by-the-sender")
    decision = decide(on_worker(forged, now=at(10), token="drawn"), created())
    assert isinstance(decision, Persist) and isinstance(decision.event, RunsDecided)
    assert decision.event.token == "drawn"
    assert [run.token for run in fold(decision.event, created()).pending] == ["drawn"]


def test_client_instants_ahead_of_the_worker_are_the_workers_and_past_ones_are_kept() -> None:
    content: dict[str, Any] = {"workflow": "remind", "input": "x", "rule": EVERY_10S}
    for command in (CreateSchedule(**content, at=at(3600)), ChangeSchedule(**content, at=at(3600)),
                    PauseSchedule(at=at(3600)), ResumeSchedule(at=at(3600)), DeleteSchedule(at=at(3600))):
        assert on_worker(command, now=at(10)).at == at(10), command
        assert on_worker(command.model_copy(update={"at": at(-60)}), now=at(10)).at == at(-60), command
    # A pause claimed an hour ahead cannot let the next hour's due times run before it.
    paused = run(created(), PauseSchedule(at=at(3600)), now=at(5))
    assert paused.pauses[-1].start == at(5)


def test_a_report_without_the_runs_token_is_refused_and_clears_nothing() -> None:
    state = run(created(), FireSchedule(due=at(10), now=at(10)), now=at(10), token="secret")
    with pytest.raises(CommandRefused, match="lacks its start token"):
        decide(ReportStart(dues=(at(10),)), state)
    with pytest.raises(CommandRefused, match="lacks its start token"):
        decide(ReportStart(dues=(at(10),), tokens=("guess",)), state)
    assert [run.due for run in state.pending] == [at(10)]
    # The dispatcher, which read the token from the journal, clears it.
    decision = decide(ReportStart(dues=(at(10),), tokens=("secret",)), state)
    assert decision == Persist(RunStarted(dues=(at(10),)))
    cleared = fold(decision.event, state)
    # A repeat (a dispatcher that restarted before the first report was folded) clears nothing.
    assert decide(ReportStart(dues=(at(10),), tokens=("secret",)), cleared) == Ignore()


def test_a_report_for_a_due_time_no_fire_decided_is_refused() -> None:
    state = run(created(), FireSchedule(due=at(10), now=at(10)), now=at(10), token="secret")
    with pytest.raises(CommandRefused, match="no fire decided"):
        decide(ReportStart(dues=(at(10), at(20)), tokens=("secret",)), state)
    with pytest.raises(CommandRefused, match="no fire decided"):
        decide(ReportStart(dues=(at(10),)), created())


def test_a_report_of_many_runs_carries_each_token_once() -> None:
    state = run(created(CatchUp.ALL), FireSchedule(due=at(10), now=at(10)), now=at(10), token="a")
    state = run(state, FireSchedule(due=at(20), now=at(20)), now=at(20), token="b")
    assert [(r.due, r.token) for r in state.pending] == [(at(10), "a"), (at(20), "b")]
    with pytest.raises(CommandRefused):
        decide(ReportStart(dues=(at(10), at(20)), tokens=("a",)), state)
    assert decide(ReportStart(dues=(at(10), at(20)), tokens=("a", "b")), state) == Persist(
        RunStarted(dues=(at(10), at(20))))


def test_runs_decided_before_tokens_existed_are_reported_as_before() -> None:
    legacy = RunsDecided(runs=(at(10),), through=at(10), workflow="remind", input="x")
    state = fold(legacy, created())
    assert decide(ReportStart(dues=(at(10),)), state) == Persist(RunStarted(dues=(at(10),)))


def test_a_read_shows_no_token() -> None:
    state = run(created(), FireSchedule(due=at(10), now=at(10)), now=at(10), token="secret")
    decision = decide(ReadSchedule(), state)
    assert isinstance(decision, Defer) and isinstance(decision.event, ScheduleRead)
    assert [run.token for run in decision.event.state.pending] == [""]
    assert [run.due for run in decision.event.state.pending] == [at(10)]
    assert state.pending[0].token == "secret"  # the stored state keeps it
