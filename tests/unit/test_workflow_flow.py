"""WorkflowFlow stages (SPEC §7) over a fake async handle: order, the bound, outcomes, timeouts, arguments.

The handle here has the hosted ``WorkflowHandle``'s shape (``await start(id, input)``,
``await result(id, timeout)``); each instance ends when the test says so, so the tests
control the order in which outcomes arrive. The real broker is in
``tests/integration/test_workflow_flow.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

import pytest

from tidings import Cancelled, Faulted, Finished, ReplyTimeout, WorkflowFlow
from tidings.core.workflow import Outcome


class FakeHandle:
    """Starts instances idempotently; ``end(id, outcome)`` ends one; counts what is in flight.

    "In flight" is what the stage bounds: started and not yet yielded to its consumer
    (the consumer calls ``yielded``).
    """

    def __init__(self, *, auto: dict[str, Outcome] | None = None, delay_of: Any = None) -> None:
        self.started: list[str] = []
        self.starts: dict[str, int] = {}
        self.inputs: dict[str, Any] = {}
        self.outcomes: dict[str, asyncio.Future[Outcome]] = {}
        self.in_flight = 0
        self.most_in_flight = 0
        self.delay_of = delay_of  # id -> seconds until it finishes with Finished(input) by itself
        self.auto = auto or {}

    def _future(self, instance_id: str) -> asyncio.Future[Outcome]:
        if instance_id not in self.outcomes:
            self.outcomes[instance_id] = asyncio.get_running_loop().create_future()
        return self.outcomes[instance_id]

    async def start(self, instance_id: str, input: Any = None) -> None:
        await asyncio.sleep(0)  # the produce
        self.starts[instance_id] = self.starts.get(instance_id, 0) + 1
        if self.starts[instance_id] > 1:
            return  # a second start stores nothing
        self.started.append(instance_id)
        self.inputs[instance_id] = input
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        future = self._future(instance_id)
        if instance_id in self.auto:
            future.set_result(self.auto[instance_id])
        elif self.delay_of is not None:
            delay = self.delay_of(instance_id)
            def finish() -> None:
                if not future.done():
                    future.set_result(Finished(input))

            asyncio.get_running_loop().call_later(delay, finish)

    async def result(self, instance_id: str, timeout: float | None = None) -> Outcome:
        try:
            return await asyncio.wait_for(asyncio.shield(self._future(instance_id)), timeout)
        except TimeoutError:
            raise ReplyTimeout(f"{instance_id!r} did not end within {timeout} s (it was running)") from None

    def end(self, instance_id: str, outcome: Outcome) -> None:
        self._future(instance_id).set_result(outcome)

    def yielded(self) -> None:
        self.in_flight -= 1


async def source(elements: Iterable[Any], *, pause: float = 0.0) -> AsyncIterator[Any]:
    for element in elements:
        if pause:
            await asyncio.sleep(pause)
        yield element


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_outcomes_come_in_input_order_though_the_workflows_end_in_reverse() -> None:
    async def scenario() -> list[tuple[str, Outcome]]:
        # Element n takes (10 - n) * 10 ms: the last ends first.
        handle = FakeHandle(delay_of=lambda i: (10 - int(i.split("-")[1])) * 0.01)
        stage = WorkflowFlow.run(handle, lambda n: f"e-{n}", 10, timeout=5)
        got = []
        async for pair in stage(source(range(10))):
            handle.yielded()
            got.append(pair)
        assert handle.inputs == {f"e-{n}": n for n in range(10)}
        return got

    assert run(scenario()) == [(f"e-{n}", Finished(n)) for n in range(10)]


def test_at_most_parallelism_elements_are_between_start_and_outcome() -> None:
    async def scenario() -> FakeHandle:
        handle = FakeHandle(delay_of=lambda i: 0.001 * (hash(i) % 7))
        stage = WorkflowFlow.run(handle, str, 3, timeout=5)
        async for _ in stage(source(range(40))):
            handle.yielded()
            await asyncio.sleep(0.002)  # a slow consumer: finished elements wait to be yielded
        return handle

    handle = run(scenario())
    assert handle.started == [str(n) for n in range(40)]
    assert handle.most_in_flight == 3


def test_a_blocked_head_stops_the_starts_at_the_bound() -> None:
    async def scenario() -> tuple[list[str], list[tuple[str, Outcome]]]:
        handle = FakeHandle()
        stage = WorkflowFlow.run(handle, str, 4, timeout=5)
        got: list[tuple[str, Outcome]] = []

        async def consume() -> None:
            async for pair in stage(source(range(10))):
                got.append(pair)

        consumer = asyncio.ensure_future(consume())
        await asyncio.sleep(0.05)
        for n in range(1, 4):  # all but the head end: nothing is yielded, nothing more starts
            handle.end(str(n), Finished(n))
        await asyncio.sleep(0.05)
        blocked = list(handle.started)
        assert got == []
        handle.end("0", Finished(0))
        for n in range(4, 10):
            await asyncio.sleep(0.01)
            handle.end(str(n), Finished(n))
        await consumer
        return blocked, got

    blocked, got = run(scenario())
    assert blocked == ["0", "1", "2", "3"]
    assert got == [(str(n), Finished(n)) for n in range(10)]


def test_an_outcome_is_yielded_while_the_source_has_nothing_new() -> None:
    async def scenario() -> list[str]:
        handle = FakeHandle(auto={"a": Finished(1)})
        stage = WorkflowFlow.run(handle, str, 8, timeout=5)
        events = []
        gate = asyncio.Event()

        async def slow_source() -> AsyncIterator[str]:
            yield "a"
            await gate.wait()
            events.append("source resumed")
            yield "b"

        async def consume() -> None:
            async for instance_id, _ in stage(slow_source()):
                events.append(f"got {instance_id}")
                if instance_id == "a":
                    gate.set()
                else:
                    break

        handle.auto["b"] = Finished(2)
        await asyncio.wait_for(consume(), 5)
        return events

    assert run(scenario()) == ["got a", "source resumed", "got b"]


def test_faulted_and_cancelled_workflows_are_elements_like_finished_ones() -> None:
    outcomes = {"ok": Finished("fine"), "bad": Faulted("card declined"), "gone": Cancelled()}

    async def scenario() -> list[tuple[str, Outcome]]:
        stage = WorkflowFlow.run(FakeHandle(auto=outcomes), str, 2, timeout=timedelta(seconds=5))
        return [pair async for pair in stage(source(["bad", "ok", "gone", "ok"]))]

    assert run(scenario()) == [
        ("bad", Faulted("card declined")), ("ok", Finished("fine")), ("gone", Cancelled()), ("ok", Finished("fine")),
    ]


def test_a_repeated_id_starts_once_and_yields_its_outcome_each_time() -> None:
    async def scenario() -> tuple[list[tuple[str, Outcome]], dict[str, int], list[str]]:
        handle = FakeHandle(delay_of=lambda i: 0.01)
        stage = WorkflowFlow.run(handle, lambda order: f"enrich-{order}", 4, timeout=5)
        got = [pair async for pair in stage(source(["A", "B", "A"]))]
        return got, handle.starts, handle.started

    got, starts, started = run(scenario())
    assert got == [("enrich-A", Finished("A")), ("enrich-B", Finished("B")), ("enrich-A", Finished("A"))]
    assert started == ["enrich-A", "enrich-B"] and starts["enrich-A"] == 2


def test_a_workflow_that_does_not_end_in_time_fails_the_stage_and_carries_on() -> None:
    async def scenario() -> tuple[list[str], BaseException | None, FakeHandle]:
        handle = FakeHandle(delay_of=lambda i: 10.0 if i == "slow" else 0.01)
        stage = WorkflowFlow.run(handle, str, 4, timeout=0.2)
        got: list[str] = []
        caught = None
        began = asyncio.get_running_loop().time()
        try:
            async for instance_id, _ in stage(source(["a", "slow", "b", "c", "d", "e"])):
                got.append(instance_id)
        except TimeoutError as exc:
            caught = exc
        assert asyncio.get_running_loop().time() - began < 2.0  # reported when it happens
        return got, caught, handle

    got, caught, handle = run(scenario())
    assert got == ["a"]
    assert isinstance(caught, TimeoutError)
    assert "'slow' did not end within 0.2 s" in str(caught) and "carries on" in str(caught)
    # The stage stopped waiting; it did not cancel the workflow (the fake never saw a cancel).
    assert "slow" in handle.started and not handle.outcomes["slow"].cancelled()


def test_the_timeout_counts_from_each_start_not_from_the_stage() -> None:
    async def scenario() -> list[str]:
        # Each takes 0.15 s with a 0.3 s timeout; 10 elements one at a time take 1.5 s in all.
        handle = FakeHandle(delay_of=lambda i: 0.15)
        stage = WorkflowFlow.run(handle, str, 1, timeout=0.3)
        return [instance_id async for instance_id, _ in stage(source(range(10)))]

    assert run(scenario()) == [str(n) for n in range(10)]


def test_a_handle_that_ignores_the_timeout_is_still_bounded() -> None:
    class Deaf(FakeHandle):
        async def result(self, instance_id: str, timeout: float | None = None) -> Outcome:
            return await self._future(instance_id)

    async def scenario() -> None:
        stage = WorkflowFlow.run(Deaf(), str, 1, timeout=0.1)
        async for _ in stage(source(["never"])):
            pass

    with pytest.raises(TimeoutError, match="'never' did not end within 0.1 s"):
        run(asyncio.wait_for(scenario(), 5))


def test_errors_of_id_of_start_and_the_source_fail_the_stage() -> None:
    class Refusing(FakeHandle):
        async def start(self, instance_id: str, input: Any = None) -> None:
            raise ValueError(f"instance_id {instance_id!r} is too long")

    async def drain(stage: Any, elements: AsyncIterator[Any]) -> list[Any]:
        return [pair async for pair in stage(elements)]

    with pytest.raises(ZeroDivisionError):
        run(drain(WorkflowFlow.run(FakeHandle(auto={"1": Finished(1)}), lambda n: str(1 // n), 2, 5),
                  source([1, 0])))
    with pytest.raises(ValueError, match="too long"):
        run(drain(WorkflowFlow.run(Refusing(), str, 2, 5), source([1])))

    async def broken() -> AsyncIterator[int]:
        yield 1
        raise OSError("source lost")

    with pytest.raises(OSError, match="source lost"):
        run(drain(WorkflowFlow.run(FakeHandle(auto={"1": Finished(1)}), str, 2, 5), broken()))


def test_a_consumer_that_stops_early_cancels_the_waits_not_the_workflows() -> None:
    async def scenario() -> FakeHandle:
        handle = FakeHandle(auto={"0": Finished(0)})
        stage = WorkflowFlow.run(handle, str, 3, timeout=5)
        outcomes = stage(source(range(10)))
        assert await anext(outcomes) == ("0", Finished(0))
        await outcomes.aclose()  # type: ignore[attr-defined]
        return handle

    handle = run(scenario())
    # "0" was yielded and the consumer left before asking for more: "3" never started.
    assert handle.started == ["0", "1", "2"]
    assert not any(future.cancelled() for future in handle.outcomes.values())


def test_an_empty_source_yields_nothing() -> None:
    async def scenario() -> list[Any]:
        handle = FakeHandle()
        return [pair async for pair in WorkflowFlow.run(handle, str, 1, 1)(source([]))]

    assert run(scenario()) == []


def test_start_yields_ids_in_order_once_stored_without_waiting_for_outcomes() -> None:
    class SlowStarts(FakeHandle):
        async def start(self, instance_id: str, input: Any = None) -> None:
            await asyncio.sleep(0.01 * (5 - int(instance_id)))  # the last start is stored first
            await super().start(instance_id, input)

    async def scenario() -> tuple[list[str], FakeHandle]:
        handle = SlowStarts()  # no instance ever ends
        stage = WorkflowFlow.start(handle, str, 2)
        ids = []
        async for instance_id in stage(source(range(5))):
            assert instance_id in handle.started  # its start is stored before it is yielded
            ids.append(instance_id)
        return ids, handle

    ids, handle = run(scenario())
    assert ids == ["0", "1", "2", "3", "4"]
    assert sorted(handle.started) == ids


def test_start_keeps_at_most_parallelism_starts_in_flight() -> None:
    in_flight = most = 0

    class Counting(FakeHandle):
        async def start(self, instance_id: str, input: Any = None) -> None:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.005)
            in_flight -= 1

    async def scenario() -> list[str]:
        return [i async for i in WorkflowFlow.start(Counting(), str, 3)(source(range(20)))]

    assert run(scenario()) == [str(n) for n in range(20)]
    assert most == 3


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"parallelism": 0}, "parallelism must be an int of at least 1, not 0"),
        ({"parallelism": -3}, "parallelism must be an int of at least 1, not -3"),
        ({"parallelism": 2.5}, "parallelism must be an int of at least 1, not 2.5"),
        ({"parallelism": True}, "parallelism must be an int of at least 1, not True"),
        ({"timeout": 0}, "timeout must be a positive finite number of seconds or a timedelta, not 0"),
        ({"timeout": -1.0}, "timeout must be a positive finite number of seconds"),
        ({"timeout": timedelta(0)}, "timeout must be a positive finite number of seconds"),
        ({"timeout": float("inf")}, "timeout must be a positive finite number of seconds"),
        ({"timeout": float("nan")}, "timeout must be a positive finite number of seconds"),
        ({"timeout": "5"}, "timeout must be a positive finite number of seconds"),
        ({"timeout": None}, "timeout must be a positive finite number of seconds"),
        ({"id_of": "enrich-{}"}, "id_of must be callable: id_of(element) -> str, not 'enrich-{}'"),
        ({"handle": object()}, "handle must be a workflow handle with start and result"),
    ],
)
def test_run_refuses_invalid_arguments_at_once(arguments: dict[str, Any], message: str) -> None:
    given: dict[str, Any] = {"handle": FakeHandle(), "id_of": str, "parallelism": 8, "timeout": 60, **arguments}
    with pytest.raises(ValueError, match="^WorkflowFlow: .*" + _escape(message)):
        WorkflowFlow.run(given["handle"], given["id_of"], given["parallelism"], given["timeout"])


def test_every_reason_is_given_together() -> None:
    with pytest.raises(ValueError) as caught:
        WorkflowFlow.run(FakeHandle(), None, 0, -1)  # type: ignore[arg-type]
    text = str(caught.value)
    assert "id_of must be callable" in text and "parallelism" in text and "timeout" in text


def test_start_refuses_invalid_arguments_and_needs_no_result() -> None:
    class StartOnly:
        async def start(self, instance_id: str, input: Any = None) -> None:
            return None

    WorkflowFlow.start(StartOnly(), str, 1)  # no result method needed, no timeout
    with pytest.raises(ValueError, match="parallelism must be an int of at least 1, not 0"):
        WorkflowFlow.start(StartOnly(), str, 0)
    with pytest.raises(ValueError, match="id_of must be callable"):
        WorkflowFlow.start(StartOnly(), 3, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="handle must be a workflow handle with start; .* has no start"):
        WorkflowFlow.start(object(), str, 1)  # type: ignore[arg-type]


def _escape(text: str) -> str:
    import re

    return re.escape(text)
