"""Faust's aiokafka transport with a short fetch wait (``tidings://``), and a table manager
that starts without Faust's one-second pause.

Faust creates its aiokafka consumer with ``fetch_max_wait_ms=1500`` and no setting to
change it. aiokafka keeps one fetch request in flight per broker, leaving out partitions
whose fetched records the app has not taken yet; when the app takes them, those
partitions wait for the in-flight long poll to return, up to 1.5 s. Under a steady trickle
of commands that put ~0.3–1.7 s of queueing in front of every batch. A short wait bounds
that delay; the cost is an empty fetch every few milliseconds on an idle worker.

Registered through the ``faust.transports`` entry point (pyproject.toml), the extension
point Faust offers for transports; the worker's broker URLs use the ``tidings://`` scheme.
"""

from __future__ import annotations

from typing import Any

from faust.tables import TableManager as FaustTableManager
from faust.transport.drivers import aiokafka as faust_aiokafka

#: How long the broker may hold a fetch that has no records yet (milliseconds).
FETCH_MAX_WAIT_MS = 5


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, with a consumer whose fetches return quickly."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Read by aiokafka when it starts the consumer and creates its fetcher.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


class Consumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, running ``ConsumerThread``."""

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with ``Consumer``; scheme ``tidings://``."""

    Consumer = Consumer


class TableManager(FaustTableManager):
    """Faust's table manager without the 1 s sleep it starts with.

    Faust sleeps a second so that tables declared late can still register before it
    subscribes. tidings declares no Faust tables (its state is in its own RocksDB stores),
    so the pause only delays every worker start, and with it recovery after a crash.
    Passed to ``faust.App`` as its ``TableManager`` setting.
    """

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()
