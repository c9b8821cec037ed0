"""An activity that raises ``TimeoutError`` timed out, wherever it runs (issue 21, item 11).

The worker runs an attempt in one of three ways (``shell/kinds/workflow/activities.py``:
``run_attempt`` for async functions and sync ones with a timeout, ``ThreadedAttempts`` for a
sync call due now, ``settle_returned`` for an awaitable a sync function returned); the
in-memory runtime (``tidings.testing.workflows``) runs it synchronously or as a task. All
of them classify what the function raised with one rule (``core/workflow/attempt_ends.py``);
this test runs every kind of exception through every one of them and compares the answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from tidings import AttemptTimedOut, Retry
from tidings.core.workflow import ActivityResult, Attempt, RunActivity, WorkflowContext, define_workflow
from tidings.core.workflow.attempt_ends import attempt_raised
from tidings.core.workflow.journal import StepAttemptFailed, StepCompleted
from tidings.shell.kinds.workflow.activities import ThreadedAttempts, run_attempt, settle_returned
from tidings.testing.workflows import WorkflowTestRuntime

#: What an activity raises -> whether the attempt timed out (else it failed with the error).
RAISED: list[tuple[Exception, bool]] = [
    (AttemptTimedOut("the service did not answer"), True),
    (TimeoutError("read timed out"), True),
    (asyncio.TimeoutError(), True),
    (socket.timeout("socket"), True),
    (ValueError("bad order"), False),
    (ConnectionError("refused"), False),
]


def _effect(fn: Any, *, timeout_at: int | None = None) -> RunActivity:
    return RunActivity(path="1", name="score", attempt=1, fn=fn, idempotency_key="w/i/1",
                       not_before=0, timeout_at=timeout_at)


def _summary(result: ActivityResult) -> tuple[bool, type[BaseException] | None]:
    return result.timed_out, None if result.error is None else type(result.error)


def _raising(error: Exception) -> tuple[Callable[[Attempt], Any], Callable[[Attempt], Any], Callable[[Attempt], Any]]:
    def sync_fn(attempt: Attempt) -> Any:
        raise error

    async def async_fn(attempt: Attempt) -> Any:
        raise error

    async def awaited() -> Any:
        raise error

    return sync_fn, async_fn, lambda attempt: awaited()


def _worker_results(error: Exception) -> dict[str, ActivityResult]:
    sync_fn, async_fn, returns_awaitable = _raising(error)

    async def scenario() -> dict[str, ActivityResult]:
        loop = asyncio.get_running_loop()
        results: dict[str, ActivityResult] = {}
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            results["task"] = await run_attempt(_effect(async_fn), Attempt("w/i/1", 1), executor, time.time)
            far = int((time.time() + 60) * 1000)
            results["executor"] = await run_attempt(_effect(sync_fn, timeout_at=far), Attempt("w/i/1", 1),
                                                    executor, time.time)
        ended: list[Any] = []
        threaded = ThreadedAttempts(1, loop, ended.extend)
        threaded.submit("t", _effect(sync_fn), Attempt("w/i/1", 1))
        for _ in range(500):
            if ended:
                break
            await asyncio.sleep(0.01)
        threaded.close()
        results["threads"] = ended[0][3]
        results["returned"] = await settle_returned(_effect(returns_awaitable), returns_awaitable(Attempt("w/i/1", 1)))
        return results

    return asyncio.run(scenario())


def _runtime_results(error: Exception) -> dict[str, ActivityResult]:
    sync_fn, async_fn, returns_awaitable = _raising(error)
    attempt = Attempt("w/i/1", 1)
    results = {
        "sync": WorkflowTestRuntime._call(_effect(sync_fn), attempt),
        "async": WorkflowTestRuntime._call(_effect(async_fn), attempt),
        "returned": WorkflowTestRuntime._call(_effect(returns_awaitable), attempt),
    }

    async def concurrently() -> None:
        results["task"] = await WorkflowTestRuntime._call_async(_effect(async_fn), attempt)
        results["thread"] = await WorkflowTestRuntime._call_async(_effect(sync_fn), attempt)

    asyncio.run(concurrently())
    return results


@pytest.mark.parametrize(("error", "timed_out"), RAISED, ids=[type(e).__name__ for e, _ in RAISED])
def test_the_worker_and_the_runtime_classify_what_an_activity_raised_alike(error: Exception, timed_out: bool) -> None:
    expected = (True, None) if timed_out else (False, type(error))
    assert _summary(attempt_raised("1", 1, error)) == expected
    worker = {how: _summary(result) for how, result in _worker_results(error).items()}
    runtime = {how: _summary(result) for how, result in _runtime_results(error).items()}
    assert worker == dict.fromkeys(worker, expected), f"the worker: {worker}"
    assert runtime == dict.fromkeys(runtime, expected), f"the runtime: {runtime}"


def test_a_timeout_error_in_the_runtime_is_retried_even_where_the_filter_would_give_up() -> None:
    """A timed-out attempt is always worth another (``RetryPolicy.retry_on``), as in the worker."""
    calls: list[int] = []

    def flaky(attempt: Attempt) -> int:
        calls.append(attempt.number)
        if attempt.number == 1:
            raise TimeoutError("the scoring service did not answer in 2 s")
        return 30

    async def body(ctx: WorkflowContext, order: str) -> int:
        policy = Retry.times(3).replace(retry_on=(ValueError,))  # TimeoutError is not listed
        return int(await ctx.activity("score", policy, flaky))

    runtime = WorkflowTestRuntime()
    enrich = runtime.register(define_workflow("enrich", body, input_type=str))
    enrich.start("order-17", "ABC")
    assert enrich.value("order-17", timedelta(minutes=5)) == 30
    assert calls == [1, 2]
    failed = [r for r in enrich.journal("order-17") if isinstance(r, StepAttemptFailed)]
    assert len(failed) == 1 and failed[0].error.type == "TimeoutError"
    assert failed[0].error.message.endswith("the attempt timed out")
    assert any(isinstance(r, StepCompleted) and r.result == "30" for r in enrich.journal("order-17"))
