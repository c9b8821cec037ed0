"""assert_eventually polls a condition until it holds or the (fake) clock runs out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from tidings.testing.eventually import assert_eventually, assert_eventually_async


class FakeTime:
    """A clock that only moves when the helper sleeps, so these tests never wait."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _answers(*values: object) -> Callable[[], object]:
    it: Iterator[object] = iter(values)
    return lambda: next(it)


def test_returns_the_first_truthy_result() -> None:
    time = FakeTime()

    result = assert_eventually(
        _answers(None, 0, "ready"), interval=1, clock=time.clock, sleep=time.sleep
    )

    assert result == "ready"
    assert time.sleeps == [1, 1]


def test_assertion_errors_mean_not_yet() -> None:
    time = FakeTime()
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        assert len(calls) >= 3, "not yet"
        return True

    assert assert_eventually(check, clock=time.clock, sleep=time.sleep) is True
    assert len(calls) == 3


def test_other_exceptions_propagate_at_once() -> None:
    time = FakeTime()

    with pytest.raises(KeyError):
        assert_eventually(lambda: dict[str, int]()["missing"], clock=time.clock, sleep=time.sleep)
    assert time.sleeps == []


def test_timeout_fails_with_the_message_and_the_last_error() -> None:
    time = FakeTime()

    def never() -> bool:
        raise AssertionError("still 2 records")

    with pytest.raises(AssertionError, match="three records did not hold within 1 s") as info:
        assert_eventually(
            never,
            timeout=1,
            interval=0.3,
            message="three records",
            clock=time.clock,
            sleep=time.sleep,
        )
    assert "still 2 records" in str(info.value)
    assert isinstance(info.value.__cause__, AssertionError)
    # Tries at 0, 0.3, 0.6, 0.9 and once more exactly at the deadline.
    assert pytest.approx(sum(time.sleeps)) == 1.0


def test_async_variant_awaits_async_predicates() -> None:
    answers = iter([False, False, 7])

    async def check() -> object:
        return next(answers)

    assert asyncio.run(assert_eventually_async(check, interval=0)) == 7


def test_async_variant_accepts_sync_predicates_and_times_out() -> None:
    with pytest.raises(AssertionError, match="did not hold within 0.01 s"):
        asyncio.run(assert_eventually_async(lambda: False, timeout=0.01, interval=0.005))
