"""A step error keeps the chain of causes of its exception: built, bounded, loop-safe, stored."""

from __future__ import annotations

import pytest

from tidings.core.workflow import ErrorKind, StepCause, StepError
from tidings.core.workflow.failures import MAX_CAUSE_MESSAGE_BYTES, MAX_CAUSES, causes_of
from tidings.core.workflow.journal import StepFailed, record_from_json, record_to_json
from tidings.errors import WorkflowStepFailed


def _raised(make: object) -> BaseException:
    try:
        make()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - the test keeps what was raised
        return exc
    raise AssertionError("nothing was raised")


def _from_and_during() -> None:
    try:
        try:
            raise KeyError("k")
        except KeyError:
            raise ValueError("inner")  # noqa: B904 - __context__ on purpose
    except ValueError as exc:
        raise RuntimeError("outer") from exc


def test_the_chain_follows_cause_then_context_nearest_first() -> None:
    error = StepError.of_exception(ErrorKind.NOT_RETRYABLE, _raised(_from_and_during), "attempt 1: ")
    assert error.message == "attempt 1: RuntimeError: outer"
    assert error.causes == (StepCause("ValueError", "inner"), StepCause("KeyError", "'k'"))
    assert str(error) == ("not_retryable: attempt 1: RuntimeError: outer "
                          "(caused by ValueError: inner; caused by KeyError: 'k')")


def test_an_exception_without_a_chain_has_no_causes() -> None:
    error = StepError.of_exception(None, ValueError("alone"))
    assert error.causes == () and str(error) == "ValueError: ValueError: alone"
    assert "causes" not in error.to_json()


def test_raise_from_none_hides_the_context() -> None:
    def hidden() -> None:
        try:
            raise KeyError("secret")
        except KeyError:
            raise ValueError("clean") from None

    assert causes_of(_raised(hidden)) == ()


def test_an_explicit_cause_wins_over_the_context() -> None:
    def both() -> None:
        try:
            raise KeyError("context")
        except KeyError:
            raise ValueError("top") from OSError("cause")

    assert causes_of(_raised(both)) == (StepCause("OSError", "cause"),)


def test_a_long_chain_keeps_the_nearest_causes_only() -> None:
    exc: BaseException = ValueError("0")
    for n in range(1, 50):
        nxt = ValueError(str(n))
        nxt.__cause__ = exc
        exc = nxt
    causes = causes_of(exc)
    assert len(causes) == MAX_CAUSES == 8
    assert [c.message for c in causes] == [str(n) for n in range(48, 48 - MAX_CAUSES, -1)]


def test_a_huge_cause_message_is_clipped() -> None:
    top = RuntimeError("top")
    top.__cause__ = ValueError("x" * 100_000)
    (cause,) = causes_of(top)
    assert len(cause.message.encode()) <= MAX_CAUSE_MESSAGE_BYTES
    assert cause.message.endswith("(100000 bytes in all)")


def test_a_chain_that_loops_stops_at_the_first_repeat() -> None:
    a, b = ValueError("a"), KeyError("b")
    a.__cause__, b.__cause__ = b, a
    assert causes_of(a) == (StepCause("KeyError", "'b'"),)
    selfish = ValueError("me")
    selfish.__cause__ = selfish
    assert causes_of(selfish) == ()


def test_a_cause_whose_str_raises_is_still_kept() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    top = RuntimeError("top")
    top.__cause__ = Hostile()
    assert causes_of(top) == (StepCause("Hostile", "<the exception's message could not be read>"),)
    assert StepError.of_exception(None, Hostile()).type == "Hostile"


def test_causes_survive_the_json_journal_and_the_step_failed_exception() -> None:
    error = StepError.of_exception(ErrorKind.ATTEMPTS_EXHAUSTED, _raised(_from_and_during))
    record = StepFailed(3, "1", error, at=5, attempt=2)
    assert record_from_json(record_to_json(record)) == record
    raised = WorkflowStepFailed(error)
    assert raised.error.causes == error.causes and "caused by KeyError: 'k'" in str(raised)


def test_a_stored_error_without_causes_reads_with_none() -> None:
    assert StepError.from_json({"kind": None, "message": "m", "type": None}).causes == ()


@pytest.mark.parametrize("causes", ["text", [1], [{"type": 3, "message": "m"}], [{"message": "m"}],
                                    [{"type": "T", "message": None}]])
def test_hostile_stored_causes_are_refused(causes: object) -> None:
    with pytest.raises(ValueError, match="causes"):
        StepError.from_json({"kind": None, "message": "m", "causes": causes})


def test_stored_causes_from_outside_are_bounded_too() -> None:
    many = [{"type": "T" * 10_000, "message": "m" * 10_000}] * 100
    error = StepError.from_json({"kind": None, "message": "m", "causes": many})
    assert len(error.causes) == MAX_CAUSES
    assert all(len(c.message.encode()) <= MAX_CAUSE_MESSAGE_BYTES and len(c.type.encode()) <= 256
               for c in error.causes)
