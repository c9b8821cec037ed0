"""The reference's OperationsTests, ported, and the operators beyond the reference.

take_until and debounce are the operators the article names as missing; time reaches a
coordination as events, so debounce is tested by feeding events that carry a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tidings.coordination import (
    Coordination,
    append,
    elapsed,
    empty,
    event,
    retn,
    zip,
)


def test_reference_distinct_until_changed() -> None:
    c = event(lambda e: e).distinct_until_changed()
    step = c(False)
    assert step.results == [False]
    step2 = step.next(False)
    assert step2.results == []
    step3 = step2.next(False)
    assert step3.results == []
    step4 = step3.next(True)
    assert step4.results == [True]
    step5 = step4.next(True)
    assert step5.results == []


def test_reference_take_while_not() -> None:  # named "takeUntil" in the reference
    c = event(lambda e: e).take_while(lambda x: not x)
    step = c(False)
    assert step.results == [False]
    step2 = step.next(False)
    assert step2.results == [False]
    step3 = step2.next(False)
    assert step3.results == [False]
    step4 = step3.next(True)
    assert step4.results == [] and step4.next is None


# -- beyond the reference ----------------------------------------------------------------------

def _emit_all(values: list[int]) -> Coordination[list[int], int]:
    """Emits all ``values`` on one event and finishes."""
    c: Coordination[list[int], int] = empty()
    for value in reversed(values):
        c = append(retn(value), c)
    return c


def lists() -> Coordination[list[int], int]:
    """Each event is a list of values emitted on that one step."""
    return event(lambda e: e).merge_map(_emit_all)


def test_retn_emits_on_the_first_event_and_empty_emits_nothing() -> None:
    assert retn(5)("anything").results == [5]
    assert retn(5)("anything").next is None
    assert empty()("anything").results == []
    assert empty()("anything").next is None


def test_take_finishes_on_the_step_of_the_nth_item() -> None:
    step = lists().take(3).feed([[1], [2, 3, 4], [5]])
    assert step.results == [2, 3] and step.next is None


def test_take_zero_finishes_on_the_first_event() -> None:
    step = event(lambda e: e)(1)
    assert step.next is not None
    assert event(lambda e: e).take(0)(1).results == []
    assert event(lambda e: e).take(0)(1).next is None
    with pytest.raises(ValueError):
        event(lambda e: e).take(-1)


def test_take_while_drops_the_failing_item_and_the_rest_of_its_step() -> None:
    c = lists().take_while(lambda x: x < 5)
    assert [s.results for s in c.steps([[1, 2], [3, 7, 4], [1]])] == [[1, 2], [3]]


def test_distinct_until_changed_compares_neighbours_within_one_step() -> None:
    # The reference ran Seq.distinct on each step, which turned [1, 2, 1] into [1, 2].
    c = lists().distinct_until_changed()
    assert [s.results for s in c.steps([[1, 1, 2, 1], [1, 3]])] == [[1, 2, 1], [3]]


def test_filter_and_choose() -> None:
    c = lists()
    assert c.filter(lambda x: x % 2 == 0).collect([[1, 2, 3, 4]]) == [2, 4]
    assert c.choose(lambda x: x * 10 if x > 2 else None).collect([[1, 2, 3, 4]]) == [30, 40]


def test_switch_runs_only_the_last_inner_of_a_step() -> None:
    c = lists().switch_map(lambda x: event(lambda e: (x, len(e))))
    assert [s.results for s in c.steps([[1, 2], []])] == [[(2, 2)], [(2, 0)]]


def test_zip_pairs_first_in_first_out() -> None:
    c = zip(lists(), event(lambda e: -e[0]))
    assert [s.results for s in c.steps([[1, 2, 3], [4], [5]])] == [
        [(1, -1)],
        [(2, -4)],
        [(3, -5)],
    ]


def test_zip_finishes_when_a_finished_side_has_nothing_left_to_pair() -> None:
    c = zip(lists().take(2), event(lambda e: e[0]))
    steps = list(c.steps([[1, 2], [7], [8], [9]]))
    assert [s.results for s in steps] == [[(1, 1)], [(2, 7)]]
    assert steps[-1].next is None


def test_feed_ignores_events_after_finishing_and_returns_the_last_step() -> None:
    c = event(lambda e: e).take(2)
    step = c.feed([1, 2, 3])
    assert step.results == [2] and step.next is None
    idle = c.feed([])
    assert idle.results == [] and idle.next is c


# -- take_until ----------------------------------------------------------------------------------


def test_take_until_stops_when_the_notifier_first_emits() -> None:
    c = event(lambda e: e if e != "stop" else None).take_until(
        event(lambda e: e if e == "stop" else None)
    )
    steps = list(c.steps(["a", "b", "stop", "c"]))
    assert [s.results for s in steps] == [["a"], ["b"], []]
    assert steps[-1].next is None


def test_take_until_notifier_wins_a_tie_on_one_event() -> None:
    c = event(lambda e: e).take_until(event(lambda e: e if e == "x" else None))
    step = c.feed(["a", "x"])
    assert step.results == [] and step.next is None


def test_take_until_a_notifier_finished_without_a_result_never_stops_it() -> None:
    c = event(lambda e: e).take_until(event(lambda e: None).take_while(lambda _: True).take(0))
    assert c.collect(["a", "b", "c"]) == ["a", "b", "c"]


def test_take_until_finishes_with_its_source() -> None:
    c = event(lambda e: e).take(1).take_until(event(lambda e: None))
    step = c("a")
    assert step.results == ["a"] and step.next is None


# -- debounce ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Typed:
    """An event with the time (seconds) it happened at and, maybe, a search text."""

    at: float
    text: str | None = None
    done: bool = False


def quiet(seconds: float):  # noqa: ANN201 - a DurationFactory
    return lambda _: elapsed(seconds, clock=lambda e: None if e is None else e.at)


def test_debounce_emits_a_value_once_its_quiet_period_has_passed() -> None:
    c = event(lambda e: e.text).debounce(quiet(1.0))
    steps = list(
        c.steps([Typed(0.0, "a"), Typed(0.5, "ab"), Typed(1.2), Typed(1.6), Typed(3.0)])
    )
    assert [s.results for s in steps] == [[], [], [], ["ab"], []]


def test_debounce_a_newer_value_restarts_the_quiet_period() -> None:
    c = event(lambda e: e.text).debounce(quiet(1.0))
    events = [Typed(0.0, "a"), Typed(0.9, "b"), Typed(1.8, "c"), Typed(2.9), Typed(3.0)]
    assert [s.results for s in c.steps(events)] == [[], [], [], ["c"], []]


def test_debounce_quiet_period_wins_a_tie_with_a_newer_value() -> None:
    c = event(lambda e: e.text).debounce(quiet(1.0))
    events = [Typed(0.0, "a"), Typed(1.0, "b"), Typed(2.5)]
    assert [s.results for s in c.steps(events)] == [[], ["a"], ["b"]]


def test_debounce_zero_quiet_period_emits_at_once() -> None:
    c = event(lambda e: e.text).debounce(quiet(0.0))
    assert c.collect([Typed(0.0, "a"), Typed(1.0, "b")]) == ["a", "b"]


def test_debounce_of_several_values_in_one_step_keeps_the_last() -> None:
    c = lists().debounce(lambda _: event(lambda e: True if e == [] else None))
    assert [s.results for s in c.steps([[1, 2, 3], [4], []])] == [[], [], [4]]


def test_debounce_flushes_the_pending_value_when_the_source_completes() -> None:
    c = event(lambda e: e.text).take(2).debounce(quiet(10.0))
    step = c.feed([Typed(0.0, "a"), Typed(1.0, "b")])
    assert step.results == ["b"] and step.next is None


def test_debounce_does_not_flush_on_none_the_end_of_stored_events() -> None:
    # The source ends at None, as a lifted orchestration does.
    source = event(lambda e: e.text).take_until(event(lambda e: True if e is None else None))
    step = source.debounce(quiet(10.0)).feed([Typed(0.0, "a"), None])
    assert step.results == [] and step.next is None


def test_debounce_with_a_quiet_period_that_finishes_without_a_result_waits_for_the_end() -> None:
    c = event(lambda e: e.text).take(2).debounce(lambda _: empty())
    assert [s.results for s in c.steps([Typed(0.0, "a"), Typed(1.0), Typed(2.0, "b")])] == [
        [],
        [],
        ["b"],
    ]
