"""``@app.workflow``: declare a durable workflow hosted on Kafka, and its handle.

Declaring does no I/O: ``workflow_builder`` checks the options and builds the handle of a
body (``define_workflow`` validates it); ``App.workflow`` registers it with ``app.host(handle)``. The worker calls
``handle.open(runtime)`` to run the definition (``tidings.shell.kinds.workflow.agent``);
a program calls ``handle.start/result/value/status/signal/cancel``, which talk to the
worker through Kafka (see docs/workflows-hosted.md)::

    @app.workflow("enrich")
    async def enrich(ctx: WorkflowContext, order: str) -> int:
        return await ctx.activity("score", Retry.times(3), lambda a: score(a.idempotency_key, order))

    await enrich.start("order-17", "ABC")
    outcome = await enrich.result("order-17", timeout=60)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ....core.limits import check_id, check_payload_size
from ....core.partitioning import partition_for
from ....core.workflow import (
    Cancelled,
    Faulted,
    JournalRecord,
    Outcome,
    WorkflowDefinition,
    WorkflowStatus,
    define_workflow,
)
from ....core.workflow.queries import caller_args, query_value
from ....core.workflow_records import WorkflowInbox, WorkflowReply
from ....errors import (
    DefinitionError,
    ReplyTimeout,
    SchemaError,
    WorkflowCancelled,
    WorkflowEnded,
    WorkflowFaulted,
    WorkflowNotFound,
    WorkflowUpdateFailed,
    WorkflowUpdateRejected,
)
from .agent import WorkflowAgent, WorkflowTopics
from .codec import decode_outcome, outcome_from
from .store import WorkflowStore
from ...runtime.connection import KafkaConnection
from ...runtime.context import KindClient, KindContext
from ...runtime.hosting import Runtime, hosted_named
from ...runtime.ids import RandomIds
from ...runtime.requester import Requester
from .journal import read_journal
from ...runtime.topics import TopicSpec, deadletter_topic, spec_for, topic_name


class WorkflowHandle:
    """What ``@app.workflow`` returns: start, signal, cancel and inspect instances.

    Every method takes an optional ``bootstrap``: an address (which keeps the app's other
    Kafka properties) or a ``KafkaConnection``; the default is the app's. The calls go
    through a ``Client`` (``client``): its one producer and reply reader carry every
    request, and a timeout raises ``ReplyTimeout`` (a ``TimeoutError``).
    """

    def __init__(self, context: KindContext, definition: WorkflowDefinition, *, cache_size: int = 10_000) -> None:
        # The app it is declared in (``runtime/context.py``): partitions, timeouts, clients.
        self.context = context
        self.definition = definition
        self.name = definition.name
        self.cache_size = cache_size
        self.topics = WorkflowTopics(
            inbox=topic_name(context.name, "workflow", self.name, "inbox"),
            journal=topic_name(context.name, "workflow", self.name, "journal"),
            outcomes=topic_name(context.name, "workflow", self.name, "outcomes"),
            status=topic_name(context.name, "workflow", self.name, "status"),
            replies=topic_name(context.name, "workflow", self.name, "replies"),
            deadletter=deadletter_topic(context.name),
        )
        # The client serving this handle's calls, per connection (see ``client``).
        self._clients: dict[KafkaConnection, KindClient] = {}

    # -- the client side ---------------------------------------------------------------

    async def start(self, instance_id: str, input: Any = None, *, bootstrap: str | KafkaConnection | None = None) -> None:
        """Start ``instance_id`` with ``input``; a second start with the same id stores nothing.

        Returns once the request is in the inbox (durable); the worker decides it in order.

        Raises:
            LimitError: ``instance_id`` is empty, not valid UTF-8 or longer than
                ``MAX_ID_BYTES``, or the input is larger than ``MAX_PAYLOAD_BYTES``
                (``tidings.core.limits``; raised before producing).
            SchemaError: ``input`` cannot be stored or read back as the input type.
            BrokerError: The request could not be produced.
        """
        payload = self._start_payload(instance_id, input)
        requester = self.client(bootstrap).requester
        await requester.send(self.topics.inbox, _request(requester.ids, instance_id, "start", None, payload=payload))

    async def execute(
        self, instance_id: str, input: Any = None, timeout: float | None = None, *,
        bootstrap: str | KafkaConnection | None = None,
    ) -> Any:
        """Start ``instance_id`` with ``input`` and wait for its result value (Temporal's
        ``execute_workflow``): ``start`` then ``value``, with one record to the inbox instead of two.

        The outcome is watched before the start is sent, so a new instance's outcome is seen
        without asking the worker: the worker answers the start only when it stores nothing.
        An instance that existed already is then asked about, as ``result`` asks at once, and
        answers with its stored outcome if it has ended; a start the worker refused raises
        ``WorkflowNotFound`` with the reason. A new instance still running when half the
        timeout has gone is asked about too, so that a timeout says why (parked, and why).

        Raises:
            LimitError, SchemaError, BrokerError: as for ``start``.
            WorkflowFaulted, WorkflowCancelled, WorkflowNotFound, ReplyTimeout: as for ``value``.
        """
        return self._value_of(instance_id, await self.execute_outcome(
            instance_id, input, timeout, bootstrap=bootstrap))

    async def execute_outcome(
        self, instance_id: str, input: Any = None, timeout: float | None = None, *,
        bootstrap: str | KafkaConnection | None = None,
    ) -> Outcome:
        """``execute``, returning the outcome (``Finished``, ``Faulted``, ``Cancelled``) as
        ``result`` does instead of the value; a flow stage runs each element with it."""
        payload = self._start_payload(instance_id, input)
        return await self._outcome(instance_id, timeout, bootstrap, start=payload)

    def _start_payload(self, instance_id: str, input: Any) -> bytes:
        _check_id(instance_id)
        try:
            text, _ = self.definition.codec.convert(input, self.definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"workflow {self.name!r}: the input cannot be stored: {exc}") from exc
        payload = text.encode()
        check_payload_size(payload, "the input")
        return payload

    def outcome_reader(self, instance_id: str) -> Callable[[bytes], Outcome]:
        """Return how to read the outcome record of ``instance_id`` (any other is refused)."""

        def read(value: bytes) -> Outcome:
            ended, outcome = decode_outcome(value, self.definition)
            if ended != instance_id:
                raise SchemaError(f"an outcome of {ended!r} keyed {instance_id!r}")
            return outcome

        return read

    async def result(self, instance_id: str, timeout: float | None = None, *, bootstrap: str | KafkaConnection | None = None) -> Outcome:
        """Wait for the instance's outcome: ``Finished(value)``, ``Faulted(error)`` or ``Cancelled()``.

        Asks the worker once; while the instance runs, waits for its record on the outcomes
        topic, so an outcome written by a worker that restarted or took the instance over
        returns as soon as it is written. Without an answer (no worker running) it still
        waits for that record until the timeout.

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            ReplyTimeout: It had not ended within ``timeout`` seconds (default: the app's).
        """
        _check_id(instance_id)
        return await self._outcome(instance_id, timeout, bootstrap)

    async def _outcome(
        self, instance_id: str, timeout: float | None, bootstrap: str | KafkaConnection | None, *,
        start: bytes | None = None,
    ) -> Outcome:
        """Watch for the outcome, send the start (``start``: its payload) and ask the worker."""
        requester = self.client(bootstrap).requester
        wait = self.context.command_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        partition = partition_for(instance_id, self.context.partitions)

        read = self.outcome_reader(instance_id)

        # The end offset is noted before the start or the question is sent: an outcome the
        # worker writes after either lies beyond it.
        async with requester.outcome(self.topics.outcomes, partition, instance_id, read) as ended:
            if start is not None and await self._started(requester, instance_id, start, ended, deadline) \
                    and not ended.done():
                # Its outcome answers by itself. Asked about only once half the time is gone,
                # so that a timeout can say why (still running, parked and why).
                await asyncio.wait((ended,), timeout=_left(deadline) / 2)
            if ended.done():
                return ended.result()
            query = _request(requester.ids, instance_id, "query", requester.replies_topic)
            asked = asyncio.ensure_future(requester.ask(self.topics.inbox, query, _left(deadline)))
            try:
                await asyncio.wait((asked, ended), timeout=_left(deadline), return_when=asyncio.FIRST_COMPLETED)
                if ended.done():
                    return ended.result()
                reply = asked.result() if asked.done() else None
                if reply is not None and reply.answer == "not_found":
                    raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
                if reply is not None and reply.outcome is not None:
                    return outcome_from(reply.outcome, reply.result, reply.error, self.definition)
                try:
                    return await asyncio.wait_for(ended, _left(deadline))
                except TimeoutError:
                    raise ReplyTimeout(self._not_ended(instance_id, wait, reply)) from None
            finally:
                asked.cancel()

    async def _started(
        self, requester: Requester, instance_id: str, start: bytes, ended: asyncio.Future[Outcome], deadline: float,
    ) -> bool:
        """Send the start with ``wait``; return False if the instance existed before it.

        The worker answers such a start only when it stores nothing (``inbox_rules``): the
        instance existed (``accepted``), or its input was refused. A start that starts the
        instance gets no answer; its outcome, watched already, answers the caller. So the
        worker decides one inbox record per run however long the run takes (an ask after
        a fixed second was a second record for every run under load). The wait ends with
        that answer, the outcome or the deadline: True for the last two.

        Raises:
            WorkflowNotFound: The worker refused the start (the reason says why).
        """
        request = _request(requester.ids, instance_id, "start", requester.replies_topic, payload=start, wait=True)
        async with requester.answer_to(self.topics.inbox, request) as answer:
            await asyncio.wait((answer, ended), timeout=_left(deadline), return_when=asyncio.FIRST_COMPLETED)
            reply = answer.result() if answer.done() and not ended.done() else None
        if not isinstance(reply, WorkflowReply):  # no answer (a command's never keys a workflow request)
            return True
        if reply.answer == "rejected":
            raise WorkflowNotFound(f"the worker refused to start {self.name} {instance_id!r}: {reply.reason}")
        # The instance existed: its outcome may lie before the watch. (A worker older than
        # this rule answers a start that started the instance so too: one question more.)
        return False

    async def value(self, instance_id: str, timeout: float | None = None, *, bootstrap: str | KafkaConnection | None = None) -> Any:
        """Wait for the instance's result value.

        Raises:
            WorkflowFaulted: It ended Faulted (the message holds the stored error).
            WorkflowCancelled: It ended Cancelled.
            WorkflowNotFound, ReplyTimeout: as for ``result``.
        """
        return self._value_of(instance_id, await self.result(instance_id, timeout, bootstrap=bootstrap))

    def _value_of(self, instance_id: str, outcome: Outcome) -> Any:
        if isinstance(outcome, Faulted):
            raise WorkflowFaulted(f"{self.name} {instance_id!r} faulted: {outcome.error}", outcome.error)
        if isinstance(outcome, Cancelled):
            raise WorkflowCancelled(f"{self.name} {instance_id!r} was cancelled")
        return outcome.value

    async def status(
        self, instance_id: str, timeout: float | None = None, *, bootstrap: str | KafkaConnection | None = None
    ) -> WorkflowStatus | None:
        """Return RUNNING, FINISHED, FAULTED, CANCELLED or PARKED; None when never started.

        Raises:
            ReplyTimeout: No answer in time.
        """
        try:
            reply = await self._ask(instance_id, "query", timeout, bootstrap)
        except WorkflowNotFound:
            return None
        if reply.status is None:
            return None
        return WorkflowStatus(reply.status)

    async def signal(
        self, instance_id: str, name: str, payload: Any = None, *,
        timeout: float | None = None, bootstrap: str | KafkaConnection | None = None,
    ) -> None:
        """Deliver signal ``name`` with ``payload``; returns once it is stored.

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            WorkflowEnded: The instance has ended.
            LimitError: ``instance_id`` or ``name`` is empty, not valid UTF-8 or longer
                than ``MAX_ID_BYTES``, or the payload is larger than ``MAX_PAYLOAD_BYTES``
                (``tidings.core.limits``; raised before producing).
            SchemaError: The payload cannot be stored.
            ReplyTimeout: No answer in time (the signal may still be stored later).
        """
        _check_id(instance_id)
        check_id(name, "signal name")
        try:
            text = self.definition.codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"the payload of signal {name!r} cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), f"the payload of signal {name!r}")
        reply = await self._ask(instance_id, "signal", timeout, bootstrap, payload=text.encode(), signal=name)
        if reply.answer == "ended":
            raise WorkflowEnded(f"{self.name} {instance_id!r} has ended and takes no signal {name!r}")
        if reply.answer == "rejected":
            raise SchemaError(f"the worker rejected signal {name!r}: {reply.reason}")

    async def signal_with_start(
        self, instance_id: str, input: Any, signal_name: str, payload: Any = None, *,
        signal_id: str | None = None, timeout: float | None = None, bootstrap: str | KafkaConnection | None = None,
    ) -> str:
        """Start ``instance_id`` with ``input`` if it was never started; in either case deliver
        signal ``signal_name`` with ``payload``. One request: the worker stores the start and
        the signal in one decision, so a start and a signal racing each other lose nothing.

        ``signal_id`` names the signal (default: a new id per call). Calling again with the
        same id after a ``ReplyTimeout`` stores the signal at most once.

        Returns:
            ``"started"`` (this call started the instance, with the signal stored before its
            body ran) or ``"signalled"`` (it was running: the signal is stored, or was
            already under this ``signal_id``).

        Raises:
            WorkflowEnded: The instance has ended; nothing is stored.
            LimitError: An id or the signal name breaks the id limits, or the input or the
                payload is larger than ``MAX_PAYLOAD_BYTES`` (raised before producing).
            SchemaError: The input or the payload cannot be stored, or the worker rejected them.
            ReplyTimeout: No answer in time (the request may still be applied later: call
                again with the same ``signal_id``).
        """
        _check_id(instance_id)
        check_id(signal_name, "signal name")
        if signal_id is not None:
            check_id(signal_id, "signal_id")
        try:
            text, _ = self.definition.codec.convert(input, self.definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"workflow {self.name!r}: the input cannot be stored: {exc}") from exc
        try:
            signal_text = self.definition.codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"the payload of signal {signal_name!r} cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), "the input")
        check_payload_size(signal_text.encode(), f"the payload of signal {signal_name!r}")
        reply = await self._ask(
            instance_id, "signal_with_start", timeout, bootstrap, payload=signal_text.encode(), signal=signal_name,
            signal_id=signal_id or uuid.uuid4().hex, input=text.encode(),
        )
        if reply.answer == "ended":
            raise WorkflowEnded(f"{self.name} {instance_id!r} has ended and takes no signal {signal_name!r}")
        if reply.answer == "rejected":
            raise SchemaError(f"the worker rejected the signal-with-start {signal_name!r}: {reply.reason}")
        if reply.answer not in ("started", "signalled"):
            raise SchemaError(f"the worker answered {reply.answer!r} to a signal-with-start; is it an older "
                              "tidings? Upgrade the workers first")
        return reply.answer

    async def update(
        self, instance_id: str, name: str, payload: Any = None, *, timeout: float | None = None,
        wait_for: str = "completed", update_id: str | None = None, type: Any = None,
        bootstrap: str | KafkaConnection | None = None,
    ) -> Any:
        """Send update ``name`` with ``payload`` to a running instance and return the body's answer.

        The worker checks it on arrival (a declared name, a payload of the declared type, the
        validator) and stores nothing when it refuses it; accepted, it is journaled, the body
        takes it with ``ctx.wait_update`` and answers with ``call.reply``/``call.fail``.
        ``update_id`` names it (default: a new id per call): calling again with the same id
        stores nothing and gets the first answer, so a caller may retry after a
        ``ReplyTimeout`` or a worker's restart. While waiting, the request is sent again (same
        ids) every ``App(command_timeout)`` / 3 s, so an answer lost with a worker still comes.

        Args:
            wait_for: ``completed`` (default): return the body's answer; ``accepted``: return
                None once the update is journaled (ask again with the same ``update_id`` for
                the answer).
            timeout: Seconds to wait in all (default: the app's ``command_timeout``).
            type: How the answer is read (None: plain JSON).

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            WorkflowEnded: The instance has ended (also when it ended before its body answered).
            WorkflowUpdateRejected: The worker refused the update; nothing was stored.
            WorkflowUpdateFailed: The body failed the update (``.error``).
            LimitError, SchemaError: An id or the payload breaks a limit or cannot be stored.
            ReplyTimeout: No answer in time (call again with the same ``update_id``).
        """
        return await self._update(instance_id, "update", name, payload, None, timeout=timeout, wait_for=wait_for,
                                  update_id=update_id, type=type, bootstrap=bootstrap)

    async def update_with_start(
        self, instance_id: str, input: Any, name: str, payload: Any = None, *, timeout: float | None = None,
        wait_for: str = "completed", update_id: str | None = None, type: Any = None,
        bootstrap: str | KafkaConnection | None = None,
    ) -> Any:
        """Start ``instance_id`` with ``input`` if it was never started, then send it update ``name``:
        one request, so the update is stored with the start, before the body runs.

        As ``update`` otherwise (an ended instance raises ``WorkflowEnded`` and nothing is
        stored; a refused update starts nothing either).
        """
        _check_id(instance_id)
        try:
            text, _ = self.definition.codec.convert(input, self.definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"workflow {self.name!r}: the input cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), "the input")
        return await self._update(instance_id, "update_with_start", name, payload, text.encode(), timeout=timeout,
                                  wait_for=wait_for, update_id=update_id, type=type, bootstrap=bootstrap)

    async def _update(
        self, instance_id: str, kind: str, name: str, payload: Any, input: bytes | None, *, timeout: float | None,
        wait_for: str, update_id: str | None, type: Any, bootstrap: str | KafkaConnection | None,
    ) -> Any:
        _check_id(instance_id)
        check_id(name, "update name")
        if wait_for not in ("accepted", "completed"):
            raise ValueError(f"wait_for must be 'accepted' or 'completed', not {wait_for!r}")
        update_id = update_id or uuid.uuid4().hex
        check_id(update_id, "update_id")
        try:
            text = self.definition.codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"the payload of update {name!r} cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), f"the payload of update {name!r}")
        requester = self.client(bootstrap).requester
        wait = self.context.command_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        # One request id for every send: whichever answer comes (to the first send's address,
        # which the journal keeps, or to a repeat's) resolves this call.
        request = _request(requester.ids, instance_id, kind, requester.replies_topic, payload=text.encode(), input=input,
                           update=name, update_id=update_id, wait_for=wait_for)
        every = max(1.0, self.context.command_timeout / 3)
        reply = None
        while reply is None and _left(deadline) > 0:
            reply = await requester.ask(self.topics.inbox, request, min(every, _left(deadline)))
        if reply is None:
            raise ReplyTimeout(
                f"no answer to update {name!r} of {self.name} {instance_id!r} within {wait} s; is a worker "
                f"running? Call again with update_id={update_id!r} to get its answer without a second update"
            )
        what = f"update {name!r} of {self.name} {instance_id!r}"
        if reply.answer == "not_found":
            raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
        if reply.answer == "ended":
            raise WorkflowEnded(f"{self.name} {instance_id!r} has ended ({reply.outcome or reply.status}) and "
                                f"did not take {what}")
        if reply.answer == "rejected":
            raise WorkflowUpdateRejected(f"{what} was rejected, nothing was stored: {reply.reason}")
        if reply.answer == "failed":
            raise WorkflowUpdateFailed(f"{what} failed: {reply.reason}", reply.error)
        if reply.answer == "accepted" and wait_for == "accepted":
            return None
        if reply.answer != "completed":
            raise SchemaError(f"the worker answered {reply.answer!r} to an update; is it an older tidings? "
                              "Upgrade the workers first")
        try:
            return self.definition.codec.decode(reply.result or "null", type)
        except ValueError as exc:
            raise SchemaError(f"the answer to {what} does not read as {type!r}: {exc}") from exc

    async def query(
        self, instance_id: str, name: str, args: Sequence[Any] | None = None, *, timeout: float | None = None,
        type: Any = None, bootstrap: str | KafkaConnection | None = None,
    ) -> Any:
        """Call the instance's query handler ``name`` with ``args`` and return its value.

        The body registered the handler with ``await ctx.on_query(name, handler)``; the worker
        that owns the instance calls ``handler(*args)`` on its live state (a parked instance:
        the state it reached when it parked; an ended one: its final state, its journal
        replayed through the end) and journals nothing. Asking again is always safe.

        Args:
            args: The handler's positional arguments (JSON values; default none).
            timeout: Seconds to wait (default: the app's ``command_timeout``).
            type: How the value is read (None: plain JSON).

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            WorkflowQueryRejected: The instance registered no handler ``name`` (the message
                names those it did, and its status), or the args are unusable.
            WorkflowQueryFailed: The handler raised, ran longer than its bound or returned no
                JSON value (``.error``); the instance is untouched.
            LimitError, SchemaError: An id or the args break a limit or cannot be stored.
            ReplyTimeout: No answer in time.
        """
        _check_id(instance_id)
        check_id(name, "query name")
        sent = caller_args(args)
        try:
            text = self.definition.codec.encode(sent)
        except ValueError as exc:
            raise SchemaError(f"the args of query {name!r} cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), f"the args of query {name!r}")
        reply = await self._ask(instance_id, "query_handler", timeout, bootstrap, payload=text.encode(), query=name)
        return query_value(reply, f"query {name!r} of {self.name} {instance_id!r}", self.definition, type)

    async def journal(self, instance_id: str, *, bootstrap: str | KafkaConnection | None = None) -> list[JournalRecord]:
        """Return the instance's journal as the journal topic holds it now, oldest first.

        The decoded records (``Started``, ``StepStarted``, ``StepCompleted``, ...) a worker
        replays; empty when the instance was never started. Reads the topic directly (no
        worker needed), so records still being written may be missing.

        Raises:
            LimitError: ``instance_id`` breaks the id limits.
            BrokerError: The journal topic is missing or Kafka did not answer.
        """
        _check_id(instance_id)
        return await asyncio.to_thread(
            read_journal, self.context.connection_for(bootstrap), self.topics.journal, self.context.partitions,
            instance_id, group_prefix=f"{self.context.name}.",
        )

    async def cancel(self, instance_id: str, *, timeout: float | None = None, bootstrap: str | KafkaConnection | None = None) -> None:
        """Request cancellation (a second request, or one to an ended instance, changes nothing).

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            ReplyTimeout: No answer in time (the request may still be applied later).
        """
        await self._ask(instance_id, "cancel", timeout, bootstrap)

    def client(self, bootstrap: str | KafkaConnection | None = None) -> KindClient:
        """Return the ``Client`` this handle's calls go through for ``bootstrap``.

        That is the last client of this app that took the handle up (``client.workflow``,
        or any of its workflow calls) and was not closed since; otherwise the app's
        ``app.client(bootstrap)`` (the context's client source). So a program using handles and a client opens one
        producer and one reply reader in all. (Before, each handle had a client of its own.)
        """
        connection = self.context.connection_for(bootstrap)
        client = self._clients.get(connection)
        if client is None:
            client = self._clients[connection] = self.context.client(connection)
        return client

    def close(self, bootstrap: str | KafkaConnection | None = None) -> None:
        """Close the clients serving this handle: the one for ``bootstrap``, or every one.

        These are shared: closing one ends its requests for every handle and aggregate
        send using it too (a closed client reopens on its next request). The handle lets
        them go, so its next call goes through ``app.client(bootstrap)`` again.
        """
        connections = list(self._clients) if bootstrap is None else [self.context.connection_for(bootstrap)]
        for connection in connections:
            client = self._clients.pop(connection, None)
            if client is not None:
                client.close()

    def _serve_through(self, client: KindClient) -> None:
        """Send this handle's calls for ``client.connection`` through ``client`` (``Client.workflow_for``)."""
        self._clients[client.connection] = client

    def _let_go(self, client: KindClient) -> None:
        """Forget ``client``, which is closing (``Client.close``)."""
        if self._clients.get(client.connection) is client:
            del self._clients[client.connection]

    async def _ask(
        self, instance_id: str, kind: str, timeout: float | None, bootstrap: str | KafkaConnection | None, **fields: Any
    ) -> WorkflowReply:
        _check_id(instance_id)
        requester = self.client(bootstrap).requester
        wait = self.context.command_timeout if timeout is None else timeout
        reply = await requester.ask(self.topics.inbox, _request(requester.ids, instance_id, kind, requester.replies_topic, **fields), wait)
        if reply is None:
            raise ReplyTimeout(
                f"no answer from workflow {self.name!r} about {instance_id!r} within {wait} s; "
                "is a worker running? (`tidings worker MODULE:APP`)"
            )
        if reply.answer == "not_found":
            raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
        return reply

    def _not_ended(self, instance_id: str, wait: float, reply: WorkflowReply | None) -> str:
        """Say why ``result`` gave up, and what to check."""
        if reply is None:
            return (
                f"no answer from workflow {self.name!r} about {instance_id!r} and no outcome within {wait} s; "
                "is a worker running? (`tidings worker MODULE:APP`)"
            )
        if reply.status == WorkflowStatus.PARKED.value:
            return (
                f"{self.name} {instance_id!r} did not end within {wait} s: it is parked ({reply.reason}); "
                "the worker's log says why"
            )
        return (
            f"{self.name} {instance_id!r} did not end within {wait} s (it was {reply.status}); "
            f"it may still end: wait again, or ask `tidings status MODULE:APP {self.name} {instance_id}`"
        )

    # -- the hosting protocol (the worker side) -----------------------------------------

    def topic_specs(self) -> list[TopicSpec]:
        """Every topic this workflow needs (and the app's shared dead-letter topic)."""
        partitions = self.context.partitions
        topics = self.topics
        return [
            spec_for("inbox", topics.inbox, partitions=partitions),
            spec_for("journal", topics.journal, partitions=partitions),
            spec_for("outcomes", topics.outcomes, partitions=partitions),
            spec_for("status", topics.status, partitions=partitions),
            spec_for("replies", topics.replies, partitions=partitions),
            spec_for("deadletter", topics.deadletter, partitions=partitions),
        ]

    @property
    def kind(self) -> str:
        return "workflow"

    def open(self, runtime: Runtime) -> WorkflowAgent:
        """Open the store and return the agent that runs this workflow in a worker."""
        store = WorkflowStore(runtime.store_path(self.kind, self.name))
        return WorkflowAgent(
            self.definition, topics=self.topics, store=store, runtime=runtime, cache_size=self.cache_size,
            command_timeout=self.context.command_timeout,
            workflows=[w.name for w in self.context.declared(self.kind)],
        )


def workflow_builder(
    context: KindContext, name: str | None = None, **options: Any
) -> Callable[[Callable[..., Any]], WorkflowHandle]:
    """Return what builds the handle of a workflow of ``context`` from ``async def body(ctx, input)``.

    ``App.workflow`` applies it to the body it decorates, then registers the handle.

    Args:
        context: The app the workflow belongs to.
        name: The stored name (a topic segment); default: the body's ``__name__``.
        **options: ``input_type``, ``result_type`` (default: the body's annotations),
            ``cache_size`` (live instances a worker keeps in memory; default 10,000) and
            ``updates`` (the updates the body takes: names, name -> payload type, or
            ``UpdateDeclaration``s with a validator; ``core/workflow/updates.py``).

    Raises:
        DefinitionError: listing every unknown option (the builder raises it listing every
            problem with the body).
    """
    unknown = sorted(set(options) - {"input_type", "result_type", "cache_size", "updates"})
    if unknown:
        raise DefinitionError(f"workflow {name!r}", [f"unknown option {option!r}" for option in unknown])

    def build(body: Callable[..., Any]) -> WorkflowHandle:
        definition = define_workflow(
            name or str(getattr(body, "__name__", "")),
            body,
            input_type=options.get("input_type"),
            result_type=options.get("result_type"),
            updates=options.get("updates"),
        )
        return WorkflowHandle(context, definition, cache_size=options.get("cache_size", 10_000))

    return build


def workflow_named(context: KindContext, name: str) -> WorkflowHandle:
    """Return the handle of the workflow ``name`` declared in ``context`` (an App).

    Raises:
        LookupError: ``context`` declares no such workflow (the message lists the known ones).
    """
    handle = hosted_named(context.declared("workflow"), "workflow", name, app=context.name)
    assert isinstance(handle, WorkflowHandle)
    return handle


def _request(
    ids: RandomIds, instance_id: str, kind: str, reply_to: str | None, *, payload: bytes | None = None,
    signal: str | None = None, signal_id: str | None = None, input: bytes | None = None, update: str | None = None,
    update_id: str | None = None, wait_for: str | None = None, query: str | None = None, wait: bool = False,
) -> WorkflowInbox:
    """Build an inbox request with a new id from ``ids``; ``reply_to`` None asks for no answer."""
    return WorkflowInbox(
        request_id=ids.hex(),
        instance_id=instance_id,
        kind=kind,
        timestamp_ms=int(time.time() * 1000),
        payload=payload,
        signal=signal,
        reply_to=reply_to,
        wait=wait,
        signal_id=signal_id,
        input=input,
        update=update,
        update_id=update_id,
        wait_for=wait_for,
        query=query,
    )


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _check_id(instance_id: str) -> None:
    # LimitError is a ValueError and a SchemaError: raised before anything is produced.
    check_id(instance_id, "instance_id")
