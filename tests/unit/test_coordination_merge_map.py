"""The reference's MergeMapTests (OrchestrationCE), ported: same inputs, same expectations.

Events are ints; ``received`` emits each one (the reference's ``{ Id = n }`` is ``n``).
"""

from __future__ import annotations

from typing import Any

from tidings.coordination import Coordination, Step, event

received: Coordination[int, int] = event(lambda e: e)


def only(n: int) -> Coordination[int, int]:
    return received.filter(lambda x: x == n)


def run(coordination: Coordination[int, Any], *events: int) -> Step[int, Any]:
    step = coordination(events[0])
    for e in events[1:]:
        assert step.next is not None, "finished before the last event"
        step = step.next(e)
    return step


def test_1_every_inner_keeps_emitting() -> None:
    c = only(1).merge_map(lambda _: only(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [1, 1] and result2.next is not None
    result3 = result2.next(1)
    assert result3.results == [1, 1, 1] and result3.next is not None


def test_2_take_one_of_take_one_finishes_on_the_first_event() -> None:
    c = only(1).take(1).merge_map(lambda _: only(1).take(1))
    result = c(1)
    assert result.results == [1] and result.next is None


def test_3_take_one_inners_emit_once_each() -> None:
    c = only(1).merge_map(lambda _: only(1).take(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [1] and result2.next is not None


def test_4_a_single_endless_inner() -> None:
    c = only(1).take(1).merge_map(lambda _: only(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [1] and result2.next is not None


def test_5_inners_accumulate() -> None:
    c = only(1).merge_map(lambda _: only(2))
    result = c(2)
    assert result.results == [] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [] and result2.next is not None
    result3 = result2.next(2)
    assert result3.results == [2]
    result4 = result3.next(2)
    assert result4.results == [2]
    result5 = result4.next(1)
    assert result5.results == [] and result5.next is not None
    result6 = result5.next(2)
    assert result6.results == [2, 2]


def test_6_merge_then_switches() -> None:
    c = (
        only(1)
        .merge_map(lambda _: only(2))
        .switch_map(lambda _: only(3).take(1))
        .switch_map(lambda _: only(4).take(1))
    )
    result = run(c, 1, 2, 3, 4)
    assert result.results == [4] and result.next is not None
    result2 = run(c, 1, 2, 3, 1, 2, 3, 4)
    assert result2.next is not None  # the reference asserts on `result` here, checked above
    result3 = run(c, 1, 2, 3, 2, 4, 3, 4)
    assert result3.results == [4] and result3.next is not None
    result4 = run(c, 1, 2, 3, 1, 2, 4)
    assert result4.next is not None  # the reference asserts on `result3` here, checked above
    result5 = run(c, 1, 1, 2, 3, 2, 3, 4)
    assert result5.results == [4] and result5.next is not None


def test_7_switches_then_merge() -> None:
    c = (
        only(1)
        .switch_map(lambda _: only(2).take(1))
        .switch_map(lambda _: only(3).take(1))
        .merge_map(lambda _: only(4))
    )
    result = run(c, 1, 2, 3, 1, 2, 1, 2, 3, 4)
    assert result.results == [4, 4]


def test_8_merge_of_switch_chains() -> None:
    c = only(1).merge_map(
        lambda _: only(2)
        .switch_map(lambda _: only(3).take(1))
        .switch_map(lambda _: only(4).take(1))
    )
    result = run(c, 1, 2, 3, 1, 2, 3, 4)
    assert result.results == [4, 4]
