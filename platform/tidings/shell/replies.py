"""Answers on a replies topic, matched to the callers waiting for them.

A client's requester (``requester.py``: aggregate commands, workflow requests) produces
a request naming the app's replies topic and waits for the answer keyed by its request id.
``ReplyReader`` reads every partition of that topic, from the end offsets it found when it
started (answers to requests sent from then on land after them), in a thread, and wakes
the asyncio future of the caller waiting for each key.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Generic, TypeVar

from confluent_kafka import Consumer, TopicPartition

from ..errors import BrokerError
from .kafka import topic_partitions, watermarks

R = TypeVar("R")

#: Seconds to wait for Kafka when the reader starts.
START_TIMEOUT = 30.0


class ReplyReader(Generic[R]):
    """Reads ``topic`` in a thread and resolves the futures of ``expect``.

    Args:
        bootstrap: Kafka bootstrap servers.
        topic: The replies topic.
        decode: Bytes -> ``(key, answer)``, or None for a record nobody waits for.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        decode: Callable[[bytes], tuple[str, R] | None],
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._decode = decode
        self._pending: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[R]]] = {}
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_error: BaseException | None = None

    async def start(self) -> None:
        """Start reading (once); return when the reader is positioned at the topic's end.

        Raises:
            BrokerError: the topic does not exist or Kafka did not answer.
        """
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tidings-replies", daemon=True)
            self._thread.start()
        if not self._started.is_set():
            await asyncio.to_thread(self._started.wait, START_TIMEOUT)
            if self._start_error is not None:
                raise BrokerError(f"reading {self.topic} failed: {self._start_error}") from (
                    self._start_error
                )
            if not self._started.is_set():
                raise BrokerError(f"no answer from Kafka at {self.bootstrap} within 30 s")

    def expect(self, key: str) -> asyncio.Future[R]:
        """Return the future the answer keyed ``key`` will resolve (call ``forget`` after)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        with self._lock:
            self._pending[key] = (loop, future)
        return future

    def forget(self, key: str) -> None:
        """Stop waiting for ``key``."""
        with self._lock:
            self._pending.pop(key, None)

    def close(self) -> None:
        """Stop the thread."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tidings-client-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign(self._end_positions(consumer))
        except Exception as exc:  # reported to the caller by start()
            self._start_error = exc
            self._started.set()
            consumer.close()
            return
        self._started.set()
        try:
            while not self._stopping.is_set():
                # poll() returns at the first answer; consume(n, 0) then drains what else
                # is there without waiting (consume(n, t) would wait for n or t).
                first = consumer.poll(0.02)
                if first is None:
                    continue
                for message in (first, *consumer.consume(1000, 0)):
                    value = message.value()
                    if message.error() is None and isinstance(value, bytes):
                        self._deliver(value)
        finally:
            consumer.close()

    def _end_positions(self, consumer: Consumer) -> list[TopicPartition]:
        return [
            TopicPartition(self.topic, p, watermarks(consumer, self.topic, p, START_TIMEOUT)[1])
            for p in topic_partitions(consumer, self.topic, START_TIMEOUT)
        ]

    def _deliver(self, value: bytes) -> None:
        try:
            decoded = self._decode(value)
        except Exception:  # noqa: BLE001 - not an answer tidings wrote; nobody waits for it
            return
        if decoded is None:
            return
        key, answer = decoded
        with self._lock:
            waiting = self._pending.get(key)
        if waiting is not None:
            loop, future = waiting
            try:
                loop.call_soon_threadsafe(_resolve, future, answer)
            except RuntimeError:
                pass  # the caller's loop closed as the answer came: nobody waits, and this thread must go on


def _resolve(future: asyncio.Future[R], answer: R) -> None:
    if not future.done():
        future.set_result(answer)
