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

from confluent_kafka import KafkaException

from ...codec import avro
from ...core.workflow_records import WorkflowInbox, WorkflowReply
from ...errors import BrokerError
from ..io import Outgoing
from ..kafka import ConfluentPublisher
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
        # The publisher serves its delivery callbacks in its own thread: ``send`` waits on
        # them, and the reply reader's thread polls too slowly for that (one turn per 20 ms).
        self._publisher = ConfluentPublisher(bootstrap)
        self._reader: ReplyReader[WorkflowReply] = ReplyReader(bootstrap, replies, decode=_decode_reply)

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
        await self._produce(request, wait=True)

    async def ask(self, request: WorkflowInbox, timeout: float) -> WorkflowReply:
        """Produce ``request`` and return the worker's answer.

        Raises:
            TimeoutError: No answer within ``timeout`` seconds.
        """
        await self._reader.start()
        future = self._reader.expect(request.request_id)
        try:
            await self._produce(request, wait=False)
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        finally:
            self._reader.forget(request.request_id)

    def close(self) -> None:
        """Flush what was produced and stop reading answers."""
        self._publisher.close()
        self._reader.close()

    # -- internals ---------------------------------------------------------------------

    async def _produce(self, request: WorkflowInbox, *, wait: bool) -> None:
        # Keyed by instance id, no partition: the publisher's murmur2 picks the owner's.
        record = Outgoing(self._inbox, request.instance_id.encode(), avro.encode(request))
        try:
            if wait:
                await self._publisher.send([record])
            else:
                self._publisher.publish_later([record])
        except KafkaException as exc:
            raise BrokerError(f"producing to {self._inbox} failed: {exc}") from exc


def _decode_reply(value: bytes) -> tuple[str, WorkflowReply] | None:
    reply = avro.decode(value)
    return (reply.request_id, reply) if isinstance(reply, WorkflowReply) else None
