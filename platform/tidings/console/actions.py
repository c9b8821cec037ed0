"""What the console changes, through one Client on an event loop of its own.

Request threads of the HTTP server hand each action to this loop and wait for its answer:
the Client (one producer, one reply reader) is made on first use and lives until the
console stops. Every action is one the CLI offers too (``tidings signal``, ``cancel``,
``schedule pause|resume``), through the same client calls, so the worker answers it as
it answers them; sending a dead letter back is one produce to the partition its checked
origin names (``replay.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from ..errors import BrokerError
from ..inspection.schedules import schedule_handle
from ..shell.client.client import Client
from ..shell.runtime.connection import KafkaConnection
from .replay import Replay

T = TypeVar("T")


class Actions:
    """The console's one Client and the loop it runs on.

    Args:
        app: The App.
        kafka: The cluster.
        timeout: Seconds to wait for a worker's answer to one action.
    """

    def __init__(self, app: Any, kafka: KafkaConnection, timeout: float) -> None:
        self.app = app
        self.kafka = kafka
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tidings-console-actions", daemon=True)
        self._thread.start()
        self._client: Client | None = None

    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await make()

        future: Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return future.result(self.timeout + 15)

    def _client_now(self) -> Client:
        # Made and used on the loop's thread only.
        if self._client is None:
            self._client = Client(self.kafka, app=self.app)
        return self._client

    def signal(self, workflow: str, instance_id: str, name: str, payload: Any) -> None:
        self._run(lambda: self._client_now().signal(workflow, instance_id, name, payload, timeout=self.timeout))

    def cancel(self, workflow: str, instance_id: str) -> None:
        self._run(lambda: self._client_now().cancel(workflow, instance_id, timeout=self.timeout))

    def schedule(self, action: str, schedule_id: str) -> tuple[bool, str]:
        """Pause or resume; (whether it did, the schedule's status after)."""

        async def act() -> tuple[bool, str]:
            handle = schedule_handle(self.app, self._client_now(), self.timeout)
            done = await (handle.pause if action == "pause" else handle.resume)(schedule_id)
            return done, (await handle.state(schedule_id)).status

        return self._run(act)

    def replay(self, replay: Replay) -> int:
        """Produce ``replay``; return the offset it got.

        Raises:
            BrokerError: Kafka did not take it within the timeout.
        """
        producer = replay_producer(self.kafka)
        delivered: dict[str, Any] = {}

        def report(error: Any, message: Any) -> None:
            delivered["error"], delivered["offset"] = error, None if message is None else message.offset()

        headers: list[tuple[str, str | bytes | None]] = list(replay.headers)
        producer.produce(replay.topic, replay.value, replay.key, partition=replay.partition,
                         headers=headers, on_delivery=report)
        left = producer.flush(self.timeout)
        if left or delivered.get("error") is not None or "offset" not in delivered:
            raise BrokerError(f"{replay.topic} did not take the record within {self.timeout:g} s: "
                              f"{delivered.get('error') or 'no delivery report'}")
        return int(delivered["offset"])

    def close(self) -> None:
        client = self._client
        if client is not None:
            self._loop.call_soon_threadsafe(client.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def replay_producer(kafka: KafkaConnection) -> Any:
    """The producer a dead letter goes back with: idempotent with ``acks=all`` whatever the
    connection says (as every producer of tidings: a replay must not be lost on a leader
    failover, nor doubled by a retry)."""
    return kafka.producer(**{"enable.idempotence": True, "acks": "all"})
