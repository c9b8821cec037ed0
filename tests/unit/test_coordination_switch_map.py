"""The reference's SwitchMapTests (OrchestrationCE), ported: same inputs, same expectations.

The reference parses JSON events into ``{ Id = n }``; here an event is the int ``n`` and
``received`` emits it, so ``{ Id = 4 }`` reads ``4``.
"""

from __future__ import annotations

from typing import Any

from tidings.coordination import Coordination, Step, event

received: Coordination[int, int] = event(lambda e: e)


def only(n: int) -> Coordination[int, int]:
    return received.filter(lambda x: x == n)


def run(coordination: Coordination[int, Any], *events: int) -> Step[int, Any]:
    """Apply events one by one like the reference's ``r.Next.Value e`` chains."""
    step = coordination(events[0])
    for e in events[1:]:
        assert step.next is not None, "finished before the last event"
        step = step.next(e)
    return step


def test_1_an_endless_inner_emits_on_every_matching_event() -> None:
    c = only(1).switch_map(lambda _: only(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [1] and result2.next is not None
    result3 = result.next(1)  # the same step again: coordinations are immutable
    assert result3.results == [1] and result3.next is not None


def test_2_take_one_of_take_one_finishes_on_the_first_event() -> None:
    c = only(1).take(1).switch_map(lambda _: only(1).take(1))
    result = c(1)
    assert result.results == [1] and result.next is None


def test_3_an_endless_outer_restarts_a_take_one_inner() -> None:
    c = only(1).switch_map(lambda _: only(1).take(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [1] and result2.next is not None


def test_4_a_take_one_outer_keeps_an_endless_inner() -> None:
    c = only(1).take(1).switch_map(lambda _: only(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [1] and result2.next is not None
    result3 = result.next(1)
    assert result3.results == [1] and result3.next is not None


def test_5_the_inner_waits_for_its_own_event() -> None:
    c = only(1).switch_map(lambda _: only(2))
    result = c(1)
    assert result.results == [] and result.next is not None
    result2 = result.next(1)
    assert result2.results == [] and result2.next is not None
    result3 = result.next(2)
    assert result3.results == [2] and result3.next is not None
    result4 = c(2)
    assert result4.results == [] and result4.next is not None


def test_6_a_finished_inner_is_restarted_by_the_next_outer_value() -> None:
    c = only(1).switch_map(lambda _: only(2).take(1))
    result = c(1)
    assert result.results == [] and result.next is not None
    result2 = result.next(2)
    assert 2 in result2.results and result2.next is not None
    result3 = result2.next(2)
    assert result3.results == [] and result3.next is not None
    result4 = result3.next(1)
    assert result4.results == [] and result4.next is not None
    result5 = result4.next(2)
    assert 2 in result5.results and result5.next is not None


def chained(first: Coordination[int, int]) -> Coordination[int, int]:
    return (
        first.switch_map(lambda _: only(2).take(1))
        .switch_map(lambda _: only(3).take(1))
        .switch_map(lambda _: only(4).take(1))
    )


def test_7_switch_maps_in_a_line() -> None:
    c = chained(only(1))
    result = run(c, 1, 2, 3, 4)
    assert 4 in result.results and result.next is not None
    result2 = run(c, 1, 2, 3, 7, 4)
    assert 4 in result2.results and result2.next is not None
    result3 = run(c, 1, 2, 3, 3, 4)
    assert 4 in result3.results and result3.next is not None
    # In a line, a new 1 does not reset the later stages (unlike nesting, test 10), as in RxJS.
    result4 = run(c, 1, 2, 3, 1, 4)
    assert 4 in result4.results and result4.next is not None
    assert result4.next is not None
    result5 = run(result4.next, 2, 3, 4)
    assert 4 in result5.results and result5.next is not None


def test_8_a_take_two_outer_allows_one_restart() -> None:
    c = chained(only(1).take(2))
    result = run(c, 1, 2, 3, 4)
    assert 4 in result.results and result.next is not None
    result2 = run(c, 1, 2, 3, 1, 2, 4)
    assert 4 in result2.results and result2.next is not None
    result3 = run(result2.next, 3, 4)
    assert 4 in result3.results and result3.next is None


def test_9_a_take_two_middle_stage_allows_one_restart() -> None:
    c = (
        only(1)
        .take(1)
        .switch_map(lambda _: only(2).take(2))
        .switch_map(lambda _: only(3).take(1))
        .switch_map(lambda _: only(4).take(1))
    )
    result = run(c, 1, 2, 3, 4)
    assert 4 in result.results and result.next is not None
    result2 = result.next(3)
    assert result2.results == [] and result2.next is not None
    result3 = run(result2.next, 2, 3, 4)
    assert 4 in result3.results and result3.next is None


def test_10_nested_switch_maps_restart_the_whole_inner() -> None:
    inner = (
        only(2)
        .take(1)
        .switch_map(lambda _: only(3).take(1))
        .switch_map(lambda _: only(4).take(1))
    )
    c = only(1).switch_map(lambda _: inner)
    result4 = run(c, 1, 2, 3, 1, 4)
    assert result4.results == [] and result4.next is not None
