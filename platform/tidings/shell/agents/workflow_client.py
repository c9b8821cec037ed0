"""The client side of one workflow: requests to the inbox, answers from the replies topic.

Requests are keyed by instance id and partitioned with ``murmur2_random`` (the Java
client's partitioner), so they land on the partition that owns the instance, after every
earlier request to it: a ``result`` sent right after a ``start`` is answered after the start
was decided. Answers come back on ``{app}.workflow.{name}.replies`` keyed by request id; a
thread reads every partition of it from where it was when the client started.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from confluent_kafka import KafkaException, Producer

from ...codec import avro
from ...core.workflow_records import WorkflowInbox, WorkflowReply
from ...errors import BrokerError
from ..replies import ReplyReader


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
        # Its thread also serves the producer's delivery callbacks (``send`` waits on them).
        self._reader: ReplyReader[WorkflowReply] = ReplyReader(
            bootstrap, replies, decode=_decode_reply, on_poll=lambda: self._producer.poll(0)
        )

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
        await self._reader.start()
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
        await self._reader.start()
        future = self._reader.expect(request.request_id)
        try:
            self._produce(request, None)
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        finally:
            self._reader.forget(request.request_id)

    def close(self) -> None:
        """Flush what was produced and stop reading answers."""
        self._producer.flush(10)
        self._reader.close()

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


def _decode_reply(value: bytes) -> tuple[str, WorkflowReply] | None:
    reply = avro.decode(value)
    return (reply.request_id, reply) if isinstance(reply, WorkflowReply) else None


def _settle(future: asyncio.Future[Any], error: BaseException | None, value: Any = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
