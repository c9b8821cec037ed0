"""Stopping within a grace (docs/operations.md, "Stopping"): the setting, its budget, and the
activity pool whose threads never hold the exit. The stop itself runs against a real broker in
tests/integration/test_stop_grace.py."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tidings import App
from tidings.cli import worker as worker_cli
from tidings.shell.kinds.workflow.activities import DaemonPool
from tidings.shell.runtime.stopping import (
    DEFAULT_STOP_GRACE_S,
    Grace,
    check_stop_grace,
    parse_stop_grace,
)


def test_the_default_grace_is_under_kubernetes_thirty_seconds() -> None:
    assert DEFAULT_STOP_GRACE_S < 30
    assert App("g").worker(bootstrap="localhost:9092").stop_grace_s == DEFAULT_STOP_GRACE_S


def test_attempts_get_the_grace_less_what_the_stop_needs() -> None:
    assert Grace(25, began=0).work_s == 20  # five seconds kept to leave the group and close
    assert Grace(8, began=0).work_s == 4  # a short grace keeps half
    grace = Grace(3, began=time.monotonic())
    assert 0 < grace.work_left() <= 1.5 < grace.left() <= 3


@pytest.mark.parametrize("bad", ["-1", "0", "0.5", "nan", "inf", "3601", "soon", "", " ", "1e9"])
def test_a_bad_grace_says_what_is_allowed(bad: str) -> None:
    with pytest.raises(ValueError, match=r"^the stop grace must be a number of seconds from 1 to 3600, not "):
        parse_stop_grace(bad)


@pytest.mark.parametrize("bad", [-1, 0, float("nan"), True, "25"])
def test_a_worker_with_a_bad_grace_is_refused_when_built(bad: object) -> None:
    with pytest.raises(ValueError, match="stop grace"):
        App("g").worker(bootstrap="localhost:9092", stop_grace_s=bad)  # type: ignore[arg-type]
    assert check_stop_grace(1) == 1.0 and check_stop_grace(3600.0) == 3600.0


def _parse(argv: list[str], monkeypatch: pytest.MonkeyPatch, env: str | None = None) -> argparse.Namespace:
    if env is None:
        monkeypatch.delenv("TIDINGS_STOP_GRACE", raising=False)
    else:
        monkeypatch.setenv("TIDINGS_STOP_GRACE", env)
    parser = argparse.ArgumentParser()
    worker_cli.register(parser.add_subparsers())
    return parser.parse_args(["worker", "m:app", *argv])


def test_the_grace_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parse([], monkeypatch).stop_grace is None  # the worker's default
    assert _parse(["--stop-grace", "10"], monkeypatch).stop_grace == 10
    assert _parse([], monkeypatch, env="40").stop_grace == 40
    assert _parse(["--stop-grace", "5"], monkeypatch, env="40").stop_grace == 5


def test_a_bad_grace_stops_the_worker_command_at_once_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TIDINGS_STOP_GRACE"}
    for argv, more in ((["--stop-grace", "-3"], {}), ([], {"TIDINGS_STOP_GRACE": "half a minute"})):
        done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "worker", "m:app", *argv],
                              capture_output=True, text=True, env={**env, **more}, timeout=60)
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert "argument --stop-grace: the stop grace must be a number of seconds from 1 to 3600" in last
        assert "Traceback" not in done.stderr


def test_the_pool_runs_calls_and_carries_their_errors() -> None:
    pool = DaemonPool(2, "t")
    try:
        assert pool.submit(lambda x, y=0: x + y, 40, y=2).result(5) == 42
        with pytest.raises(ZeroDivisionError):
            pool.submit(lambda: 1 / 0).result(5)

        async def on_a_loop() -> int:
            return await asyncio.get_running_loop().run_in_executor(pool, sum, [1, 2])

        assert asyncio.run(on_a_loop()) == 3
    finally:
        pool.shutdown()


def test_the_pool_starts_threads_on_demand_up_to_its_size_and_queues_the_rest() -> None:
    pool = DaemonPool(2, "t")
    gate = threading.Event()
    held = [pool.submit(gate.wait, 5) for _ in range(3)]
    time.sleep(0.1)
    assert [f.running() for f in held] == [True, True, False]
    assert all(thread.daemon for thread in threading.enumerate() if thread.name.startswith("t_"))
    gate.set()
    assert all(f.result(5) for f in held)
    pool.shutdown(wait=True)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(print)


def test_a_queued_call_is_dropped_by_a_cancelling_shutdown() -> None:
    pool = DaemonPool(1, "t")
    gate = threading.Event()
    running, queued = pool.submit(gate.wait, 5), pool.submit(lambda: "never")
    time.sleep(0.05)
    pool.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert running.result(5) is True and queued.cancelled()


def test_a_call_still_running_does_not_hold_the_process_at_exit() -> None:
    # ThreadPoolExecutor's threads are joined at exit: a 15 s sync activity held a stopping
    # worker 15 s. The pool's are not.
    script = textwrap.dedent("""
        import time
        from tidings.shell.kinds.workflow.activities import DaemonPool
        pool = DaemonPool(4, "t")
        pool.submit(time.sleep, 30)
        time.sleep(0.1)
        pool.shutdown(wait=False, cancel_futures=True)
    """)
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", script], check=True, timeout=25)
    assert time.monotonic() - began < 10
