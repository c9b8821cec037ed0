"""The reference's OrchestrationCETests (OrchestrationCE), ported, and the zip deviation.

An orchestration's events are ``Some event`` (here the event itself) or ``None``, the end of
the stored events. ``raiseToOrchestration`` is ``orchestrate(c)`` and
``raiseToOrchestrationWithActions actions`` is ``orchestrate(c, actions)``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tidings.coordination import (
    Break,
    Continue,
    Coordination,
    Orchestration,
    Step,
    both,
    coordination,
    event,
    orchestrate,
    orchestration,
    zip,
)

Body = Generator[Any, Any, Any]
DO_THING = "DoThing"
DO_OTHER_THING = "DoOtherThing"

received: Coordination[int, int] = event(lambda e: e)


def only(n: int) -> Coordination[int, int]:
    return received.filter(lambda x: x == n)


def run(c: Coordination[Any, Any], *events: int | None) -> Step[Any, Any]:
    step = c(events[0])
    for e in events[1:]:
        assert step.next is not None, "finished before the last event"
        step = step.next(e)
    return step


def test_1_two_lets_in_sequence() -> None:
    @orchestration
    def orc() -> Body:
        yield orchestrate(only(1), ["task"])
        y = yield orchestrate(only(2), ["task"])
        return y

    res = run(orc(), 1, 2)
    assert res.next is None
    assert res.results == [Continue(2)]
    res2 = orc()(None)
    assert res2.next is None


@orchestration
def three_steps() -> Body:
    x = yield orchestrate(only(2), [DO_THING])
    y = yield orchestrate(received.filter(lambda e: e == x + 1))
    z = yield orchestrate(received.filter(lambda e: e == y + 1), [DO_OTHER_THING])
    return z


def test_2_switch_map_into_an_orchestration_body() -> None:
    orc = orchestrate(only(1)).switch_map(lambda _: three_steps())
    assert run(orc, 1, None).results == [Break([DO_THING])]
    assert run(orc, 1, 2, 3, None).results == [Break([DO_OTHER_THING])]
    assert run(orc, 1, 2, 3, 1, 4).results == []
    assert run(orc, 1, 2, 3, 1, 2, 3, 4).results == [Continue(4)]


def test_3_merge_map_into_an_orchestration_body() -> None:
    orc = orchestrate(only(1)).merge_map(lambda _: three_steps())
    assert run(orc, 1, 2, 3, 1, 2, 3, 4).results == [Continue(4), Continue(4)]


def test_4_three_and_bangs_in_a_coordination() -> None:
    @coordination
    def orc() -> Body:
        x, _y, _z = yield both(only(1), only(2), only(3))
        return x

    res = run(orc(), 1, 2, 1, 3)
    assert res.results == [1] and res.next is None
    res2 = run(orc(), 1, 2, 1)
    assert res2.results == [] and res2.next is not None
    res3 = run(orc(), 1, 3, 2)
    assert res3.results == [1] and res3.next is None


def test_5_lifted_coordinations_with_and_bangs() -> None:
    @coordination
    def first_of(a: int, b: int, c: int) -> Body:
        x, _, _ = yield both(only(a), only(b), only(c))
        return x

    @orchestration
    def orc() -> Body:
        yield orchestrate(first_of(1, 2, 3), [DO_THING])
        r2 = yield orchestrate(first_of(4, 5, 6), [DO_OTHER_THING])
        return r2

    assert orc()(None).results == [Break([DO_THING])]
    res2 = run(orc(), 1, 2, 1)
    assert res2.results == [] and res2.next is not None
    res3 = run(orc(), 1, 2, None)
    assert res3.results == [Break([DO_THING])] and res3.next is None
    res4 = run(orc(), 1, 2, 3, None)
    assert res4.results == [Break([DO_OTHER_THING])] and res4.next is None
    res5 = run(orc(), 1, 2, 3, 4, 5, 6)
    assert res5.results == [Continue(4)] and res5.next is None


def test_6_and_bangs_of_orchestrations_list_every_waiting_action() -> None:
    @orchestration
    def orc() -> Body:
        _r, _r2, r3 = yield both(
            orchestrate(only(1), [DO_THING]),
            orchestrate(only(2), [DO_OTHER_THING]),
            orchestrate(only(3), [DO_OTHER_THING]),
        )
        return r3

    res = orc()(None)
    assert res.results == [Break([DO_THING, DO_OTHER_THING, DO_OTHER_THING])]
    assert res.next is None
    res2 = run(orc(), 1, None)
    assert res2.results == [Break([DO_OTHER_THING, DO_OTHER_THING])] and res2.next is None
    res3 = run(orc(), 2, None)
    assert res3.results == [Break([DO_THING, DO_OTHER_THING])] and res3.next is None
    res4 = run(orc(), 1, 3, 2)
    assert res4.results == [Continue(3)] and res4.next is None


# -- beyond the reference ----------------------------------------------------------------------


def test_a_waiting_branch_keeps_its_break_when_another_branch_has_no_actions() -> None:
    # The reference's zip dropped Break [DoThing] here: the other side finished on None with
    # no result, and the unpaired Break was lost with it.
    o = both(orchestrate(only(1), [DO_THING]), orchestrate(only(2)))
    assert o(None).results == [Break([DO_THING])]
    z = zip(orchestrate(only(1), [DO_THING]), orchestrate(only(2)))
    assert z(None).results == [Break([DO_THING])]


def test_a_branch_that_finished_without_actions_and_no_breaks_gives_nothing() -> None:
    o = both(orchestrate(only(1)), orchestrate(only(2)))
    step = o(None)
    assert step.results == [] and step.next is None


def test_zip_of_orchestrations_pairs_continues_into_a_tuple() -> None:
    z = zip(orchestrate(only(1)), orchestrate(only(2)))
    assert isinstance(z, Orchestration)
    assert run(z, 2, 1).results == [Continue((1, 2))]


def test_a_break_ends_the_rest_of_the_body() -> None:
    reached = []

    @orchestration
    def orc() -> Body:
        yield orchestrate(only(1), ["wait for 1"])
        reached.append("after")
        return "done"

    assert orc()(None).results == [Break(["wait for 1"])]
    assert reached == []


def test_reaching_the_end_of_an_orchestration_body_continues_with_none() -> None:
    @orchestration
    def orc() -> Body:
        yield orchestrate(only(1))

    assert orc()(1).results == [Continue(None)]


def test_orchestrate_without_actions_finishes_with_nothing_on_none() -> None:
    step = orchestrate(only(1))(None)
    assert step.results == [] and step.next is None


def test_map_sees_continue_values_and_passes_breaks() -> None:
    o = orchestrate(only(1), ["a"]).map(lambda x: x * 10)
    assert o(1).results == [Continue(10)]
    assert o(None).results == [Break(["a"])]


def test_item_preserving_operators_keep_orchestrations() -> None:
    o = orchestrate(only(1), ["a"])
    for derived in (o.take(1), o.filter(lambda _: True), o.take_while(lambda _: True)):
        assert isinstance(derived, Orchestration)
        step = derived(1)
        assert isinstance(step.next, Orchestration) or step.next is None


def test_an_orchestration_body_rejects_a_plain_coordination() -> None:
    @orchestration
    def orc() -> Body:
        yield only(1)

    with pytest.raises(TypeError, match="orchestrate"):
        orc()(1)


def test_both_rejects_a_mix_of_orchestrations_and_coordinations() -> None:
    with pytest.raises(TypeError, match="orchestrate"):
        both(orchestrate(only(1)), only(2))


def test_switch_map_mapper_must_return_an_orchestration() -> None:
    o = orchestrate(only(1)).switch_map(lambda _: only(2))
    with pytest.raises(TypeError, match="Orchestration"):
        o(1)


def test_break_actions_compare_whatever_sequence_they_came_in() -> None:
    assert Break([1, 2]) == Break((1, 2))
    assert Break().actions == ()


def test_debounce_of_an_orchestration_requests_its_timer_and_keeps_the_value_pending() -> None:
    # Time as timer events: each value asks for a timer; its TimerFired event ends the quiet.
    def quiet(value: str) -> Orchestration[Any, Any, Any]:
        fired = event(lambda e: True if e == ("fired", value) else None)
        return orchestrate(fired, [("start timer", value)])

    typed = event(lambda e: e[1] if e[0] == "typed" else None)
    o = orchestrate(typed).debounce(quiet)
    run1 = list(o.steps([("typed", "a"), ("typed", "ab"), None]))
    assert [s.results for s in run1] == [[], [], [Break([("start timer", "ab")])]]
    run2 = [s.results for s in o.steps([("typed", "a"), ("typed", "ab"), ("fired", "ab")])]
    assert run2 == [[], [], [Continue("ab")]]
    stale = [s.results for s in o.steps([("typed", "a"), ("typed", "ab"), ("fired", "a")])]
    assert stale == [[], [], []]
