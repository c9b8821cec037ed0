"""The client: commands to aggregates, and the app's workflows (confluent-kafka).

Every request goes through the client's one ``Requester`` (``requester.py``): one
producer, one thread reading the app's replies topic, one thread watching outcomes.
Commands are keyed by aggregate id and partitioned with ``murmur2_random`` (librdkafka's
name for the Java client's murmur2 partitioner), so they land on the partition that owns
the instance; their replies come back on the app's replies topic, keyed by command id.

The workflow calls (``start``, ``result``, ``value``, ``status``, ``signal``, ``signal_with_start``, ``cancel``)
hand off to the workflow's ``WorkflowHandle``, which makes its requests through this
client: a program using handles and a client has one producer and one reply reader.
``outcomes`` reads a workflow's compacted outcomes topic itself (``follower.py``).

The client knows its app through the same narrow ``KindContext`` a handle does
(``runtime/context.py``): ``App`` builds clients (``app.client``), so nothing here imports
``app.py``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from ...codec.payloads import load_payload, payload_of
from ...core.limits import check_command, check_id
from ...core.records import CommandEnvelope, ReplyEnvelope
from ...core.workflow import Outcome, WorkflowStatus
from ...core.saga_starts import REFUSAL_PREFIX
from ...errors import (
    AggregateVersionConflict,
    RecordError,
    ReplyTimeout,
    SagaAlreadyStarted,
    SchemaError,
)
from ..kinds.aggregate.handle import AggregateHandle
from ..kinds.workflow.codec import decode_outcome
from .follower import TopicFollower
from ..runtime.acls import CLIENT_NAME_ENV, client_group_prefix, client_replies_topic
from ..runtime.connection import KafkaConnection
from ..runtime.context import KindContext
from ..runtime.requester import Requester
from ..kinds.workflow.handle import WorkflowHandle, workflow_named

log = logging.getLogger(__name__)


class Client:
    """Talks to a running tidings worker through Kafka.

    Args:
        bootstrap: The Kafka connection (``app.connection_for``), or bootstrap servers,
            which keep the app's other Kafka properties.
        app: The App whose definitions and topics to use (any ``KindContext``).
        name: The client principal's name (``User:NAME``; default ``TIDINGS_CLIENT_NAME``):
            its replies come on its own topic ``{app}.replies.NAME``, which only it may read
            (``tidings acls --client User:NAME --apply`` creates it); without one, on the
            app's shared ``{app}.replies`` (docs/security.md, "Replies").

    Raises:
        DefinitionError: ``name`` cannot be part of a topic name.
    """

    def __init__(self, bootstrap: str | KafkaConnection, *, app: KindContext, name: str | None = None) -> None:
        #: Every Kafka client this client opens is built from it.
        self.connection = app.connection_for(bootstrap)
        self.bootstrap = self.connection.bootstrap
        self.app = app
        name = name or os.environ.get(CLIENT_NAME_ENV) or None
        self.name = name
        #: Where this client's commands and requests ask to be answered.
        self.replies_topic = app.replies_topic if name is None else client_replies_topic(app.name, f"User:{name}")
        # Opens its producer and threads on the first request, again after close().
        # Its readers' groups are under {app}.client., covered by one prefixed Group ACL.
        self._requester = Requester(self.connection, replies_topic=self.replies_topic,
                                    group_prefix=client_group_prefix(app.name))
        # The handles this client serves (close() lets them go), and what else close() closes.
        self._workflows: dict[int, WorkflowHandle] = {}
        self._followers: set[TopicFollower] = set()

    @property
    def requester(self) -> Requester:
        """The one requester this client's calls, and the calls of the handles it serves, go through."""
        return self._requester

    @property
    def _producer(self) -> Requester:
        # The requester owns this client's one producer; ``client._producer.flush(t)`` flushes it.
        return self._requester

    # -- public API --------------------------------------------------------------------

    async def send(
        self,
        aggregate: AggregateHandle[Any, Any, Any] | str,
        aggregate_id: str,
        command: Any,
        timeout: float | None = None,
        *,
        expected_version: int | None = None,
        command_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        """Send ``command`` and return the reply event (None when decide ignored it).

        Args:
            aggregate: The handle ``app.aggregate`` returned, or the aggregate's name.
            aggregate_id: The instance.
            command: A command model instance of that aggregate.
            timeout: Seconds to wait for the reply; default ``App.command_timeout``.
            expected_version: Refuse unless the instance is at this version.
            command_id: Idempotency key; a repeat gets the first verdict. Default: new.
            correlation_id: Carried onto the events; default the command id.

        Raises:
            LimitError: An id or the payload breaks a limit of ``tidings.core.limits``
                (raised before producing; a ``SchemaError`` and a ``ValueError``).
            AggregateVersionConflict: ``expected_version`` did not match.
            SagaAlreadyStarted: an event of the command would start a saga that this
                instance already started for the correlation id; nothing was stored.
            SchemaError: the worker could not use the command (it is dead-lettered).
            ReplyTimeout: no reply in time (the command may still be processed).
            BrokerError: the command could not be produced, or the replies topic read.
        """
        handle = self.handle_for(aggregate)
        reply = await self.send_envelope(
            handle, aggregate_id, command, timeout,
            expected_version=expected_version, command_id=command_id,
            correlation_id=correlation_id,
        )
        if reply.status == "conflict":
            raise AggregateVersionConflict(
                aggregate_id, reply.expected_version if reply.expected_version is not None else -1,
                reply.version,
            )
        if reply.status == "rejected":
            if (reply.reason or "").startswith(REFUSAL_PREFIX):
                raise SagaAlreadyStarted(reply.reason)
            raise SchemaError(f"the worker rejected the command: {reply.reason}")
        if reply.status == "ignored" or not reply.events:
            return None
        last = reply.events[-1]
        return load_payload(last.type, last.payload, handle.definition.event_types)

    async def send_envelope(
        self,
        aggregate: AggregateHandle[Any, Any, Any] | str,
        aggregate_id: str,
        command: Any,
        timeout: float | None = None,
        *,
        expected_version: int | None = None,
        command_id: str | None = None,
        correlation_id: str | None = None,
    ) -> ReplyEnvelope:
        """Like ``send`` but return the whole reply envelope, whatever its status.

        Raises:
            LimitError: Before anything is produced: an id is empty, not valid UTF-8 or
                longer than ``MAX_ID_BYTES``, or the payload is larger than
                ``MAX_PAYLOAD_BYTES`` (``tidings.core.limits``). It is a ``SchemaError``
                and a ``ValueError``.
            The rest: as for ``send``.
        """
        handle = self.handle_for(aggregate)
        check_id(aggregate_id, "aggregate_id")
        type_name, payload = payload_of(command)
        if type_name not in handle.definition.command_types:
            known = ", ".join(sorted(handle.definition.command_types))
            raise TypeError(
                f"{type_name} is not a command of aggregate {handle.name!r}; known: {known}"
            )
        command_id = command_id or self._requester.ids.hex()
        envelope = CommandEnvelope(
            command_id=command_id,
            correlation_id=correlation_id or command_id,
            aggregate_id=aggregate_id,
            type=type_name,
            payload=payload,
            timestamp_ms=int(time.time() * 1000),
            expected_version=expected_version,
            reply_to=self.replies_topic,
        )
        # The worker would dead-letter what breaks a limit; refusing it here says why.
        check_command(envelope)
        wait = self.app.command_timeout if timeout is None else timeout
        reply = await self._requester.ask(handle.topics.commands, envelope, wait)
        if reply is None:
            raise ReplyTimeout(
                f"no reply to command {command_id} for {handle.name}/{aggregate_id} "
                f"within {wait} s; is a worker running? (`tidings worker MODULE:APP`)"
            )
        return reply

    # -- workflows -----------------------------------------------------------------------

    async def start(self, workflow: WorkflowHandle | str, instance_id: str, input: Any = None) -> None:
        """Start ``instance_id`` of ``workflow`` with ``input``; see ``WorkflowHandle.start``.

        Args:
            workflow: The handle ``@app.workflow`` returned, or the workflow's name.
            instance_id: The instance; a second start with the same id stores nothing.
            input: The body's input.

        Raises:
            LookupError: The app declares no workflow of that name.
            SchemaError: ``input`` cannot be stored or read back as the input type.
        """
        await self.workflow_for(workflow).start(instance_id, input, bootstrap=self.connection)

    async def execute(
        self, workflow: WorkflowHandle | str, instance_id: str, input: Any = None, timeout: float | None = None
    ) -> Any:
        """Start ``instance_id`` of ``workflow`` and wait for its result value, in one inbox record;
        see ``WorkflowHandle.execute``.

        Raises:
            LookupError: The app declares no workflow of that name.
            SchemaError, WorkflowFaulted, WorkflowCancelled, WorkflowNotFound, ReplyTimeout: As
                for ``start`` and ``value``.
        """
        return await self.workflow_for(workflow).execute(instance_id, input, timeout, bootstrap=self.connection)

    async def result(self, workflow: WorkflowHandle | str, instance_id: str, timeout: float | None = None) -> Outcome:
        """Wait for the outcome: ``Finished(value)``, ``Faulted(error)`` or ``Cancelled()``.

        Raises:
            LookupError: The app declares no workflow of that name.
            WorkflowNotFound: No instance was ever started with this id.
            ReplyTimeout: It had not ended within ``timeout`` seconds (default: the app's).
        """
        return await self.workflow_for(workflow).result(instance_id, timeout, bootstrap=self.connection)

    async def value(self, workflow: WorkflowHandle | str, instance_id: str, timeout: float | None = None) -> Any:
        """Wait for the result value.

        Raises:
            LookupError: The app declares no workflow of that name.
            WorkflowFaulted, WorkflowCancelled: It did not finish.
            WorkflowNotFound, ReplyTimeout: As for ``result``.
        """
        return await self.workflow_for(workflow).value(instance_id, timeout, bootstrap=self.connection)

    async def status(
        self, workflow: WorkflowHandle | str, instance_id: str, *, timeout: float | None = None
    ) -> WorkflowStatus | None:
        """Return RUNNING, FINISHED, FAULTED, CANCELLED or PARKED; None when never started.

        Raises:
            LookupError: The app declares no workflow of that name.
            ReplyTimeout: No answer in time.
        """
        return await self.workflow_for(workflow).status(instance_id, timeout, bootstrap=self.connection)

    async def signal(
        self, workflow: WorkflowHandle | str, instance_id: str, name: str, payload: Any = None, *,
        timeout: float | None = None,
    ) -> None:
        """Deliver signal ``name`` with ``payload``; returns once it is stored.

        Raises:
            LookupError: The app declares no workflow of that name.
            WorkflowNotFound: No instance was ever started with this id.
            WorkflowEnded: The instance has ended.
            SchemaError: The payload cannot be stored.
            ReplyTimeout: No answer in time (the signal may still be stored later).
        """
        await self.workflow_for(workflow).signal(instance_id, name, payload, timeout=timeout, bootstrap=self.connection)

    async def signal_with_start(
        self, workflow: WorkflowHandle | str, instance_id: str, input: Any, signal_name: str, payload: Any = None, *,
        signal_id: str | None = None, timeout: float | None = None,
    ) -> str:
        """Start the instance with ``input`` if it was never started, and in either case deliver
        the signal, in one request; see ``WorkflowHandle.signal_with_start``.

        Returns:
            ``"started"`` or ``"signalled"``.

        Raises:
            LookupError: The app declares no workflow of that name.
            WorkflowEnded: The instance has ended; nothing is stored.
            SchemaError: The input or the payload cannot be stored.
            ReplyTimeout: No answer in time (call again with the same ``signal_id``).
        """
        return await self.workflow_for(workflow).signal_with_start(
            instance_id, input, signal_name, payload, signal_id=signal_id, timeout=timeout, bootstrap=self.connection)

    async def update(
        self, workflow: WorkflowHandle | str, instance_id: str, name: str, payload: Any = None, *,
        timeout: float | None = None, wait_for: str = "completed", update_id: str | None = None, type: Any = None,
    ) -> Any:
        """Send update ``name`` and return the body's answer; see ``WorkflowHandle.update``."""
        return await self.workflow_for(workflow).update(
            instance_id, name, payload, timeout=timeout, wait_for=wait_for, update_id=update_id, type=type,
            bootstrap=self.connection)

    async def update_with_start(
        self, workflow: WorkflowHandle | str, instance_id: str, input: Any, name: str, payload: Any = None, *,
        timeout: float | None = None, wait_for: str = "completed", update_id: str | None = None, type: Any = None,
    ) -> Any:
        """Start the instance if it was never started, then update it, in one request; see
        ``WorkflowHandle.update_with_start``."""
        return await self.workflow_for(workflow).update_with_start(
            instance_id, input, name, payload, timeout=timeout, wait_for=wait_for, update_id=update_id, type=type,
            bootstrap=self.connection)

    async def query(
        self, workflow: WorkflowHandle | str, instance_id: str, name: str, args: Sequence[Any] | None = None, *,
        timeout: float | None = None, type: Any = None,
    ) -> Any:
        """Call the instance's query handler ``name`` with ``args``; see ``WorkflowHandle.query``."""
        return await self.workflow_for(workflow).query(instance_id, name, args, timeout=timeout, type=type,
                                                       bootstrap=self.connection)

    async def cancel(self, workflow: WorkflowHandle | str, instance_id: str, *, timeout: float | None = None) -> None:
        """Request cancellation (a repeat, or one to an ended instance, changes nothing).

        Raises:
            LookupError: The app declares no workflow of that name.
            WorkflowNotFound: No instance was ever started with this id.
            ReplyTimeout: No answer in time (the request may still be applied later).
        """
        await self.workflow_for(workflow).cancel(instance_id, timeout=timeout, bootstrap=self.connection)

    async def outcomes(
        self, workflow: WorkflowHandle | str, *, follow: bool = True
    ) -> AsyncGenerator[tuple[str, Outcome], None]:
        """Yield ``(instance_id, outcome)`` for every ended instance of ``workflow``.

        Reads the workflow's compacted outcomes topic from the beginning of every partition
        (so instances that ended before the call come first, in no particular order across
        partitions); with ``follow`` it then waits for new outcomes until the iterator is
        closed, otherwise it stops at the end offsets it found when it started. Outcomes are
        the objects ``result`` returns (a result read as the declared result type).

        Each instance id is yielded at most once per iterator: a worker publishes an
        outcome again after recovery, so the topic may hold it more than once. The ids
        seen are kept in memory for the iterator's life. Records that cannot be read
        (not an outcome record, or a result that no longer reads as the result type) are
        skipped with a warning, tombstones silently. Closing the iterator (``aclose``, or
        garbage collection) stops its consumer thread; closing the client ends it. Leaving
        ``async for`` early does not close an async generator by itself: wrap it in
        ``contextlib.aclosing`` to stop the thread at once::

            async with aclosing(client.outcomes("enrich")) as outcomes:
                async for instance_id, outcome in outcomes:
                    ...

        Raises:
            LookupError: The app declares no workflow of that name.
            BrokerError: The outcomes topic does not exist, or reading it failed.
        """
        handle = self.workflow_for(workflow)
        follower = TopicFollower(self.connection, handle.topics.outcomes, follow=follow,
                                 group_prefix=client_group_prefix(self.app.name))
        self._followers.add(follower)
        seen: set[str] = set()
        try:
            await follower.start()
            while (chunk := await follower.next_chunk()) is not None:
                for record in chunk:
                    if record.value is None:
                        continue  # a tombstone deletes a key of a compacted topic; nothing ended
                    try:
                        instance_id, outcome = decode_outcome(record.value, handle.definition)
                    except RecordError as exc:
                        log.warning("skipping outcome record %s/%d@%d: %s",
                                    record.topic, record.partition, record.offset, exc)
                        continue
                    if instance_id in seen:
                        continue
                    seen.add(instance_id)
                    yield instance_id, outcome
        finally:
            self._followers.discard(follower)
            follower.close()

    def workflow(self, name: str) -> WorkflowHandle:
        """Return the handle of the workflow ``name``, its calls going through this client.

        Raises:
            LookupError: The app declares no workflow of that name (the message lists the known ones).
        """
        return self.workflow_for(name)

    def workflow_for(self, workflow: WorkflowHandle | str) -> WorkflowHandle:
        """Return the handle of ``workflow`` (a handle, or a workflow's name in the app).

        From then on, until this client is closed, the handle's calls for this client's
        bootstrap go through this client (``WorkflowHandle.client``).

        Raises:
            LookupError: The app declares no workflow of that name (the message lists the known ones).
        """
        handle = workflow if isinstance(workflow, WorkflowHandle) else workflow_named(self.app, workflow)
        if handle.context is self.app:
            handle._serve_through(self)
            # Remembered so that close() lets the handle go.
            self._workflows.setdefault(id(handle), handle)
        return handle

    def close(self) -> None:
        """Flush what was produced; stop the producer, the reply and outcome threads and ``outcomes``.

        An ``outcomes`` iterator still open ends (its next step stops the iteration). The
        handles this client served go back to ``app.client(bootstrap)``. A closed client
        can be used again: its next request opens a new producer and threads.
        """
        self._requester.close()
        for follower in list(self._followers):
            follower.close()
        for handle in self._workflows.values():
            handle._let_go(self)
        self._workflows.clear()

    # -- internals ---------------------------------------------------------------------

    def handle_for(
        self, aggregate: AggregateHandle[Any, Any, Any] | str
    ) -> AggregateHandle[Any, Any, Any]:
        """Return the handle of ``aggregate`` (a handle, or an aggregate's name)."""
        if not isinstance(aggregate, str):
            return aggregate
        aggregates = [h for h in self.app.declared("aggregate") if isinstance(h, AggregateHandle)]
        for handle in aggregates:
            if handle.name == aggregate:
                return handle
        known = ", ".join(h.name for h in aggregates) or "none"
        raise LookupError(f"app {self.app.name!r} has no aggregate {aggregate!r}; known: {known}")
