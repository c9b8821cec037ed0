"""The schedule dispatcher on the real broker: every(1 s) schedules start one workflow per due
time; pause, resume, change and delete hold; catch-up after missed due times follows the
policy; SIGKILLs between decide and start, and between start and report, leave exactly one
instance per due time, whose activity ran once.

The workflow ``remind`` (``schedule_apps.py``) logs one line per activity call with its run
id, so a test counts the runs of each due time.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tidings import CatchUp, ScheduleRule
from tidings.testing import assert_eventually
from tests.schedules_kit import SECOND, Scheduled, assert_once_each, assert_one_run_each, decided, run, scheduled

__all__ = ["scheduled"]  # the fixture, imported for pytest


def test_an_every_second_schedule_runs_each_due_time_once_and_pause_change_delete_hold(
    scheduled: Scheduled,
) -> None:
    workers = scheduled.workers()
    try:
        workers.start("w1")
        schedules = scheduled.schedules
        run(schedules.create("tick", "remind", {"n": 1}, SECOND, CatchUp.ALL))
        assert_eventually(lambda: len(scheduled.dues("tick")) >= 4, timeout=60, message=workers.log_tail())
        state = run(schedules.state("tick"))
        assert state.anchor is not None and all(due > state.anchor for due in scheduled.dues("tick"))

        run(schedules.pause("tick"))
        paused = run(schedules.state("tick")).pauses[-1].start
        count = len(scheduled.dues("tick"))
        # Up to one run decided just before the pause may still start; nothing after it.
        time.sleep(3)
        assert len(scheduled.dues("tick")) <= count + 1
        assert all(due < paused for due in scheduled.dues("tick"))
        run(schedules.resume("tick"))
        resumed = run(schedules.state("tick")).pauses
        assert_eventually(lambda: any(d > paused for d in scheduled.dues("tick")), timeout=30,
                          message=workers.log_tail())
        resumed_at = max(p.end for p in resumed if p.end is not None)
        assert not [d for d in scheduled.dues("tick") if paused <= d <= resumed_at]

        run(schedules.change("tick", "remind", {"n": 2}, SECOND, CatchUp.ALL))
        changed = run(schedules.state("tick")).anchor
        assert changed is not None
        assert_eventually(lambda: any(i == {"n": 2} for _, _, _, i in scheduled.runs()), timeout=30)
        # Each run carries the input stored when it was decided: n=2 only after the change.
        assert all((due > changed) == (data == {"n": 2}) for _, due, _, data in scheduled.runs())

        assert run(schedules.delete("tick")) is True
        deleted = datetime.now(UTC)
        time.sleep(3)
        after = [d for d in scheduled.dues("tick") if d > deleted + timedelta(seconds=1)]
        assert after == []
        dues = scheduled.dues("tick")
        assert len(dues) == len(set(dues))  # one run per due time
    finally:
        workers.kill_all()


@pytest.mark.parametrize("point", ["before-start", "before-report"])
def test_a_sigkill_inside_decide_start_report_leaves_one_run_per_due_time(
    scheduled: Scheduled, point: str,
) -> None:
    workers = scheduled.workers(SCHEDULE_CRASH=point)
    try:
        worker = workers.start("w1")
        killed_pid = worker.pid
        run(scheduled.schedules.create("tick", "remind", "x", SECOND, CatchUp.ALL))
        assert_eventually(lambda: (scheduled.calls / f"crashed-{point}").exists(), timeout=60,
                          message=workers.log_tail())
        assert_eventually(lambda: not worker.running, timeout=10)
        crashed_at = datetime.now(UTC)
        workers.start("w2", data_dir=worker.data_dir)
        assert_eventually(lambda: len([d for d in scheduled.dues("tick") if d > crashed_at]) >= 3,
                          timeout=90, message=workers.log_tail())
        assert_one_run_each(scheduled, "tick", killed_pid)
        # The due time the crash cut was run by the restarted worker (the first one).
        assert min(scheduled.dues("tick")) <= crashed_at
    finally:
        workers.kill_all()


def test_catch_up_after_1500_missed_due_times_follows_the_policy(scheduled: Scheduled) -> None:
    """Created 1,500.5 s ago with no worker firing since: as if the workers were down for
    1,500 due times of every(1 s). A backdated creation is what the aggregate sees after
    such a downtime: its anchor is that old and nothing was handled since."""
    now = datetime.now(UTC)
    backdated = dataclasses.replace(scheduled.schedules, clock=lambda: now - timedelta(seconds=1500.5))
    workers = scheduled.workers()
    try:
        workers.start("w1")

        async def create() -> None:
            await backdated.create("all", "remind", "all", SECOND, CatchUp.ALL)
            await backdated.create("latest", "remind", "latest", SECOND, CatchUp.LATEST)
            await backdated.create("none", "remind", "none", SECOND, CatchUp.NONE)
            # every 60 s, created 110 s ago: its first due time was 50 s ago, and a fire 50 s
            # late is still on time, so it runs even under NONE.
            late = dataclasses.replace(scheduled.schedules, clock=lambda: now - timedelta(seconds=110))
            await late.create("late", "remind", "late", ScheduleRule.every(timedelta(seconds=60)), CatchUp.NONE)

        run(create())
        assert_eventually(lambda: len(scheduled.dues("all")) >= 1_000, timeout=120, message=workers.log_tail())
        assert_eventually(lambda: scheduled.dues("late"), timeout=30)
        assert_eventually(lambda: len(scheduled.dues("none")) >= 2, timeout=30)

        # ALL: the first fire decided the 1,000 most recent due times, oldest first, each run once.
        first = decided(scheduled, "all")[0]
        assert len(first) == 1_000 and first == sorted(first)
        assert first[0] >= now - timedelta(seconds=1002) and first[-1] <= now + timedelta(seconds=30)
        assert_once_each(scheduled.dues("all"))
        assert set(first) <= set(scheduled.dues("all"))
        missed_until = now - timedelta(seconds=1)
        # LATEST: one run for the missed ones (the most recent), then on time again.
        latest = sorted(scheduled.dues("latest"))
        assert len([d for d in latest if d <= missed_until]) <= 1 and latest[0] >= now - timedelta(seconds=3)
        # NONE: nothing missed runs; it waits for the next due time.
        assert min(scheduled.dues("none")) >= now - timedelta(seconds=1)
        assert abs((min(scheduled.dues("late")) - (now - timedelta(seconds=50))).total_seconds()) < 1
    finally:
        workers.kill_all()


def dispatched_partitions(log_path: Path) -> set[int]:
    """The journal partitions a worker's dispatcher made ready (from its log)."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return {int(line.split("partition ", 1)[1].split()[0])
            for line in text.splitlines() if "schedule dispatcher: partition" in line}


def test_two_workers_share_the_schedules_and_a_sigkill_moves_them_without_a_gap_or_a_repeat(
    scheduled: Scheduled,
) -> None:
    workers = scheduled.workers()
    names = [f"s{n}" for n in range(8)]
    try:
        first = workers.start("w1")
        second = workers.start("w2")

        async def create() -> None:
            for name in names:
                await scheduled.schedules.create(name, "remind", name, SECOND, CatchUp.LATEST)

        # Both dispatch: the journal's partitions are spread over the two workers. Only then
        # are the schedules made, so no run is in flight while the second worker joins (a
        # rebalance then aborts its transaction and its activity runs again, as it may).
        assert_eventually(lambda: dispatched_partitions(first.log_path) and dispatched_partitions(second.log_path),
                          timeout=90, message=workers.log_tail())
        run(create())
        assert_eventually(lambda: all(len(scheduled.dues(n)) >= 3 for n in names), timeout=60,
                          message=workers.log_tail())
        killed_at, killed_pid = datetime.now(UTC), first.pid
        first.kill()
        # The survivor takes every partition over and goes on from where the journal says.
        assert_eventually(lambda: dispatched_partitions(second.log_path) >= set(range(4)), timeout=90,
                          message=second.log_tail())
        assert_eventually(
            lambda: all(len([d for d in scheduled.dues(n) if d > killed_at + timedelta(seconds=3)]) >= 3
                        for n in names),
            timeout=90, message=second.log_tail(),
        )
        for name in names:
            assert_one_run_each(scheduled, name, killed_pid)
    finally:
        workers.kill_all()
