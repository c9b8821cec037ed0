"""ThreadedAttempts: sync attempts run in pool threads; results reach the loop in batches."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tidings.core.workflow import ActivityResult, Attempt, RunActivity
from tidings.shell.kinds.workflow.activities import ThreadedAttempts, runs_threaded


def _effect(path: str, fn: Any, *, timeout_at: int | None = None, not_before: int = 0) -> RunActivity:
    return RunActivity(path=path, name=path, attempt=1, fn=fn, idempotency_key=f"k/{path}",
                       not_before=not_before, timeout_at=timeout_at)


def test_results_errors_and_returned_awaitables_reach_the_loop_in_order_of_ending() -> None:
    delivered: list[list[tuple[str, Any]]] = []
    gate = threading.Event()

    def failing(attempt: Attempt) -> int:
        raise ValueError("nope")

    async def later() -> int:
        return 7

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        # One thread: "a" holds it until the gate opens, so "d" is still queued when cancelled.
        attempts = ThreadedAttempts(1, loop, lambda ended: delivered.append(
            [(token, result) for token, _, _, result in ended]))
        # Held until all are submitted, so they end while the loop is busy here.
        attempts.submit("a", _effect("a", lambda a: gate.wait(5) and 41 + 1), Attempt("k/a", 1))
        attempts.submit("b", _effect("b", failing), Attempt("k/b", 1))
        attempts.submit("c", _effect("c", lambda a: later()), Attempt("k/c", 1))
        skipped = attempts.submit("d", _effect("d", lambda a: 1 / 0), Attempt("k/d", 1))
        skipped.cancel()
        gate.set()
        for _ in range(200):
            if sum(len(batch) for batch in delivered) >= 3:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        attempts.close()

    asyncio.run(scenario())
    results = dict(item for batch in delivered for item in batch)
    assert "d" not in results  # cancelled before a thread took it
    assert results["a"] == ActivityResult("a", 1, value=42)
    assert isinstance(results["b"], ActivityResult) and isinstance(results["b"].error, ValueError)
    assert asyncio.iscoroutine(results["c"])  # the caller awaits what the function returned
    results["c"].close()
    # One loop wake-up may carry several results.
    assert len(delivered) <= 3


def test_only_sync_calls_due_now_without_a_timeout_run_threaded() -> None:
    async def coroutine_fn(attempt: Attempt) -> int:
        return 1

    assert runs_threaded(_effect("x", lambda a: 1), now_s=100.0)
    assert not runs_threaded(_effect("x", lambda a: 1, timeout_at=200_000), now_s=100.0)
    assert not runs_threaded(_effect("x", lambda a: 1, not_before=150_000), now_s=100.0)
    assert not runs_threaded(_effect("x", coroutine_fn), now_s=100.0)


def test_attempts_submitted_back_to_back_run_at_once_up_to_the_thread_count() -> None:
    began = threading.Semaphore(0)
    release = threading.Event()
    delivered: list[str] = []

    def blocking(attempt: Attempt) -> int:
        began.release()
        release.wait(5)
        return 1

    async def scenario() -> int:
        attempts = ThreadedAttempts(3, asyncio.get_running_loop(),
                                    lambda ended: delivered.extend(t for t, _, _, _ in ended))
        for round_ in range(2):  # the second round reuses the threads the first one started
            for n in range(3):
                attempts.submit(f"{round_}-{n}", _effect(f"p{n}", blocking), Attempt(f"k{n}", 1))
            running = sum(began.acquire(timeout=2) for _ in range(3))
            release.set()
            while len(delivered) < 3 * (round_ + 1):
                await asyncio.sleep(0.01)
            release.clear()
            if running != 3:
                return running
        attempts.close()
        return 3

    assert asyncio.run(asyncio.wait_for(scenario(), 20)) == 3
