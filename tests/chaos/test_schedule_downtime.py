"""A worker SIGKILLed and down for more than a minute: on its restart each schedule catches
up as its policy says, from the journal alone (the data directory is kept, so RocksDB also
holds the due-time index the restart rebuilds its timers from).

Every(1 s) schedules under ALL, LATEST and NONE; down 65 s, so every missed due time is
more than the one-minute grace old when the restarted dispatcher fires.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from tidings import CatchUp
from tidings.testing import assert_eventually
from tests.schedules_kit import SECOND, Scheduled, assert_one_run_each, decided, run, scheduled

__all__ = ["scheduled"]  # the fixture, imported for pytest

DOWN_S = 65.0


def test_a_restart_after_65_s_down_catches_up_all_latest_and_none(scheduled: Scheduled) -> None:
    workers = scheduled.workers()
    try:
        worker = workers.start("w1")

        async def create() -> None:
            for policy in (CatchUp.ALL, CatchUp.LATEST, CatchUp.NONE):
                await scheduled.schedules.create(policy.value, "remind", policy.value, SECOND, policy)

        run(create())
        assert_eventually(lambda: all(len(scheduled.dues(p.value)) >= 2 for p in CatchUp), timeout=60,
                          message=workers.log_tail())
        killed, killed_pid = datetime.now(UTC), worker.pid
        worker.kill()
        time.sleep(DOWN_S)
        restarted = datetime.now(UTC)
        workers.start("w2", data_dir=worker.data_dir)
        assert_eventually(
            lambda: all(len([d for d in scheduled.dues(p.value) if d > restarted + timedelta(seconds=5)]) >= 2
                        for p in CatchUp),
            timeout=90, message=workers.log_tail(),
        )
        missed = (killed + timedelta(seconds=1), restarted)

        def inside(policy: CatchUp) -> list[datetime]:
            return [d for d in scheduled.dues(policy.value) if missed[0] < d < missed[1]]

        # ALL: every missed due time ran once, oldest first in one decision, none skipped.
        assert len(inside(CatchUp.ALL)) >= DOWN_S - 2
        for policy in CatchUp:
            assert_one_run_each(scheduled, policy.value, killed_pid, consecutive=policy is CatchUp.ALL)
        catch_up = next(runs for runs in decided(scheduled, "all") if len(runs) > 10)
        assert catch_up == sorted(catch_up)
        # LATEST: one run for the whole downtime, the most recent missed due time.
        assert len(inside(CatchUp.LATEST)) <= 1
        latest = sorted(scheduled.dues("latest"))
        after_kill = [d for d in latest if d > killed + timedelta(seconds=1)]
        assert after_kill and after_kill[0] >= restarted - timedelta(seconds=1)
        # NONE: nothing missed ran.
        assert inside(CatchUp.NONE) == []
    finally:
        workers.kill_all()
