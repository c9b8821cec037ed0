"""Signals a projection handler sends to workflow instances (``await event.signal(...)``).

A projection that sees a saga's last event tells the workflow waiting on it::

    async def on_transfer(event: ProjectedEvent, view: View) -> None:
        if isinstance(event.value, TransferCompleted):
            try:
                await event.signal(transfer_and_wait, event.value.workflow_id, "transfer-finished", True)
            except WorkflowEnded:
                pass  # it stopped waiting (timed out, cancelled): nothing to tell it

The call is a request to the instance's inbox, answered by the worker that owns it
(``core/workflow/inbox_rules.py``), and the handler awaits the answer:

- ``accepted``: the signal is stored (or it was stored before: see below);
- ``ended``: ``WorkflowEnded``; ``not_found``: ``WorkflowNotFound`` (never started);
- ``rejected``: ``SchemaError`` (the workflow refused the payload); no answer within the
  timeout (``App(command_timeout)`` unless the call names one): ``ReplyTimeout``. The
  request stays in the inbox, so a worker that reads it later still stores the signal.

What the handler does not catch fails the event: it is dead-lettered with the reason and
the projection goes on (the projection's rule for every handler error).

**The signal id.** Each signal is named by the event it came from: the projection, the
event's aggregate, instance and version, the signal's name and its index among the event's
signals with that workflow, instance and name (``signal_id_for``). The instance stores a
signal id once (``core/workflow/signal_ids.py``), so when the projection handles an event
again (a crash after the signal and before the view's commit, a view rebuilt from the
start) the repeat is answered ``accepted`` and stores nothing. A repeat that reaches an
instance that has ended since is answered ``ended`` like any signal to it: a handler that
catches ``WorkflowEnded`` handles both.

**Awaited before the handler returns.** The signals are sent while the handler runs, before
the view's writes and the source offsets are committed, so a crash loses none; a handler
that raises after a signal was accepted leaves it stored (the view's writes are dropped).
A signal that was asked for but not awaited by the time the handler returned (a sync
handler, a forgotten ``await``, a task left running) fails the event rather than vanish:
signal from an ``async def`` handler.

Every projection agent sends through one ``Requester`` of its own (one producer, one
reader of ``{app}.replies``), made at the first signal and closed with the agent.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ....core.limits import MAX_ID_BYTES, check_id, check_payload_size
from ....core.workflow_records import WorkflowInbox
from ....errors import HandlerFailed, ReplyTimeout, SchemaError, WorkflowEnded, WorkflowNotFound
from ...runtime.connection import KafkaConnection
from ...runtime.requester import Requester

if TYPE_CHECKING:
    from ..workflow.handle import WorkflowHandle


def signal_id_for(
    projection: str, aggregate: str, aggregate_id: str, version: int, name: str, index: int
) -> str:
    """Return the id of the ``index``-th signal ``name`` a projection sends for one event.

    Readable when it fits in ``MAX_ID_BYTES``
    (``{projection}/{aggregate}/{aggregate_id}@{version}/{name}#{index}``); otherwise the
    projection's name and a SHA-256 of the readable form, so a long aggregate id or signal
    name still gives one id per event and signal.
    """
    readable = f"{projection}/{aggregate}/{aggregate_id}@{version}/{name}#{index}"
    if len(readable.encode()) <= MAX_ID_BYTES:
        return readable
    digest = hashlib.sha256(readable.encode()).hexdigest()
    return f"{projection[:100]}/sha256:{digest}"


class ProjectionSignals:
    """The signals of one projection agent: one requester, made at the first signal.

    Args:
        projection: The projection's name (part of every signal id).
        connection: The Kafka cluster and its client properties (the worker's).
        replies_topic: Where the answers come (the app's ``{app}.replies``).
        timeout: Seconds a signal waits for its answer unless the call names another.
    """

    def __init__(self, projection: str, connection: KafkaConnection, *, replies_topic: str, timeout: float) -> None:
        self.projection = projection
        self.connection = connection
        self.replies_topic = replies_topic
        self.timeout = timeout
        self._requester: Requester | None = None

    def for_event(self, aggregate: str, aggregate_id: str, version: int) -> EventSignals:
        """Return the signals of one event, for its ``ProjectedEvent``."""
        return EventSignals(self, aggregate, aggregate_id, version)

    async def send(
        self, workflow: WorkflowHandle, instance_id: str, name: str, payload: Any, signal_id: str,
        timeout: float | None,
    ) -> None:
        """Send one signal and raise what its answer means (see the module docstring)."""
        check_id(instance_id, "instance_id")
        check_id(name, "signal name")
        try:
            text = workflow.definition.codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"the payload of signal {name!r} cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), f"the payload of signal {name!r}")
        if self._requester is None:
            self._requester = Requester(self.connection, replies_topic=self.replies_topic)
        request = WorkflowInbox(
            request_id=self._requester.ids.hex(),
            instance_id=instance_id,
            kind="signal",
            timestamp_ms=int(time.time() * 1000),
            payload=text.encode(),
            signal=name,
            reply_to=self.replies_topic,
            signal_id=signal_id,
        )
        wait = self.timeout if timeout is None else timeout
        reply = await self._requester.ask(workflow.topics.inbox, request, wait)
        if reply is None:
            raise ReplyTimeout(
                f"no answer from workflow {workflow.name!r} about {instance_id!r} within {wait} s "
                f"(signal {name!r}, id {signal_id!r}); the request stays in its inbox"
            )
        if reply.answer == "not_found":
            raise WorkflowNotFound(f"no {workflow.name} instance {instance_id!r} was started")
        if reply.answer == "ended":
            raise WorkflowEnded(f"{workflow.name} {instance_id!r} has ended and takes no signal {name!r}")
        if reply.answer == "rejected":
            raise SchemaError(f"workflow {workflow.name!r} rejected signal {name!r}: {reply.reason}")

    def close(self) -> None:
        """Close the requester, if a signal made one."""
        requester, self._requester = self._requester, None
        if requester is not None:
            requester.close()


class EventSignals:
    """The signals one event's handler asks for: their ids, and whether each was awaited."""

    __slots__ = ("_signals", "_aggregate", "_aggregate_id", "_version", "_counts", "_asked")

    def __init__(self, signals: ProjectionSignals, aggregate: str, aggregate_id: str, version: int) -> None:
        self._signals = signals
        self._aggregate = aggregate
        self._aggregate_id = aggregate_id
        self._version = version
        # Made at the first signal: most events of most projections signal nothing.
        self._counts: dict[tuple[str, str, str], int] | None = None
        self._asked: list[Coroutine[Any, Any, None]] | None = None

    def signal(
        self, workflow: WorkflowHandle, instance_id: str, name: str, payload: Any, timeout: float | None
    ) -> Coroutine[Any, Any, None]:
        """Return the coroutine that sends one signal; its id is fixed here, in call order."""
        if self._counts is None or self._asked is None:
            self._counts, self._asked = {}, []
        key = (workflow.name, instance_id, name)
        index = self._counts.get(key, 0)
        self._counts[key] = index + 1
        signal_id = signal_id_for(
            self._signals.projection, self._aggregate, self._aggregate_id, self._version, name, index
        )
        sending = self._signals.send(workflow, instance_id, name, payload, signal_id, timeout)
        self._asked.append(sending)
        return sending

    def check_awaited(self) -> None:
        """Raise when a signal was asked for and not awaited to its end (the handler returned).

        Raises:
            HandlerFailed: Naming how many; the coroutines not started are closed (no
                "never awaited" warning: this error says it).
        """
        left = 0
        for sending in self._asked or ():
            state = inspect.getcoroutinestate(sending)
            if state == inspect.CORO_CLOSED:
                continue
            left += 1
            if state == inspect.CORO_CREATED:
                sending.close()
        if left:
            raise HandlerFailed(
                f"{left} event.signal(...) call(s) were not awaited before the handler returned; "
                "signal from an async handler: `await event.signal(...)`"
            )
