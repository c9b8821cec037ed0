"""The reference's ConcatMapTests and ExhaustMapTests (OrchestrationCE), ported.

Both differ from RxJS: a later inner runs from the event that produced it. ``concat_map``
holds its output back until the earlier inners finish; ``exhaust_map`` drops it while an
earlier inner is still running.
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


def test_concat_1_a_later_endless_inner_is_held_back() -> None:
    c = only(1).concat_map(lambda _: only(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = run(c, 1, 1)
    assert result2.results == [1] and result2.next is not None


def test_concat_2_the_inner_waits_for_its_event() -> None:
    c = only(1).concat_map(lambda _: only(2))
    result = run(c, 1, 2)
    assert result.results == [2] and result.next is not None


def over_ten() -> Coordination[int, int]:
    return received.filter(lambda x: x > 10)


def test_concat_3_results_come_out_in_the_order_of_the_inners() -> None:
    c = over_ten().concat_map(lambda x: received.filter(lambda y: y == x - 10).take(1))
    result = run(c, 11, 12, 2)
    assert result.results == [] and result.next is not None
    result2 = run(c, 11, 12, 13, 2, 3, 14, 4, 1)
    assert result2.results == [1, 2, 3, 4] and result2.next is not None


def test_exhaust_1_a_later_endless_inner_is_ignored() -> None:
    c = only(1).exhaust_map(lambda _: only(1))
    result = c(1)
    assert result.results == [1] and result.next is not None
    result2 = run(c, 1, 1)
    assert result2.results == [1] and result2.next is not None


def test_exhaust_2_the_inner_waits_for_its_event() -> None:
    c = only(1).exhaust_map(lambda _: only(2))
    result = run(c, 1, 2)
    assert result.results == [2] and result.next is not None


def test_exhaust_3_output_of_inners_started_while_one_runs_is_dropped() -> None:
    c = over_ten().exhaust_map(lambda x: received.filter(lambda y: y == x - 10).take(1))
    result = run(c, 11, 12, 2)
    assert result.results == [] and result.next is not None
    r3 = run(c, 11, 12, 1)
    assert r3.next is not None
    result2 = run(c, 11, 12, 13, 2, 3, 14, 4, 1)
    assert result2.results == [1] and result2.next is not None
    result3 = run(c, 11, 12, 13, 2, 3, 14, 4, 1, 15, 5)
    assert result3.results == [5] and result3.next is not None
