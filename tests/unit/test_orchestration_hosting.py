"""Hosting orchestrations without a broker: the pure core, the records, the store, and the
agent's crash window replayed against an in-memory Kafka."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tidings.codec import avro, payload_of
from tidings.coordination import both, event, orchestrate, orchestration
from tidings.core.orchestration import InstanceState, OrchestrationFailed, advance, replay
from tidings.core.orchestration_records import (
    Action,
    OrchestrationActions,
    OrchestrationEvent,
    OrchestrationOutcome,
)
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter, EventEnvelope
from tidings.shell.kinds.orchestration.agent import (
    OrchestrationAgent,
    OrchestrationStore,
    OrchestrationTopics,
)
from tidings.shell.kinds.projection.agent import ProjectionSource
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.hosting import Runtime
from tidings.shell.runtime.io import Delivered, Incoming, Outgoing


class Step(BaseModel):
    order: str
    step: str


class Charge(BaseModel):
    order: str


class Ship(BaseModel):
    order: str


def happened(step: str):  # noqa: ANN201
    def choose(value: Step) -> bool | None:
        if value.step == "boom":
            raise RuntimeError("boom")
        return True if value.step == step else None

    return event(choose)


@orchestration
def fulfil(order: str):  # noqa: ANN201
    yield orchestrate(happened("placed"))
    yield orchestrate(happened("paid"), actions=[Charge(order=order)])
    yield orchestrate(happened("shipped"), actions=[Ship(order=order)])
    return order.upper()


@orchestration
def pair(order: str):  # noqa: ANN201
    yield orchestrate(happened("placed"))
    yield both(
        orchestrate(happened("paid"), actions=[Charge(order=order)]),
        orchestrate(happened("shipped"), actions=[Ship(order=order)]),
    )


def run(orchestration_: Any, steps: Sequence[str], order: str = "o1") -> list[Any]:
    state, current, out = InstanceState(order), orchestration_, []
    for offset, step in enumerate(steps):
        advanced = advance(
            state, current, Step(order=order, step=step), source=("t", 0, offset), encode=payload_of
        )
        out.append(advanced)
        state, current = advanced.state, advanced.orchestration
    return out


def types(actions: Sequence[Action]) -> list[str]:
    return [action.type for action in actions]


# -- the pure core ----------------------------------------------------------------------


def test_each_event_is_evaluated_with_none_and_its_new_break_actions_are_returned() -> None:
    placed, noise, paid, shipped = run(fulfil("o1"), ["placed", "noise", "paid", "shipped"])
    assert (placed.state.sequence, types(placed.actions)) == (1, ["Charge"])
    assert (noise.state.sequence, noise.actions) == (2, ())  # still waiting on the same Break
    assert types(paid.actions) == ["Ship"]
    assert shipped.actions == () and shipped.orchestration is None
    assert shipped.outcome is not None and shipped.outcome.payload == b'"O1"'
    assert shipped.state.finished and shipped.state.pending == ()


def test_a_break_that_shrinks_asks_for_nothing_new() -> None:
    placed, paid, shipped = run(pair("o1"), ["placed", "paid", "shipped"])
    assert types(placed.actions) == ["Charge", "Ship"]
    assert paid.actions == () and types(paid.state.pending) == ["Ship"]
    assert shipped.outcome is not None and shipped.outcome.type == "json"


def test_an_orchestration_that_finishes_without_a_value_has_an_empty_outcome() -> None:
    silent = orchestrate(happened("placed").take(1)).filter(lambda result: False)
    (finished,) = run(silent, ["placed"])
    assert finished.outcome is not None and finished.outcome.type is None


def test_a_source_position_already_journaled_is_seen() -> None:
    (placed,) = run(fulfil("o1"), ["placed"])
    assert placed.state.seen("t", 0, 0) and not placed.state.seen("t", 0, 1)
    assert not placed.state.seen("t", 1, 0)


def test_an_orchestration_that_raises_or_asks_for_an_unstorable_action_fails_the_event() -> None:
    with pytest.raises(OrchestrationFailed, match="boom"):
        run(fulfil("o1"), ["boom"])
    unstorable = orchestrate(happened("never"), actions=[object()])
    with pytest.raises(OrchestrationFailed, match="cannot be stored"):
        run(unstorable, ["placed"])


def test_an_action_too_large_for_one_record_fails_the_event_instead_of_a_refused_write() -> None:
    # Written as they are, the broker would refuse the actions record at every attempt.
    from tidings.core.limits import MAX_VALUE_BYTES

    class Huge(BaseModel):
        blob: str

    too_large = orchestrate(happened("never"), actions=[Huge(blob="x" * MAX_VALUE_BYTES)])
    with pytest.raises(OrchestrationFailed, match="the limit is"):
        run(too_large, ["placed"])
    many = orchestrate(happened("never"), actions=[Huge(blob=str(n) * (MAX_VALUE_BYTES // 3)) for n in range(4)])
    with pytest.raises(OrchestrationFailed, match="bytes of new actions"):
        run(many, ["placed"])


def test_replaying_the_journal_continues_where_stepping_left_off() -> None:
    values = [Step(order="o1", step=s) for s in ("placed", "noise")]
    rebuilt = replay(fulfil("o1"), values)
    stepped = run(fulfil("o1"), ["placed", "noise"])[-1]
    assert rebuilt is not None and stepped.orchestration is not None
    paid = Step(order="o1", step="paid")
    assert rebuilt(paid).results == stepped.orchestration(paid).results == []
    assert rebuilt(paid).next(None).results == stepped.orchestration(paid).next(None).results  # type: ignore[union-attr]


# -- records and store ------------------------------------------------------------------


def test_orchestration_records_round_trip_through_avro() -> None:
    envelope = EventEnvelope("e", "c", "k", "a", 1, "Step", b"{}", 5, metadata={"x": "y"})
    records = [
        OrchestrationEvent("f", "o1", 3, "t", 1, 9, "ledger", envelope),
        OrchestrationActions("f", "o1", 3, (Action("Charge", b'{"order":"o1"}'),), 7),
        OrchestrationOutcome("f", "o1", 4, 8, "json", b'"O1"'),
        OrchestrationOutcome("f", "o2", 4, 8),
    ]
    for record in records:
        assert avro.decode(avro.encode(record)) == record


def test_the_store_keeps_states_events_and_offsets_together_and_drops_finished_journals(
    tmp_path: Path,
) -> None:
    store = OrchestrationStore(tmp_path / "db")
    placed, paid = run(fulfil("o1"), ["placed", "paid"])
    store.write([paid.state], [("o1", 1, b"one"), ("o1", 2, b"two"), ("o10", 1, b"x")], {("j", 0): 7})
    assert store.load("o1") == paid.state
    assert store.events("o1") == [b"one", b"two"]
    assert store.offset("j", 0) == 7 and store.offset("a", 0) is None
    finished = InstanceState("o1", 3, paid.state.sources, (), True)
    store.write([finished], [("o1", 3, b"three")], {})
    assert store.events("o1") == [] and store.events("o10") == [b"x"]
    assert store.load("o1") == finished
    store.close()


# -- the agent's crash window, against an in-memory Kafka ---------------------------------

PARTITIONS = 2
TOPICS = OrchestrationTopics("in", "journal", "actions", "outcomes", "dead")
SOURCE = ProjectionSource("ledger", "events", {"Step": Step})


class MemoryKafka:
    """Topics as lists per partition; a publisher and a reader over them."""

    def __init__(self) -> None:
        self.topics: dict[tuple[str, int], list[Outgoing]] = {}
        self.crash_keeping: set[str] | None = None  # topics that got a batch's records

    def send(self, records: Sequence[Outgoing]) -> asyncio.Future[list[Delivered]]:
        future: asyncio.Future[list[Delivered]] = asyncio.get_running_loop().create_future()
        delivered = []
        for record in records:
            if self.crash_keeping is not None and record.topic not in self.crash_keeping:
                continue
            log = self.topics.setdefault((record.topic, record.partition or 0), [])
            log.append(record)
            delivered.append(Delivered(record.topic, record.partition or 0, len(log) - 1))
        if self.crash_keeping is not None:
            # Killed before any ack reached the worker, whatever reached the broker.
            future.set_exception(RuntimeError("killed"))
        else:
            future.set_result(delivered)
        return future

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        return await self.send(records)

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        self.send(records)

    async def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return 0, len(self.topics.get((topic, partition), []))

    async def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> AsyncIterator[list[Incoming]]:
        log = self.topics.get((topic, partition), [])
        yield [
            Incoming(topic, partition, offset, r.key, r.value)
            for offset, r in enumerate(log[start:end], start)
        ]

    def values(self, topic: str, record_type: type[Any]) -> list[Any]:
        return [
            avro.decode_as(r.value or b"", record_type)
            for (name, _), log in sorted(self.topics.items()) if name == topic
            for r in log
        ]


def inbox_record(order: str, step: str, offset: int) -> Incoming:
    envelope = EventEnvelope(f"e{offset}", "c", f"agg-{offset}", "a", 1, "Step",
                             Step(order=order, step=step).model_dump_json().encode(), 0)
    routed = OrchestrationEvent("fulfil", order, 0, "events", 0, offset, "ledger", envelope)
    return Incoming("in", partition_for(order, PARTITIONS), offset, order.encode(), avro.encode(routed))


def agent_on(kafka: MemoryKafka, path: Path) -> OrchestrationAgent:
    runtime = Runtime(connection=KafkaConnection("127.0.0.1:9"), data_dir=path, partitions=PARTITIONS, publisher=kafka,
                      deadletter_topic=TOPICS.deadletter, clock=lambda: 1.0)
    return OrchestrationAgent(
        "fulfil", fulfil, sources=[SOURCE], topics=TOPICS,
        store=OrchestrationStore(path), runtime=runtime, reader=kafka,
    )


async def deliver(agent: OrchestrationAgent, batch: list[Incoming]) -> None:
    finish = await agent.start(batch)
    await finish()


@pytest.mark.parametrize(
    "reached", [set(), {"journal"}, {"actions"}, {"journal", "actions"}], ids=repr
)
def test_a_crash_between_producing_and_storing_repeats_and_misses_no_action(
    tmp_path: Path, reached: set[str]
) -> None:
    """Kill while the batch's journal and actions records are produced; ``reached`` got there."""

    async def scenario() -> None:
        kafka = MemoryKafka()
        agent = agent_on(kafka, tmp_path / "db")
        await deliver(agent, [inbox_record("o1", "placed", 0)])
        kafka.crash_keeping = reached
        with pytest.raises(RuntimeError, match="killed"):
            await deliver(agent, [inbox_record("o1", "paid", 1)])
        agent._store.close()
        kafka.crash_keeping = None
        # Restarted: the inbox is delivered again from the last acked batch.
        restarted = agent_on(kafka, tmp_path / "db")
        await deliver(restarted, [inbox_record("o1", "paid", 1)])
        await deliver(restarted, [inbox_record("o1", "paid", 1), inbox_record("o1", "shipped", 2)])
        actions = kafka.values("actions", OrchestrationActions)
        assert [(a.position, types(a.actions)) for a in actions] == [(1, ["Charge"]), (2, ["Ship"])]
        journal = kafka.values("journal", OrchestrationEvent)
        assert [e.sequence for e in journal] == [1, 2, 3]
        assert [o.payload for o in kafka.values("outcomes", OrchestrationOutcome)] == [b'"O1"']

    asyncio.run(scenario())


def test_a_rebuilt_store_writes_nothing_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        kafka = MemoryKafka()
        agent = agent_on(kafka, tmp_path / "first")
        steps = [("o1", "placed"), ("o2", "placed"), ("o1", "paid"), ("o1", "shipped")]
        for offset, (order, step) in enumerate(steps):
            await deliver(agent, [inbox_record(order, step, offset)])
        before = {key: list(log) for key, log in kafka.topics.items()}
        rebuilt = agent_on(kafka, tmp_path / "second")  # RocksDB lost
        await deliver(rebuilt, [inbox_record("o2", "paid", 9)])
        new = {key: log[len(before.get(key, [])):] for key, log in kafka.topics.items()}
        written = [avro.decode(r.value or b"") for log in new.values() for r in log]
        assert sorted(type(r).__name__ for r in written) == ["OrchestrationActions", "OrchestrationEvent"]
        (charge,) = [r for r in written if isinstance(r, OrchestrationActions)]
        assert (charge.instance, charge.position, types(charge.actions)) == ("o2", 2, ["Ship"])

    asyncio.run(scenario())


def test_an_undecodable_inbox_record_is_dead_lettered_and_the_batch_goes_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        kafka = MemoryKafka()
        agent = agent_on(kafka, tmp_path / "db")
        garbage = Incoming("in", 0, 5, b"k", b"garbage")
        await deliver(agent, [garbage, inbox_record("o1", "boom", 6), inbox_record("o1", "placed", 7)])
        letters = kafka.values("dead", DeadLetter)
        assert [letter.error_type for letter in letters] == ["DecodeError", "OrchestrationFailed"]
        (charge,) = kafka.values("actions", OrchestrationActions)
        assert charge.position == 1  # the failed event was not journaled

    asyncio.run(scenario())
