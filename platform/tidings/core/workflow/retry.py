"""Retry policies and the pure decision of what happens after a failed attempt.

A policy never reads a clock: every decision takes the attempt number, the stored start of
the step and ``now`` (all times in integer milliseconds since the Unix epoch, UTC), so the
same inputs always give the same answer and the decision is unit-testable.

The count of attempts is not replayed (a failed attempt's ``StepAttemptFailed`` is journaled
for people, and replay skips it): after a restart the count and the backoff begin again, while the
deadline stays measured from the stored start of the step, so a restart never extends it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from tidings.core.workflow.failures import ErrorKind, StepError

RetryFilter = tuple[type[BaseException], ...] | Callable[[BaseException], bool] | None
"""Which exceptions are worth another attempt: exception types, a predicate, or None (all)."""


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``initial * factor**(n-1)`` after the n-th failure, at most ``maximum``."""

    initial: timedelta = timedelta(seconds=1)
    factor: float = 2.0
    maximum: timedelta = timedelta(minutes=1)

    def delay_ms(self, failures: int) -> int:
        """Return the wait in milliseconds after ``failures`` (>= 1) failed attempts."""
        initial = _ms(self.initial)
        maximum = _ms(self.maximum)
        delay = initial * self.factor ** max(failures - 1, 0)
        return int(min(delay, maximum))


@dataclass(frozen=True, slots=True)
class RetryAt:
    """Make attempt ``attempt`` at ``at`` (ms); give it up at ``timeout_at`` when set."""

    attempt: int
    at: int
    timeout_at: int | None


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The step fails with ``error``; no further attempt."""

    error: StepError


RetryDecision = RetryAt | GiveUp


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a step is retried.

    Attributes:
        attempts: At most this many attempts; ``None`` for no limit.
        deadline: The whole step ends at its stored start plus this; ``None`` for none.
        attempt_timeout: The time one attempt may take; ``None`` for no limit. For a
            command step, how long one send waits for its reply.
        backoff: The waits between attempts.
        retry_on: Which exceptions are worth another attempt (types or a predicate);
            ``None`` retries every ``Exception``. An attempt that timed out is always
            worth another attempt.
    """

    attempts: int | None = 1
    deadline: timedelta | None = None
    attempt_timeout: timedelta | None = None
    backoff: Backoff = Backoff()
    retry_on: RetryFilter = None

    def replace(self, **changes: Any) -> RetryPolicy:
        """Return a copy with some fields changed, e.g. ``Retry.command.replace(attempt_timeout=...)``."""
        return dataclasses.replace(self, **changes)

    def horizon(self, attempt_timeout: timedelta) -> timedelta | None:
        """How long after the step's start an attempt may still begin: the deadline, or for
        a policy with a limited number of attempts and no deadline, every attempt timing out
        (``attempt_timeout`` when the policy sets none) plus the backoffs between them;
        None when attempts go on for ever.
        """
        if self.deadline is not None:
            return self.deadline
        if self.attempts is None:
            return None
        each = _ms(self.attempt_timeout or attempt_timeout)
        waits = sum(self.backoff.delay_ms(n) for n in range(1, min(self.attempts, 64)))
        # Past 64 failures every backoff is at its maximum (or the float overflowed to it).
        waits += max(self.attempts - 64, 0) * _ms(self.backoff.maximum)
        return timedelta(milliseconds=self.attempts * each + waits)

    def deadline_at(self, started_at: int) -> int | None:
        """Return when the step started at ``started_at`` must end (ms), or None."""
        return None if self.deadline is None else started_at + _ms(self.deadline)

    def first_attempt(self, *, started_at: int, now: int) -> RetryDecision:
        """Decide the first attempt of a step, also the first after a restart.

        Args:
            started_at: The stored start of the step (ms).
            now: The current time (ms).

        Returns:
            ``RetryAt(1, now, ...)``, or ``GiveUp`` with DEADLINE_EXCEEDED when the deadline
            passed already (for example while the process was down).
        """
        deadline_at = self.deadline_at(started_at)
        if deadline_at is not None and now >= deadline_at:
            return GiveUp(StepError(ErrorKind.DEADLINE_EXCEEDED, "the deadline passed before an attempt"))
        return RetryAt(1, now, self._timeout_at(now, deadline_at))

    def after_failure(
        self,
        *,
        attempt: int,
        started_at: int,
        now: int,
        error: BaseException | None,
        timed_out: bool = False,
    ) -> RetryDecision:
        """Decide what follows the failure of attempt ``attempt``.

        Args:
            attempt: The number (1-based) of the attempt that failed.
            started_at: The stored start of the step (ms).
            now: When the failure was reported (ms).
            error: The attempt's exception (None when it only timed out).
            timed_out: The attempt ran out of its ``attempt_timeout`` (or the deadline).

        Returns:
            ``RetryAt`` the next attempt, or ``GiveUp`` with NOT_RETRYABLE (the filter
            rejects ``error``), ATTEMPTS_EXHAUSTED or DEADLINE_EXCEEDED.
        """
        cause = error if error is not None else TimeoutError("the attempt timed out")
        if not timed_out and not self._worth_retrying(cause):
            return GiveUp(StepError.of_exception(ErrorKind.NOT_RETRYABLE, cause, f"attempt {attempt}: "))
        if self.attempts is not None and attempt >= self.attempts:
            return GiveUp(
                StepError.of_exception(
                    ErrorKind.ATTEMPTS_EXHAUSTED, cause, f"{attempt} attempt(s) failed, the last with "
                )
            )
        deadline_at = self.deadline_at(started_at)
        next_at = now + self.backoff.delay_ms(attempt)
        if deadline_at is not None and next_at >= deadline_at:
            return GiveUp(
                StepError.of_exception(
                    ErrorKind.DEADLINE_EXCEEDED, cause, f"the deadline passed after {attempt} attempt(s), the last with "
                )
            )
        return RetryAt(attempt + 1, next_at, self._timeout_at(next_at, deadline_at))

    def _timeout_at(self, attempt_at: int, deadline_at: int | None) -> int | None:
        limit = None if self.attempt_timeout is None else attempt_at + _ms(self.attempt_timeout)
        if deadline_at is None:
            return limit
        return deadline_at if limit is None else min(limit, deadline_at)

    def _worth_retrying(self, error: BaseException) -> bool:
        if not isinstance(error, Exception):
            return False
        if self.retry_on is None:
            return True
        if isinstance(self.retry_on, tuple):
            return isinstance(error, self.retry_on)
        return bool(self.retry_on(error))


class Retry:
    """The common policies: ``Retry.none``, ``Retry.times(n)``, ``Retry.forever(deadline)``, ``Retry.command``."""

    none: ClassVar[RetryPolicy] = RetryPolicy(attempts=1)
    """One attempt."""

    command: ClassVar[RetryPolicy] = RetryPolicy(attempts=None, deadline=timedelta(minutes=5))
    """The policy ``send`` uses: send again when no reply came in time, with backoff, for five minutes."""

    @staticmethod
    def times(attempts: int) -> RetryPolicy:
        """At most ``attempts`` attempts, with backoff from one second doubling to one minute."""
        if attempts < 1:
            raise ValueError(f"Retry.times needs at least one attempt, got {attempts}")
        return RetryPolicy(attempts=attempts)

    @staticmethod
    def forever(deadline: timedelta) -> RetryPolicy:
        """Retry with backoff until ``deadline`` has passed since the step was first reached."""
        if deadline <= timedelta(0):
            raise ValueError(f"Retry.forever needs a positive deadline, got {deadline}")
        return RetryPolicy(attempts=None, deadline=deadline)
