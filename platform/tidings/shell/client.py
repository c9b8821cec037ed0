"""The client: send commands to aggregates and wait for their replies (confluent-kafka).

Commands are keyed by aggregate id and partitioned with ``murmur2_random`` (librdkafka's
name for the Java client's murmur2 partitioner), so they land on the partition that owns
the instance. Replies come back on the app's replies topic, keyed by command id; the
client reads every partition of it from the position it had when the client started,
and wakes the caller waiting for that command id.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ..codec import avro
from ..codec.payloads import load_payload, payload_of
from ..core.records import CommandEnvelope, ReplyEnvelope
from ..errors import AggregateVersionConflict, BrokerError, ReplyTimeout, SchemaError
from .kafka import watermarks

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
        self._pending: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[ReplyEnvelope]]] = {}
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_error: BaseException | None = None

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
        await self._ensure_started()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ReplyEnvelope] = loop.create_future()
        with self._lock:
            self._pending[command_id] = (loop, future)
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
            with self._lock:
                self._pending.pop(command_id, None)

    def close(self) -> None:
        """Flush what was produced and stop reading replies."""
        self._producer.flush(10)
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

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

    async def _ensure_started(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tidings-replies", daemon=True)
            self._thread.start()
        if not self._started.is_set():
            await asyncio.to_thread(self._started.wait, 30)
            if self._start_error is not None:
                raise BrokerError(f"reading replies failed: {self._start_error}") from self._start_error
            if not self._started.is_set():
                raise BrokerError(f"no answer from Kafka at {self.bootstrap} within 30 s")

    def _run(self) -> None:
        topic = self.app.replies_topic
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tidings-client-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign(_reply_positions(consumer, topic))
        except Exception as exc:  # reported to the caller by _ensure_started
            self._start_error = exc
            self._started.set()
            consumer.close()
            return
        self._started.set()
        try:
            while not self._stopping.is_set():
                self._producer.poll(0)
                # poll() returns at the first reply; consume(n, 0) then drains what else
                # is there without waiting (consume(n, t) would wait for n or t).
                first = consumer.poll(0.02)
                if first is None:
                    continue
                for message in (first, *consumer.consume(1000, 0)):
                    if message.error() is not None or message.value() is None:
                        continue
                    self._deliver(message.value())
        finally:
            consumer.close()

    def _deliver(self, value: bytes) -> None:
        try:
            reply = avro.decode_as(value, ReplyEnvelope)
        except Exception:
            return  # not a reply tidings wrote; nobody waits for it
        with self._lock:
            waiting = self._pending.get(reply.command_id)
        if waiting is not None:
            loop, future = waiting
            loop.call_soon_threadsafe(_resolve, future, reply)


def _reply_positions(consumer: Consumer, topic: str, wait: float = 30.0) -> list[TopicPartition]:
    """Return every partition of ``topic`` at its current end offset.

    Replies to commands sent from now on land after these offsets.
    """
    described = consumer.list_topics(topic, timeout=wait).topics[topic]
    if described.error is not None:
        raise BrokerError(
            f"topic {topic} is not there ({described.error}); run `tidings topics apply "
            "MODULE:APP` or start a worker, which applies the topics"
        )
    return [
        TopicPartition(topic, p, watermarks(consumer, topic, p, wait)[1])
        for p in sorted(described.partitions)
    ]


def _resolve(future: asyncio.Future[ReplyEnvelope], reply: ReplyEnvelope) -> None:
    if not future.done():
        future.set_result(reply)
