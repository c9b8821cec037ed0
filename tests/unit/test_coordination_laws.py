"""Properties of coordinations, checked with hypothesis over random compositions.

1. Feeding a prefix and then the rest gives the same steps as feeding all at once, and a step
   taken twice from the same state gives the same result (coordinations are immutable).
2. Wherever tidings keeps the reference's semantics, it agrees step by step with a literal
   model of the reference's F# (``Ref*`` below, closures and recursion as in the original):
   map, filter, take, take_while, switch/merge/concat/exhaust map, zip, append (yield!),
   and the builder's let!, and!, yield and yield!.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Generator
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidings.coordination import (
    Coordination,
    append,
    both,
    coordination,
    elapsed,
    emit,
    emit_from,
    empty,
    event,
    orchestrate,
    orchestration,
    retn,
    zip,
)

# -- a literal model of the reference (OrchestrationCE, src/Coordination.fs) --------------------

RefStep = tuple[list[Any], Any]  # (results, next function or None)
Ref = Callable[[Any], RefStep]


def ref_retn(v: Any) -> Ref:
    return lambda e: ([v], None)


def ref_empty() -> Ref:
    return lambda e: ([], None)


def ref_event(chooser: Callable[[Any], Any]) -> Ref:
    def c(e: Any) -> RefStep:
        x = chooser(e)
        return ([] if x is None else [x], c)

    return c


def ref_map(f: Callable[[Any], Any], c: Ref) -> Ref:
    def m(e: Any) -> RefStep:
        rs, n = c(e)
        return ([f(r) for r in rs], None if n is None else ref_map(f, n))

    return m


def ref_filter(p: Callable[[Any], bool], c: Ref) -> Ref:
    def m(e: Any) -> RefStep:
        rs, n = c(e)
        return ([r for r in rs if p(r)], None if n is None else ref_filter(p, n))

    return m


def ref_take(count: int, c: Ref) -> Ref:
    def m(e: Any) -> RefStep:
        rs, n = c(e)
        kept = rs[:count]
        left = count - len(kept)
        return (kept, ref_take(left, n) if left > 0 and n is not None else None)

    return m


def ref_take_while(p: Callable[[Any], bool], c: Ref) -> Ref:
    def m(e: Any) -> RefStep:
        rs, n = c(e)
        kept: list[Any] = []
        for r in rs:
            if not p(r):
                break
            kept.append(r)
        whole = len(kept) == len(rs)
        return (kept, ref_take_while(p, n) if whole and n is not None else None)

    return m


def ref_switch(hoc: Ref, current: Ref | None = None) -> Ref:
    def s(e: Any) -> RefStep:
        cs, nh = hoc(e)
        if not cs:
            if nh is None:
                return ([], None) if current is None else current(e)
            if current is None:
                return ([], ref_switch(nh, None))
            r, n = current(e)
            return (r, ref_switch(nh, n))
        r, n = cs[-1](e)
        return (r, n) if nh is None else (r, ref_switch(nh, n))

    return s


def ref_flatten(pair: Callable[[RefStep, RefStep], RefStep], hoc: Ref) -> Ref:
    def f(e: Any) -> RefStep:
        cs, nh = hoc(e)
        acc: RefStep = ([], None)
        for c in cs:
            acc = pair(acc, c(e))
        if nh is None:
            return acc
        r, n = acc
        if n is not None:
            return (r, lambda e2: pair(n(e2), ref_flatten(pair, nh)(e2)))
        return (r, ref_flatten(pair, nh))

    return f


def merge_pair(a: RefStep, b: RefStep) -> RefStep:
    (r1, n1), (r2, n2) = a, b
    if n1 is not None and n2 is not None:
        return (r1 + r2, lambda e: merge_pair(n1(e), n2(e)))
    return (r1 + r2, n1 if n1 is not None else n2)


def concat_pair(a: RefStep, b: RefStep) -> RefStep:
    (r1, n1), (r2, n2) = a, b
    if n1 is None:
        return (r1 + r2, n2)
    if n2 is None:
        return (r1, lambda e: concat_pair(n1(e), b))

    def held(e: Any) -> RefStep:
        r, n = n2(e)
        return (r2 + r, n)

    return (r1, lambda e: concat_pair(n1(e), held(e)))


def exhaust_pair(a: RefStep, b: RefStep) -> RefStep:
    (r1, n1), (r2, n2) = a, b
    if n1 is None:
        return (r1 + r2, n2)
    if n2 is None:
        return (r1, n1)
    return (r1, lambda e: exhaust_pair(n1(e), n2(e)))


def ref_zip(c1: Ref, c2: Ref) -> Ref:
    def z(e: Any) -> RefStep:
        (r1, n1), (r2, n2) = c1(e), c2(e)
        if len(r1) > len(r2):
            pairs, remaining = list(builtins.zip(r1, r2)), r1[len(r2) :]
            if n1 is not None and n2 is not None:
                return (pairs, ref_zip(_prepend(remaining, n1), n2))
            if n1 is None and n2 is not None:
                return (pairs, ref_zip(lambda _: (remaining, None), n2))
            return (pairs, None)
        if len(r1) < len(r2):
            pairs, remaining = list(builtins.zip(r1, r2)), r2[len(r1) :]
            if n1 is not None and n2 is not None:
                return (pairs, ref_zip(n1, _prepend(remaining, n2)))
            if n1 is not None and n2 is None:
                return (pairs, ref_zip(n1, lambda _: (remaining, None)))
            return (pairs, None)
        pairs = list(builtins.zip(r1, r2))
        return (pairs, ref_zip(n1, n2) if n1 is not None and n2 is not None else None)

    return z


def _prepend(remaining: list[Any], c: Ref) -> Ref:
    def p(e: Any) -> RefStep:
        r, n = c(e)
        return (remaining + r, n)

    return p


def ref_append(c1: Ref, c2: Ref) -> Ref:
    def a(e: Any) -> RefStep:
        r, n = c1(e)
        if n is not None:
            return (r, ref_append(n, c2))
        r2, n2 = c2(e)
        return (r + r2, n2)

    return a


def ref_bind(m: Ref, f: Callable[[Any], Ref]) -> Ref:
    return ref_switch(ref_map(f, ref_take(1, m)))


# -- random compositions ------------------------------------------------------------------------
# A spec is a tuple tree built into both tidings and the reference model. Events are 0..4;
# every result is an int, so any spec fits anywhere. ``v`` is the value a *_map mapper got;
# ("once", k) waits for the event v + k (mod N), emits it and finishes.

N = 4  # events are 0 .. N-1; a small alphabet makes inners meet their events often
EVENTS = st.lists(st.integers(min_value=0, max_value=N - 1), max_size=12)
K = st.integers(min_value=0, max_value=N - 1)

leaves = st.one_of(
    st.tuples(st.just("match"), K),
    st.tuples(st.just("once"), K),
    st.just(("any",)),
    st.tuples(st.just("v"), K),
    st.tuples(st.just("retn"), K),
    st.just(("empty",)),
)


def _body_step(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.tuples(st.just("await"), children),
        st.tuples(st.just("both"), children, children),
        st.tuples(st.just("emit"), K),
        st.tuples(st.just("from"), children),
    )


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.tuples(st.just("map"), children),
        st.tuples(st.just("filter"), children, K),
        st.tuples(st.just("take"), children, st.integers(min_value=0, max_value=3)),
        st.tuples(st.just("take_while"), children, K),
        st.tuples(st.sampled_from(["switch", "merge", "concat", "exhaust"]), children, children),
        st.tuples(st.just("zip"), children, children),
        st.tuples(st.just("append"), children, children),
        st.tuples(
            st.just("body"), st.lists(_body_step(children), max_size=3), st.booleans()
        ),
    )


SPECS = st.recursive(leaves, _extend, max_leaves=8)
# Operators outside the reference, for the immutability properties only.
EXTRA_SPECS = st.recursive(
    leaves,
    lambda children: st.one_of(
        _extend(children),
        st.tuples(st.just("distinct"), children),
        st.tuples(st.just("until"), children, children),
        st.tuples(st.just("debounce"), children, children),
        st.tuples(st.just("debounce_time"), children, st.integers(min_value=0, max_value=3)),
    ),
    max_leaves=8,
)


def _matches(k: int) -> Callable[[int], int | None]:
    return lambda e: e if e == k else None


def build(spec: Any, v: int = 0) -> Coordination[int, int]:
    """Build ``spec`` with tidings."""
    kind = spec[0]
    if kind == "match":
        return event(_matches(spec[1]))
    if kind == "any":
        return event(lambda e: e)
    if kind == "v":
        return event(_matches((v + spec[1]) % N))
    if kind == "once":
        return event(_matches((v + spec[1]) % N)).take(1)
    if kind == "retn":
        return retn(spec[1])
    if kind == "empty":
        return empty()
    if kind == "map":
        return build(spec[1], v).map(lambda x: x + 1)
    if kind == "filter":
        return build(spec[1], v).filter(lambda x, k=spec[2]: x != k)
    if kind == "take":
        return build(spec[1], v).take(spec[2])
    if kind == "take_while":
        return build(spec[1], v).take_while(lambda x, k=spec[2]: x != k)
    if kind in ("switch", "merge", "concat", "exhaust"):
        method = getattr(build(spec[1], v), f"{kind}_map")
        return method(lambda x, inner=spec[2]: build(inner, x))  # type: ignore[no-any-return]
    if kind == "zip":
        return zip(build(spec[1], v), build(spec[2], v)).map(lambda t: t[0] + t[1])
    if kind == "append":
        return append(build(spec[1], v), build(spec[2], v))
    if kind == "body":
        return _body(spec[1], spec[2], v)
    if kind == "distinct":
        return build(spec[1], v).distinct_until_changed()
    if kind == "until":
        return build(spec[1], v).take_until(build(spec[2], v))
    if kind == "debounce":
        return build(spec[1], v).debounce(lambda x, d=spec[2]: build(d, x))
    if kind == "debounce_time":
        # Events double as the time: the quiet period ends once an event is `n` higher.
        return build(spec[1], v).debounce(lambda _, n=spec[2]: elapsed(n, clock=lambda e: e))
    raise AssertionError(spec)


@coordination
def _body(steps: list[Any], returns: bool, v: int) -> Generator[Any, Any, Any]:
    values: list[int] = []
    for step in steps:
        if step[0] == "await":
            values.append((yield build(step[1], v)))
        elif step[0] == "both":
            a, b = yield both(build(step[1], v), build(step[2], v))
            values.append(a + b)
        elif step[0] == "emit":
            yield emit(step[1])
        else:
            yield emit_from(build(step[1], v))
    if returns:
        return sum(values)
    return None


def build_ref(spec: Any, v: int = 0) -> Ref:
    """Build ``spec`` with the reference model."""
    kind = spec[0]
    if kind == "match":
        return ref_event(_matches(spec[1]))
    if kind == "any":
        return ref_event(lambda e: e)
    if kind == "v":
        return ref_event(_matches((v + spec[1]) % N))
    if kind == "once":
        return ref_take(1, ref_event(_matches((v + spec[1]) % N)))
    if kind == "retn":
        return ref_retn(spec[1])
    if kind == "empty":
        return ref_empty()
    if kind == "map":
        return ref_map(lambda x: x + 1, build_ref(spec[1], v))
    if kind == "filter":
        return ref_filter(lambda x, k=spec[2]: x != k, build_ref(spec[1], v))
    if kind == "take":
        return ref_take(spec[2], build_ref(spec[1], v))
    if kind == "take_while":
        return ref_take_while(lambda x, k=spec[2]: x != k, build_ref(spec[1], v))
    if kind in ("switch", "merge", "concat", "exhaust"):
        hoc = ref_map(lambda x, inner=spec[2]: build_ref(inner, x), build_ref(spec[1], v))
        if kind == "switch":
            return ref_switch(hoc)
        pair = {"merge": merge_pair, "concat": concat_pair, "exhaust": exhaust_pair}[kind]
        return ref_flatten(pair, hoc)
    if kind == "zip":
        return ref_map(lambda t: t[0] + t[1], ref_zip(build_ref(spec[1], v), build_ref(spec[2], v)))
    if kind == "append":
        return ref_append(build_ref(spec[1], v), build_ref(spec[2], v))
    if kind == "body":
        return _ref_body(spec[1], spec[2], v, [])
    raise AssertionError(spec)


def _ref_body(steps: list[Any], returns: bool, v: int, values: list[int]) -> Ref:
    # The F# builder: Bind = take 1 >> switchMap, MergeSources = zip of take 1s,
    # Combine = appendPair, Yield/Return = retn; the end of a Python body emits nothing.
    if not steps:
        return ref_retn(sum(values)) if returns else ref_empty()
    step, rest = steps[0], steps[1:]
    if step[0] == "await":
        return ref_bind(build_ref(step[1], v), lambda x: _ref_body(rest, returns, v, [*values, x]))
    if step[0] == "both":
        sides = ref_zip(ref_take(1, build_ref(step[1], v)), ref_take(1, build_ref(step[2], v)))
        return ref_bind(sides, lambda t: _ref_body(rest, returns, v, [*values, t[0] + t[1]]))
    first = ref_retn(step[1]) if step[0] == "emit" else build_ref(step[1], v)
    return ref_append(first, _ref_body(rest, returns, v, values))


def trace(c: Coordination[int, int], events: list[int]) -> list[tuple[list[int], bool]]:
    return [(step.results, step.next is None) for step in c.steps(events)]


def trace_ref(c: Ref, events: list[int]) -> list[tuple[list[int], bool]]:
    out: list[tuple[list[int], bool]] = []
    current: Ref | None = c
    for e in events:
        if current is None:
            break
        results, current = current(e)
        out.append((results, current is None))
    return out


# -- properties ---------------------------------------------------------------------------------


@settings(max_examples=600, deadline=None)
@given(spec=SPECS, events=EVENTS)
# Cases that tell the flattening operators apart, so they are always checked.
@example(spec=("exhaust", ("any",), ("once", 1)), events=[0, 2, 3, 1])
@example(spec=("concat", ("any",), ("once", 1)), events=[0, 2, 3, 1])
@example(spec=("merge", ("any",), ("once", 1)), events=[0, 2, 3, 1])
@example(spec=("switch", ("any",), ("once", 1)), events=[0, 2, 3, 1])
@example(spec=("zip", ("any",), ("match", 2)), events=[0, 1, 2, 2, 3])
def test_tidings_agrees_with_the_reference_model_step_by_step(spec: Any, events: list[int]) -> None:
    assert trace(build(spec), events) == trace_ref(build_ref(spec), events)


def _check_prefix_then_rest(c: Coordination[int, int], events: list[int], cut: int) -> None:
    whole = trace(c, events)
    prefix = list(c.steps(events[:cut]))
    assert [(s.results, s.next is None) for s in prefix] == whole[: len(prefix)]
    last = prefix[-1].next if prefix else c
    if last is None:
        assert len(whole) == len(prefix)  # finished inside the prefix: the rest is ignored
        return
    rest = trace(last, events[cut:])
    assert whole[len(prefix) :] == rest
    # The intermediate coordination is a value: feeding it again gives the same again.
    assert trace(last, events[cut:]) == rest
    assert c.feed(events).results == (whole[-1][0] if whole else [])


@settings(max_examples=400, deadline=None)
@given(spec=EXTRA_SPECS, events=EVENTS, data=st.data())
def test_feeding_a_prefix_then_the_rest_equals_feeding_all_at_once(
    spec: Any, events: list[int], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(events)))
    _check_prefix_then_rest(build(spec), events, cut)


@settings(max_examples=200, deadline=None)
@given(spec=EXTRA_SPECS, events=EVENTS)
def test_a_coordination_built_twice_behaves_the_same(spec: Any, events: list[int]) -> None:
    c = build(spec)
    assert trace(c, events) == trace(c, events) == trace(build(spec), events)


# -- orchestrations: the same property with None (end of stored events) among the events -------

OPT_EVENTS = st.lists(st.one_of(st.none(), K), max_size=12)


def _extend_orchestration(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.tuples(
            st.sampled_from(["oswitch", "omerge", "oconcat", "oexhaust"]), children, children
        ),
        st.tuples(st.just("oboth"), children, children),
        st.tuples(st.just("obody"), st.lists(children, min_size=1, max_size=3)),
        st.tuples(st.just("odebounce"), children, children),
        st.tuples(st.just("otake"), children, st.integers(min_value=0, max_value=2)),
    )


ORCHESTRATION_SPECS = st.recursive(
    st.tuples(st.just("lift"), EXTRA_SPECS, st.one_of(st.none(), K)),
    _extend_orchestration,
    max_leaves=5,
)


def build_orchestration(spec: Any, v: int = 0) -> Any:
    kind = spec[0]
    if kind == "lift":
        return orchestrate(build(spec[1], v), None if spec[2] is None else [spec[2]])
    if kind in ("oswitch", "omerge", "oconcat", "oexhaust"):
        method = getattr(build_orchestration(spec[1], v), f"{kind[1:]}_map")
        return method(lambda x, inner=spec[2]: build_orchestration(inner, x))
    if kind == "oboth":
        pair = both(build_orchestration(spec[1], v), build_orchestration(spec[2], v))
        return pair.map(lambda t: t[0] + t[1])
    if kind == "obody":
        return _orchestration_body(spec[1], v)
    if kind == "odebounce":
        source = build_orchestration(spec[1], v)
        return source.debounce(lambda x, d=spec[2]: build_orchestration(d, x))
    if kind == "otake":
        return build_orchestration(spec[1], v).take(spec[2])
    raise AssertionError(spec)


@orchestration
def _orchestration_body(steps: list[Any], v: int) -> Generator[Any, Any, Any]:
    total = 0
    for step in steps:
        total += yield build_orchestration(step, v)
    return total


@settings(max_examples=200, deadline=None)
@given(spec=ORCHESTRATION_SPECS, events=OPT_EVENTS, data=st.data())
def test_orchestrations_fed_a_prefix_then_the_rest_equal_all_at_once(
    spec: Any, events: list[int | None], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(events)))
    _check_prefix_then_rest(build_orchestration(spec), events, cut)  # type: ignore[arg-type]
