"""Workflows whose activities raise ``TimeoutError`` or an error their policy refuses, for
tests/integration/test_attempt_timeouts_hosted.py: ``build(name)`` is the app factory the
tidings pytest plugin builds (and its workers host) under each test's own name."""

from __future__ import annotations

from tidings import App, Attempt, Retry, WorkflowContext

#: Retries only ValueError: a TimeoutError is retried anyway (it timed out), others are not.
POLICY = Retry.times(3).replace(retry_on=(ValueError,))


def sync_score(attempt: Attempt) -> int:
    """Times out on its first attempt (a sync call due now: the worker's threads run it)."""
    if attempt.number == 1:
        raise TimeoutError("the scoring service did not answer")
    return 30


async def async_score(attempt: Attempt) -> int:
    """The same as a coroutine (the worker runs it as a task)."""
    return sync_score(attempt)


def refused(attempt: Attempt) -> int:
    raise ConnectionError("the scoring service refused the connection")


async def score_sync(ctx: WorkflowContext, order: str) -> int:
    return int(await ctx.activity("score", POLICY, sync_score))


async def score_async(ctx: WorkflowContext, order: str) -> int:
    return int(await ctx.activity("score", POLICY, async_score))


async def score_refused(ctx: WorkflowContext, order: str) -> int:
    return int(await ctx.activity("score", POLICY, refused))


def build(name: str) -> App:
    """The App named ``name`` with the three workflows."""
    app = App(name, partitions=2)
    for body in (score_sync, score_async, score_refused):
        app.workflow(body.__name__)(body)
    return app
