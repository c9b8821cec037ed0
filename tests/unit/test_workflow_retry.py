"""Retry policies: pure decisions, and how an activity step follows them."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from tidings.core.workflow import (
    ActivityResult,
    Attempt,
    Ended,
    ErrorKind,
    Finished,
    GiveUp,
    Retry,
    RetryAt,
    RetryPolicy,
    RunActivity,
    Start,
    StepAttemptFailed,
    StepCompleted,
    StepError,
    StepFailed,
    WorkflowContext,
    WorkflowInstance,
    define_workflow,
)
from tidings.errors import WorkflowStepFailed
from tidings.testing.workflows import AttemptTimedOut, WorkflowTestRuntime


class Flaky:
    """An activity that fails ``failures`` times (forever by default), noting when it ran."""

    def __init__(self, runtime: WorkflowTestRuntime, failures: int = 10**9, error: Exception | None = None) -> None:
        self.runtime = runtime
        self.failures = failures
        self.error = error or ConnectionError("down")
        self.at: list[float] = []  # seconds since the runtime's start

    def __call__(self, attempt: Attempt) -> str:
        self.at.append((self.runtime.clock.now_ms - self.start) / 1000)
        if len(self.at) <= self.failures:
            raise self.error
        return "ok"

    @property
    def start(self) -> int:
        return 1_767_225_600_000  # tidings.testing.workflows.DEFAULT_START


def _run(policy: RetryPolicy, fn: Flaky, *, type: object = None) -> tuple[WorkflowTestRuntime, object]:
    runtime = fn.runtime

    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            return await ctx.activity("call", policy, fn, type=type)
        except WorkflowStepFailed as failed:
            return f"{failed.error.kind.value}: {failed.error.message}"

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.advance(timedelta(hours=3))
    return runtime, handle.outcome("i")


def test_retry_times_3_makes_exactly_3_attempts_with_growing_delays() -> None:
    flaky = Flaky(WorkflowTestRuntime())
    _, outcome = _run(Retry.times(3), flaky)
    assert flaky.at == [0, 1, 3]
    assert isinstance(outcome, Finished) and outcome.value.startswith("attempts_exhausted: 3 attempt(s) failed")


def test_retry_times_succeeds_on_a_later_attempt() -> None:
    flaky = Flaky(WorkflowTestRuntime(), failures=2)
    _, outcome = _run(Retry.times(3), flaky)
    assert outcome == Finished("ok")
    assert flaky.at == [0, 1, 3]


def test_retry_none_makes_one_attempt() -> None:
    flaky = Flaky(WorkflowTestRuntime())
    _, outcome = _run(Retry.none, flaky)
    assert flaky.at == [0]
    assert isinstance(outcome, Finished) and outcome.value.startswith("attempts_exhausted")


def test_retry_forever_stops_at_the_deadline_measured_from_the_stored_start() -> None:
    flaky = Flaky(WorkflowTestRuntime())
    _, outcome = _run(Retry.forever(timedelta(seconds=10)), flaky)
    assert flaky.at == [0, 1, 3, 7]  # the next attempt, at 15 s, would be past the deadline
    assert isinstance(outcome, Finished) and outcome.value.startswith("deadline_exceeded")


def test_a_restart_begins_attempts_again_but_does_not_extend_the_deadline() -> None:
    runtime = WorkflowTestRuntime()
    flaky = Flaky(runtime)

    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            return await ctx.activity("call", Retry.forever(timedelta(seconds=10)), flaky)
        except WorkflowStepFailed as failed:
            return failed.error.kind.value

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.advance(timedelta(seconds=5))  # attempts at 0, 1, 3; the next is due at 7
    runtime.restart()
    runtime.advance(timedelta(minutes=1))
    assert flaky.at == [0, 1, 3, 5, 6, 8]
    assert handle.outcome("i") == Finished("deadline_exceeded")


def test_an_activity_whose_deadline_passed_while_down_fails_without_another_attempt() -> None:
    runtime = WorkflowTestRuntime()
    flaky = Flaky(runtime)

    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            return await ctx.activity("call", Retry.forever(timedelta(minutes=10)), flaky)
        except WorkflowStepFailed as failed:
            return failed.error.kind.value

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.run_until_idle()
    runtime.crash()
    runtime.clock.advance(timedelta(hours=1))
    runtime.recover()
    runtime.run_until_idle()
    assert flaky.at == [0]
    assert handle.outcome("i") == Finished("deadline_exceeded")


def test_retry_on_rejects_other_exceptions_as_not_retryable() -> None:
    flaky = Flaky(WorkflowTestRuntime(), error=ValueError("bad request"))
    _, outcome = _run(Retry.times(5).replace(retry_on=(ConnectionError,)), flaky)
    assert flaky.at == [0]
    assert isinstance(outcome, Finished) and outcome.value.startswith("not_retryable: attempt 1: ValueError: bad request")


def test_retry_on_accepts_a_predicate() -> None:
    flaky = Flaky(WorkflowTestRuntime(), failures=1, error=ValueError("retry me"))
    _, outcome = _run(Retry.times(5).replace(retry_on=lambda exc: "retry" in str(exc)), flaky)
    assert outcome == Finished("ok")


def test_an_attempt_that_timed_out_is_retried_even_when_retry_on_is_narrow() -> None:
    flaky = Flaky(WorkflowTestRuntime(), failures=1, error=AttemptTimedOut())
    policy = Retry.times(3).replace(retry_on=(ConnectionError,), attempt_timeout=timedelta(seconds=30))
    _, outcome = _run(policy, flaky)
    assert outcome == Finished("ok")


def test_a_result_that_cannot_be_stored_fails_not_retryable() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.activity("call", Retry.times(3), lambda a: object())
        except WorkflowStepFailed as failed:
            return failed.error.kind.value
        return "stored"

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.run_until_idle()
    assert handle.outcome("i") == Finished(ErrorKind.NOT_RETRYABLE.value)


def test_a_result_that_cannot_be_read_back_as_the_declared_type_fails_not_retryable() -> None:
    flaky = Flaky(WorkflowTestRuntime(), failures=0)
    _, outcome = _run(Retry.times(3), flaky, type=int)  # returns "ok", declared int
    assert isinstance(outcome, Finished) and outcome.value.startswith("not_retryable")
    assert flaky.at == [0]


def test_replay_raises_the_same_stored_failure_never_the_original() -> None:
    runtime = WorkflowTestRuntime()
    flaky = Flaky(runtime)
    seen: list[str] = []

    async def body(ctx: WorkflowContext, _: None) -> None:
        try:
            await ctx.activity("call", Retry.none, flaky)
        except WorkflowStepFailed as failed:
            seen.append(f"{type(failed).__name__} {failed.error.kind.value}")
        await ctx.wait_signal("end")

    handle = runtime.register(define_workflow("w", body))
    handle.start("i", None)
    runtime.run_until_idle()
    runtime.restart()
    assert seen == ["WorkflowStepFailed attempts_exhausted"] * 2
    assert flaky.at == [0]


def test_attempt_timeout_and_deadline_bound_each_attempt() -> None:
    policy = Retry.forever(timedelta(seconds=90)).replace(attempt_timeout=timedelta(seconds=60))
    first = policy.first_attempt(started_at=0, now=0)
    assert first == RetryAt(1, 0, 60_000)
    second = policy.after_failure(attempt=1, started_at=0, now=60_000, error=None, timed_out=True)
    assert second == RetryAt(2, 61_000, 90_000)  # the deadline cuts the second attempt short


def test_the_first_activity_effect_carries_the_idempotency_key_and_attempt_number() -> None:
    runtime = WorkflowTestRuntime()

    async def body(ctx: WorkflowContext, _: None) -> None:
        await ctx.activity("call", Retry.times(2), lambda a: None)

    handle = runtime.register(define_workflow("enrich", body))
    decision = handle.start("order-17", None)
    (effect,) = decision.effects
    assert isinstance(effect, RunActivity)
    assert (effect.idempotency_key, effect.attempt, effect.name) == ("enrich/order-17/1", 1, "call")


@given(st.integers(min_value=1, max_value=60))
def test_backoff_grows_from_one_second_and_never_exceeds_a_minute(failures: int) -> None:
    backoff = Retry.times(100).backoff
    delay = backoff.delay_ms(failures)
    assert 1_000 <= delay <= 60_000
    assert backoff.delay_ms(failures + 1) >= delay


@given(st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=10**7))
def test_a_decision_never_schedules_an_attempt_at_or_after_the_deadline(attempt: int, now: int) -> None:
    policy = Retry.forever(timedelta(seconds=100))
    decision = policy.after_failure(attempt=attempt, started_at=0, now=now, error=OSError())
    if isinstance(decision, RetryAt):
        assert decision.at < 100_000 and decision.attempt == attempt + 1
    else:
        assert isinstance(decision, GiveUp) and decision.error.kind is ErrorKind.DEADLINE_EXCEEDED


def test_a_steps_end_is_journaled_with_its_time_and_an_activitys_attempt() -> None:
    # For people (tidings journal, the console): when each step ended and which attempt
    # of an activity gave its result; replay reads neither.

    async def body(ctx: WorkflowContext, _: None) -> int:
        first = await ctx.activity("flaky", RetryPolicy(attempts=3), lambda: 1)
        try:
            await ctx.activity("doomed", RetryPolicy(attempts=2), lambda: 1)
        except Exception:  # noqa: BLE001 - the step's failure is what is journaled
            pass
        return first

    instance = WorkflowInstance(define_workflow("attempts", body), "a-1")
    records = list(instance.advance(Start(None), 1_000).records)
    records += instance.advance(ActivityResult("1", 1, error=RuntimeError("no")), 1_100).records
    records += instance.advance(ActivityResult("1", 2, value=7), 1_200).records
    records += instance.advance(ActivityResult("2", 1, error=RuntimeError("no")), 1_300).records
    records += instance.advance(ActivityResult("2", 2, error=RuntimeError("no")), 1_400).records
    [done] = [r for r in records if isinstance(r, StepCompleted) and r.path == "1"]
    [failed] = [r for r in records if isinstance(r, StepFailed) and r.path == "2"]
    assert (done.at, done.attempt) == (1_200, 2)
    assert (failed.at, failed.attempt) == (1_400, 2)
    replayed, decision = WorkflowInstance.replay(define_workflow("attempts", body), "a-1", records, 2_000)
    assert decision.records == () and replayed.outcome == instance.outcome


def test_a_failed_attempt_that_will_be_retried_is_journaled_and_replay_skips_it() -> None:
    # workflowjournal.v5: for people (tidings describe, journal); replay must not change.

    async def body(ctx: WorkflowContext, _: None) -> int:
        return await ctx.activity("flaky", RetryPolicy(attempts=3), lambda: 1)

    definition = define_workflow("attempts", body)
    instance = WorkflowInstance(definition, "a-1")
    records = list(instance.advance(Start(None), 1_000).records)
    first = instance.advance(ActivityResult("1", 1, error=RuntimeError("no")), 1_100)
    [failed] = first.records
    assert failed == StepAttemptFailed(3, "1", 1, StepError(None, "RuntimeError: no", "RuntimeError"), 1_100, 2_100)
    [retry] = [e for e in first.effects if isinstance(e, RunActivity)]
    assert (retry.attempt, retry.not_before) == (2, 2_100)
    records += first.records
    timed_out = instance.advance(ActivityResult("1", 2, timed_out=True), 2_200).records
    assert [(r.attempt, r.error.type, r.retry_at) for r in timed_out] == [(2, "TimeoutError", 4_200)]  # type: ignore[union-attr]
    records += timed_out
    # Mid-retry: the replayed instance issues the step again at attempt 1, exactly as one
    # whose journal holds no attempt records, and adds no record.
    with_attempts = WorkflowInstance.replay(definition, "a-1", records, 3_000)[1]
    without = WorkflowInstance.replay(
        definition, "a-1", [r for r in records if not isinstance(r, StepAttemptFailed)], 3_000)[1]
    assert with_attempts.records == without.records == ()
    assert [(e.path, e.attempt) for e in with_attempts.effects if isinstance(e, RunActivity)] == [("1", 1)]
    assert [type(e) for e in with_attempts.effects] == [type(e) for e in without.effects]
    # The last attempt ends the step: no attempt record for it, the StepFailed has its number.
    last = instance.advance(ActivityResult("1", 3, error=RuntimeError("no")), 4_300).records
    assert [type(r) for r in last] == [StepFailed, Ended]
    records += last
    replayed, decision = WorkflowInstance.replay(definition, "a-1", records, 5_000)
    assert decision.records == () and replayed.outcome == instance.outcome
    # The next seq counts the attempt records: nothing is written over them.
    assert records[-1].seq == len(records)


def test_a_failure_the_policy_gives_up_on_journals_no_attempt_record() -> None:
    async def body(ctx: WorkflowContext, _: None) -> int:
        return await ctx.activity("once", Retry.none, lambda: 1)

    instance = WorkflowInstance(define_workflow("once", body), "o-1")
    instance.advance(Start(None), 1_000)
    decided = instance.advance(ActivityResult("1", 1, error=RuntimeError("no")), 1_100).records
    assert not any(isinstance(r, StepAttemptFailed) for r in decided)
