"""The client: send commands to aggregates and wait for their replies (confluent-kafka).

Commands are keyed by aggregate id and partitioned with ``murmur2_random`` (librdkafka's
name for the Java client's murmur2 partitioner), so they land on the partition that owns
the instance. Replies come back on the app's replies topic, keyed by command id; the
client reads every partition of it from the position it had when the client started,
and wakes the caller waiting for that command id.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Producer

from ..codec import avro
from ..codec.payloads import load_payload, payload_of
from ..core.records import CommandEnvelope, ReplyEnvelope
from ..errors import AggregateVersionConflict, BrokerError, ReplyTimeout, SchemaError
from .replies import ReplyReader

if TYPE_CHECKING:
    from .app import AggregateHandle, App


class Client:
    """Talks to a running tidings worker through Kafka.

    Args:
        bootstrap: Kafka bootstrap servers.
        app: The App whose definitions and topics to use.
    """

    def __init__(self, bootstrap: str, *, app: App) -> None:
        self.bootstrap = bootstrap
        self.app = app
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 1,
            }
        )
        self._replies: ReplyReader[ReplyEnvelope] = ReplyReader(
            bootstrap,
            app.replies_topic,
            decode=_decode_reply,
            on_poll=lambda: self._producer.poll(0),
        )

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
            AggregateVersionConflict: ``expected_version`` did not match.
            SchemaError: the worker could not use the command (it is dead-lettered).
            ReplyTimeout: no reply in time (the command may still be processed).
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
        """Like ``send`` but return the whole reply envelope, whatever its status."""
        handle = self.handle_for(aggregate)
        if not isinstance(aggregate_id, str) or not aggregate_id:
            raise ValueError(f"aggregate_id must be a non-empty string, not {aggregate_id!r}")
        type_name, payload = payload_of(command)
        if type_name not in handle.definition.command_types:
            known = ", ".join(sorted(handle.definition.command_types))
            raise TypeError(
                f"{type_name} is not a command of aggregate {handle.name!r}; known: {known}"
            )
        command_id = command_id or uuid.uuid4().hex
        envelope = CommandEnvelope(
            command_id=command_id,
            correlation_id=correlation_id or command_id,
            aggregate_id=aggregate_id,
            type=type_name,
            payload=payload,
            timestamp_ms=int(time.time() * 1000),
            expected_version=expected_version,
            reply_to=self.app.replies_topic,
        )
        await self._replies.start()
        future = self._replies.expect(command_id)
        try:
            self._produce(handle.topics.commands, aggregate_id.encode(), avro.encode(envelope))
            wait = self.app.command_timeout if timeout is None else timeout
            try:
                return await asyncio.wait_for(asyncio.shield(future), wait)
            except asyncio.TimeoutError:
                raise ReplyTimeout(
                    f"no reply to command {command_id} for {handle.name}/{aggregate_id} "
                    f"within {wait} s; is a worker running? (`tidings worker MODULE:APP`)"
                ) from None
        finally:
            self._replies.forget(command_id)

    def close(self) -> None:
        """Flush what was produced and stop reading replies."""
        self._producer.flush(10)
        self._replies.close()

    # -- internals ---------------------------------------------------------------------

    def handle_for(
        self, aggregate: AggregateHandle[Any, Any, Any] | str
    ) -> AggregateHandle[Any, Any, Any]:
        """Return the handle of ``aggregate`` (a handle, or an aggregate's name)."""
        if not isinstance(aggregate, str):
            return aggregate
        for handle in self.app.aggregates:
            if handle.name == aggregate:
                return handle
        known = ", ".join(h.name for h in self.app.aggregates) or "none"
        raise LookupError(f"app {self.app.name!r} has no aggregate {aggregate!r}; known: {known}")

    def _produce(self, topic: str, key: bytes, value: bytes) -> None:
        try:
            self._producer.produce(topic, value, key)
        except BufferError:
            self._producer.poll(0.1)
            self._producer.produce(topic, value, key)
        except KafkaException as exc:
            raise BrokerError(f"producing to {topic} failed: {exc}") from exc


def _decode_reply(value: bytes) -> tuple[str, ReplyEnvelope]:
    reply = avro.decode_as(value, ReplyEnvelope)
    return reply.command_id, reply
