"""What every journaled kind gets from ``shell/runtime/journaled.py``, against an in-memory publisher."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from tidings.codec import avro
from tidings.core.records import DeadLetter
from tidings.errors import HandlerFailed, RecordRejected, SchemaError
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.hosting import Runtime, hosted_named
from tidings.shell.runtime.io import Delivered, Incoming, Outgoing
from tidings.shell.runtime.journaled import Agents, Backstop, CommitQueue, EventRouter, Journaled, OwnInputs, Pending, first_per_seq


class Published:
    """A publisher that keeps what it is given; ``refuse`` names topics Kafka would refuse."""

    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.records: list[Outgoing] = []
        self.refuse = refuse

    def send(self, records: Sequence[Outgoing]) -> asyncio.Future[list[Delivered]]:
        future: asyncio.Future[list[Delivered]] = asyncio.get_running_loop().create_future()
        refused = [(i, r.topic, "no such topic") for i, r in enumerate(records) if r.topic in self.refuse]
        kept = [r for r in records if r.topic not in self.refuse]
        self.records.extend(kept)
        delivered = [Delivered(r.topic, r.partition or 0, n) for n, r in enumerate(kept)]
        if refused:
            future.set_exception(RecordRejected(refused, delivered))
        else:
            future.set_result(delivered)
        return future

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        return await self.send(records)

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        self.send(records)

    def letters(self) -> list[DeadLetter]:
        return [avro.decode_as(r.value or b"", DeadLetter) for r in self.records if r.topic == "dead"]


def runtime_over(publisher: Published, tmp_path: Path) -> Runtime:
    return Runtime(connection=KafkaConnection("127.0.0.1:9"), data_dir=tmp_path, partitions=4, publisher=publisher,
                   deadletter_topic="dead", clock=lambda: 1.0)


def record(offset: int, value: bytes, key: bytes = b"k", topic: str = "in") -> Incoming:
    return Incoming(topic, 0, offset, key, value)


def test_the_backstop_dead_letters_a_failing_record_and_decides_the_next_ones_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        published = Published()
        runtime = runtime_over(published, tmp_path)
        backstop = Backstop(runtime, "counter c", wrap=HandlerFailed, prefix="counter c failed: ")
        decided: list[int] = []

        def decide(incoming: Incoming) -> None:
            if incoming.value == b"bad":
                raise SchemaError("not a number")
            if incoming.value == b"bug":
                raise KeyError("x")
            decided.append(incoming.offset)

        letters: list[Outgoing] = []
        backstop.each([record(1, b"1"), record(2, b"bad"), record(3, b"bug"), record(4, b"4")], decide, letters)
        await runtime.publisher.publish(letters)
        assert decided == [1, 4]
        assert [(letter.error_type, letter.offset) for letter in published.letters()] == [
            ("SchemaError", 2), ("HandlerFailed", 3)]
        assert published.letters()[1].reason.startswith("counter c failed: KeyError")

    asyncio.run(scenario())


def test_the_commit_queue_completes_commits_in_order_after_their_journal_is_produced(tmp_path: Path) -> None:
    async def scenario() -> None:
        published = Published()
        runtime = runtime_over(published, tmp_path)
        events: list[str] = []

        async def durable(waiting: Sequence[Pending[str]]) -> None:
            for pending in waiting:
                await pending.delivery
                events.append(f"stored {pending.commit}")

        queue = CommitQueue(runtime, "counter c", durable=durable, completed=lambda c: events.append(f"done {c}"),
                            together=True)
        task = asyncio.ensure_future(queue.run())
        first = queue.submit("a", [Outgoing("journal", b"a/1", b"1", 0)])
        second = queue.submit("b", [Outgoing("journal", b"b/1", b"1", 0)])
        assert [r.key for r in published.records] == [b"a/1", b"b/1"]  # produced at once, in order
        await asyncio.gather(first, second)
        assert events == ["stored a", "stored b", "done a", "done b"]
        task.cancel()

    asyncio.run(scenario())


def test_own_inputs_are_decided_in_batches_under_the_agents_lock() -> None:
    async def scenario() -> None:
        lock = asyncio.Lock()
        batches: list[list[int]] = []
        inputs: OwnInputs[int] = OwnInputs(lock, batches.append, most=2)
        assert not inputs.is_open
        inputs.open()
        for item in range(5):
            inputs.put(item)
        task = asyncio.ensure_future(inputs.run())
        while sum(map(len, batches)) < 5:
            await asyncio.sleep(0)
        assert batches == [[0, 1], [2, 3], [4]]
        task.cancel()

    asyncio.run(scenario())


def test_the_event_router_routes_skips_and_dead_letters_what_does_not_route_or_fit(tmp_path: Path) -> None:
    async def scenario() -> None:
        published = Published(refuse=frozenset({"inbox-too-small"}))
        runtime = runtime_over(published, tmp_path)

        def route(incoming: Incoming) -> Outgoing | None:
            if incoming.value == b"skip":
                return None
            if incoming.value == b"bad":
                raise ValueError("unreadable")
            topic = "inbox-too-small" if incoming.value == b"big" else "inbox"
            return Outgoing(topic, incoming.key, incoming.value, 1)

        router = EventRouter(runtime, "saga", "s", sources=["events"], route=route)
        agents = Agents((router,))
        (input_,) = agents.inputs
        assert (input_.name, input_.topics) == ("saga-s-router", ("events",))
        batch = [record(1, b"ok"), record(2, b"skip"), record(3, b"bad"), record(4, b"big")]
        finish = await router.start(batch)
        await finish()
        assert [r.value for r in published.records if r.topic == "inbox"] == [b"ok"]
        letters = published.letters()
        assert [(letter.error_type, letter.offset) for letter in letters] == [("DecodeError", 3), ("SchemaError", 4)]
        assert "the event routed to saga s was refused by Kafka" in letters[1].reason

    asyncio.run(scenario())


def test_an_instances_journal_keeps_the_first_record_of_each_seq_and_only_its_own_keys() -> None:
    chunks = [[record(0, b"one", b"a/1"), record(1, b"other", b"a/b/1"), record(2, b"zombie", b"a/1")],
              [record(3, b"unreadable", b"a/2"), record(4, b"two", b"a/2"), record(5, b"x", b"a/x")]]

    def decode(incoming: Incoming, seq: int) -> bytes | None:
        return None if incoming.value == b"unreadable" else incoming.value

    assert first_per_seq(chunks, "a", decode) == [b"one", b"two"]


def test_a_definition_is_found_by_kind_and_name_and_a_missing_one_lists_the_known() -> None:
    class Named:
        def __init__(self, kind: str, name: str) -> None:
            self.kind, self.name = kind, name

    hosted = [Named("workflow", "b"), Named("saga", "a"), Named("workflow", "a")]
    assert hosted_named(hosted, "workflow", "a", app="shop") is hosted[2]  # type: ignore[arg-type]
    with pytest.raises(LookupError, match=r"^app 'shop' has no workflow 'c'; known: a, b$"):
        hosted_named(hosted, "workflow", "c", app="shop")  # type: ignore[arg-type]


def test_an_agent_that_owns_nothing_catches_every_assigned_partition_up_before_its_next_batch(tmp_path: Path) -> None:
    """A start or a restart: every partition's instances resume before anything else is
    decided. An agent already deciding other partitions lets a batch in between two catch-ups."""

    async def scenario(owned_before: list[int]) -> list[str]:
        order: list[str] = []

        async def catch_up(partition: int) -> None:
            order.append(f"catch-up {partition}")
            await asyncio.sleep(0.01)  # a journal read: the loop runs others meanwhile

        journaled = Journaled(runtime_over(Published(), tmp_path), "workflow", "w", journal=None, catch_up=catch_up)
        await journaled.owner.ensure_ready(owned_before)
        order.clear()

        async def batch() -> None:
            await asyncio.sleep(0.005)  # arrives during the first catch-up
            async with journaled.lock:
                order.append("batch")

        await asyncio.gather(journaled.ready_now([("in", 0), ("in", 1), ("in", 2), ("other", 3)], "in"), batch())
        assert all(journaled.owner.is_ready(p) for p in (0, 1, 2))
        return order

    assert asyncio.run(scenario([])) == ["catch-up 0", "catch-up 1", "catch-up 2", "batch"]
    assert asyncio.run(scenario([5])) == ["catch-up 0", "batch", "catch-up 1", "catch-up 2"]
