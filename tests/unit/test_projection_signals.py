"""A projection's signals: ids derived from the event, and every signal awaited before the commit."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from tidings.core.limits import MAX_ID_BYTES, check_id
from tidings.errors import HandlerFailed
from tidings.shell.kinds.projection.signals import EventSignals, ProjectionSignals, signal_id_for


class Recording(ProjectionSignals):
    """Sends nothing: records the id of every signal that was awaited."""

    def __init__(self) -> None:
        super().__init__("notify", "127.0.0.1:1", replies_topic="x.replies", timeout=1.0)
        self.sent: list[str] = []

    async def send(self, workflow: Any, instance_id: str, name: str, payload: Any, signal_id: str,
                   timeout: float | None) -> None:
        self.sent.append(signal_id)


WAIT = SimpleNamespace(name="transfer_and_wait")
OTHER = SimpleNamespace(name="audit")


def test_a_signal_id_names_the_projection_the_event_the_signal_and_its_index() -> None:
    assert signal_id_for("notify", "transfer", "t-1", 3, "done", 0) == "notify/transfer/t-1@3/done#0"


def test_a_signal_id_too_long_to_read_is_a_digest_that_still_differs_per_event() -> None:
    long = "a" * 255
    first = signal_id_for("notify", "transfer", long, 1, "done", 0)
    assert check_id(first, "signal_id") and len(first.encode()) <= MAX_ID_BYTES
    assert first.startswith("notify/sha256:")
    assert first != signal_id_for("notify", "transfer", long, 2, "done", 0)
    assert first == signal_id_for("notify", "transfer", long, 1, "done", 0)


def test_the_index_counts_the_events_signals_per_workflow_instance_and_name() -> None:
    signals = Recording()

    async def handler(event: EventSignals) -> None:
        await event.signal(WAIT, "t-1", "done", 1, None)
        await event.signal(WAIT, "t-1", "done", 2, None)
        await event.signal(WAIT, "t-2", "done", 3, None)
        await event.signal(OTHER, "t-1", "done", 4, None)
        await event.signal(WAIT, "t-1", "late", 5, None)

    for _ in range(2):  # handled again: the same ids
        event = signals.for_event("transfer", "t-1", 7)
        asyncio.run(handler(event))
        event.check_awaited()
    base = "notify/transfer/t-1@7"
    once = [f"{base}/done#0", f"{base}/done#1", f"{base}/done#0", f"{base}/done#0", f"{base}/late#0"]
    assert signals.sent == once + once


def test_a_signal_that_was_not_awaited_fails_the_event_and_sends_nothing() -> None:
    signals = Recording()
    event = signals.for_event("transfer", "t-1", 1)
    event.signal(WAIT, "t-1", "done", True, None)  # a sync handler
    with pytest.raises(HandlerFailed, match="1 event.signal"):
        event.check_awaited()
    assert signals.sent == []


def test_a_signal_left_running_in_a_task_fails_the_event() -> None:
    class Slow(Recording):
        async def send(self, *args: Any) -> None:
            await asyncio.sleep(10)

    event = Slow().for_event("transfer", "t-1", 1)

    async def handler() -> None:
        task = asyncio.ensure_future(event.signal(WAIT, "t-1", "done", True, None))
        await asyncio.sleep(0)  # it starts, and the handler returns without awaiting it
        with pytest.raises(HandlerFailed):
            event.check_awaited()
        task.cancel()

    asyncio.run(handler())
