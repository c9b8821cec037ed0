"""The client side of one workflow: requests to the inbox, answers from the replies topic.

Requests are keyed by instance id and partitioned with ``murmur2_random`` (the Java
client's partitioner), so they land on the partition that owns the instance, after every
earlier request to it: a ``result`` sent right after a ``start`` is answered after the start
was decided. Answers come back on ``{app}.workflow.{name}.replies`` keyed by request id; a
thread reads every partition of it from where it was when the client started.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ...codec import avro
from ...core.workflow_records import WorkflowInbox, WorkflowReply
from ...errors import BrokerError
from ..kafka import watermarks


class WorkflowClient:
    """Sends requests to one workflow's inbox and waits for their answers.

    Args:
        bootstrap: Kafka bootstrap servers.
        inbox: The workflow's inbox topic.
        replies: The workflow's replies topic.
    """

    def __init__(self, bootstrap: str, *, inbox: str, replies: str) -> None:
        self.bootstrap = bootstrap
        self._inbox = inbox
        self._replies = replies
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 1,
            }
        )
        self._pending: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[WorkflowReply]]] = {}
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_error: BaseException | None = None

    def request(
        self,
        instance_id: str,
        kind: str,
        *,
        payload: bytes | None = None,
        signal: str | None = None,
        wait: bool = False,
        answer: bool = True,
    ) -> WorkflowInbox:
        """Build a request; ``answer`` asks the worker to reply on the replies topic."""
        return WorkflowInbox(
            request_id=uuid.uuid4().hex,
            instance_id=instance_id,
            kind=kind,
            timestamp_ms=int(time.time() * 1000),
            payload=payload,
            signal=signal,
            reply_to=self._replies if answer else None,
            wait=wait,
        )

    async def send(self, request: WorkflowInbox) -> None:
        """Produce ``request`` and wait until the broker has it."""
        await self._ensure_started()
        loop = asyncio.get_running_loop()
        stored: asyncio.Future[None] = loop.create_future()

        def delivered(error: Any, _message: Any) -> None:
            failure = None if error is None else BrokerError(f"producing to {self._inbox} failed: {error}")
            loop.call_soon_threadsafe(_settle, stored, failure)

        self._produce(request, delivered)
        await stored

    async def ask(self, request: WorkflowInbox, timeout: float) -> WorkflowReply:
        """Produce ``request`` and return the worker's answer.

        Raises:
            TimeoutError: No answer within ``timeout`` seconds.
        """
        await self._ensure_started()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[WorkflowReply] = loop.create_future()
        with self._lock:
            self._pending[request.request_id] = (loop, future)
        try:
            self._produce(request, None)
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        finally:
            with self._lock:
                self._pending.pop(request.request_id, None)

    def close(self) -> None:
        """Flush what was produced and stop reading answers."""
        self._producer.flush(10)
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    # -- internals ---------------------------------------------------------------------

    def _produce(self, request: WorkflowInbox, on_delivery: Any) -> None:
        value = avro.encode(request)
        key = request.instance_id.encode()
        kwargs = {} if on_delivery is None else {"on_delivery": on_delivery}
        try:
            try:
                self._producer.produce(self._inbox, value, key, **kwargs)
            except BufferError:
                self._producer.poll(0.1)
                self._producer.produce(self._inbox, value, key, **kwargs)
        except KafkaException as exc:
            raise BrokerError(f"producing to {self._inbox} failed: {exc}") from exc

    async def _ensure_started(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tidings-workflow-replies", daemon=True)
            self._thread.start()
        if not self._started.is_set():
            await asyncio.to_thread(self._started.wait, 30)
            if self._start_error is not None:
                raise BrokerError(f"reading replies failed: {self._start_error}") from self._start_error
            if not self._started.is_set():
                raise BrokerError(f"no answer from Kafka at {self.bootstrap} within 30 s")

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tidings-workflow-client-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        try:
            described = consumer.list_topics(self._replies, timeout=30).topics[self._replies]
            if described.error is not None:
                raise BrokerError(
                    f"topic {self._replies} is not there ({described.error}); run `tidings topics "
                    "apply MODULE:APP` or start a worker, which applies the topics"
                )
            consumer.assign([
                TopicPartition(self._replies, p, watermarks(consumer, self._replies, p)[1])
                for p in sorted(described.partitions)
            ])
        except Exception as exc:  # reported to the caller by _ensure_started
            self._start_error = exc
            self._started.set()
            consumer.close()
            return
        self._started.set()
        try:
            while not self._stopping.is_set():
                self._producer.poll(0)
                first = consumer.poll(0.02)
                if first is None:
                    continue
                for message in (first, *consumer.consume(1000, 0)):
                    if message.error() is None and message.value() is not None:
                        self._deliver(message.value())
        finally:
            consumer.close()

    def _deliver(self, value: bytes) -> None:
        try:
            reply = avro.decode(value)
        except Exception:  # noqa: BLE001 - not an answer tidings wrote; nobody waits for it
            return
        if not isinstance(reply, WorkflowReply):
            return
        with self._lock:
            waiting = self._pending.get(reply.request_id)
        if waiting is not None:
            loop, future = waiting
            loop.call_soon_threadsafe(_settle, future, None, reply)


def _settle(future: asyncio.Future[Any], error: BaseException | None, value: Any = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
