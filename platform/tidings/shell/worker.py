"""The worker: one Faust app that runs every definition of a tidings App as agents.

Starting the worker is where all I/O happens: topics are applied, RocksDB stores opened,
the Faust consumer joins the app's group. Each aggregate is one Faust agent that takes the
commands topic in pipelined batches (``tidings.shell.pipeline``) and hands each batch to
``AggregateAgent``; a batch's offsets are acked only after its events were acknowledged by
the broker and its RocksDB batch was written.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faust

from ..codec.content import decode_record
from ..core.records import CommandEnvelope
from .agents.aggregate import AggregateAgent
from .agents.projection import ProjectionAgent
from .io import Incoming
from .kafka import ConfluentPublisher, KafkaPartitionReader
from .pipeline import BATCH_SIZE, Finish, Start, agent_body, raw_topic
from .state import AggregateStore
from .topics import apply_topics, deadletter_topic
from .views import ViewStore

if TYPE_CHECKING:
    from .app import App, ProjectionHandle

log = logging.getLogger(__name__)


class Worker:
    """Runs an App's agents in one process. Build it with ``app.worker()``."""

    def __init__(
        self,
        app: App,
        *,
        bootstrap: str,
        data_dir: Path | None = None,
        instance_id: str | None = None,
    ) -> None:
        self.app = app
        self.bootstrap = bootstrap
        self.data_dir = data_dir or app.data_dir()
        # Static group membership (KIP-345): a worker restarted with the same id gets its
        # partitions back at once instead of waiting for the session timeout.
        self.instance_id = instance_id
        self.agents: list[AggregateAgent] = []
        self._readers: list[KafkaPartitionReader] = []
        # Called in order when the worker stops: stores, readers, publishers of every agent.
        self._closers: list[Callable[[], None]] = []
        self.projections: list[ProjectionAgent] = []
        self.faust = self._faust_app()

    def run(self, *, apply: bool = True, loglevel: str = "INFO") -> None:
        """Apply the topics, then run until stopped (SIGTERM/SIGINT stop it cleanly)."""
        if apply:
            apply_topics(self.bootstrap, self.app.topic_specs(), out=log.info)
        worker = faust.Worker(self.faust, loglevel=loglevel, quiet=True, redirect_stdouts=False)
        try:
            worker.execute_from_commandline()
        finally:
            self.close()

    def on_close(self, close: Callable[[], None]) -> None:
        """Call ``close`` when the worker stops (hosted definitions register their stores)."""
        self._closers.append(close)

    def close(self) -> None:
        """Close readers and RocksDB stores."""
        for reader in self._readers:
            reader.close()
        for close in self._closers:
            close()
        self._readers.clear()
        self._closers.clear()

    def _faust_app(self) -> faust.App:
        fapp = faust.App(
            self.app.name,
            # tidings:// is Faust's aiokafka transport with a short fetch wait (transport.py).
            broker=[f"tidings://{server}" for server in self.bootstrap.split(",")],
            store="memory://",
            web_enabled=False,
            consumer_group_instance_id=self.instance_id,
            topic_partitions=self.app.partitions,
            topic_replication_factor=1,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=6.0,  # the broker's minimum: a dead worker's partitions move fast
            broker_heartbeat_interval=1.0,
            broker_commit_interval=0.5,
            broker_max_poll_records=BATCH_SIZE,
            stream_buffer_maxsize=4 * BATCH_SIZE,
            producer_linger_ms=1,
            producer_acks=-1,
            datadir=str(self.data_dir / "faust"),
            TableManager="tidings.shell.transport:TableManager",  # no 1 s pause at start
        )
        publisher = ConfluentPublisher(self.bootstrap)
        self._closers.append(publisher.close)
        for handle in self.app.aggregates:
            reader = KafkaPartitionReader(self.bootstrap)
            store = AggregateStore(
                self.data_dir / "aggregates" / handle.name,
                type(handle.definition.initial),
                definition_name=handle.name,
            )
            agent = AggregateAgent(
                handle.definition,
                topics=handle.topics,
                partitions=self.app.partitions,
                store=store,
                publisher=publisher,
                reader=reader,
                decode_command=decode_command,
            )
            self._readers.append(reader)
            self._closers.append(store.close)
            self.agents.append(agent)
            topic = raw_topic(fapp, handle.topics.commands, partitions=self.app.partitions)
            fapp.agent(topic, name=f"aggregate-{handle.name}")(agent_body(agent.start, f"aggregate {handle.name}"))

        for projection in self.app.projections:
            self._add_projection(fapp, projection, publisher)
        for hosted in self.app.hosted:
            hosted.attach(self, fapp, publisher)

        agents = self.agents
        projections = self.projections

        @fapp.on_partitions_revoked.connect  # type: ignore[arg-type]  # called with revoked=, signal= keywords
        async def on_revoked(sender: Any, revoked: Iterable[Any], **_: Any) -> None:
            revoked = list(revoked)
            for agent in agents:
                agent.revoke(tp.partition for tp in revoked if tp.topic == agent.topics.commands)
            for projection in projections:
                projection.revoke((tp.topic, tp.partition) for tp in revoked)

        return fapp

    def _add_projection(
        self, fapp: faust.App, handle: ProjectionHandle, publisher: ConfluentPublisher
    ) -> None:
        reader = KafkaPartitionReader(self.bootstrap)
        store = ViewStore(handle.view_path(self.data_dir))
        agent = ProjectionAgent(
            handle.name,
            handle.handler,
            sources=handle.sources,
            store=store,
            reader=reader,
            publisher=publisher,
            deadletter_topic=deadletter_topic(self.app.name),
        )
        self._readers.append(reader)
        self._closers.append(store.close)
        self.projections.append(agent)
        topic = raw_topic(fapp, *agent.topics)
        fapp.agent(topic, name=f"projection-{handle.name}")(
            agent_body(_started(agent.process), f"projection {handle.name}")
        )


def decode_command(record: Incoming) -> CommandEnvelope:
    """Decode a command record: Avro, or JSON when the header says so."""
    return decode_record(
        record.value, CommandEnvelope, headers=record.headers, timestamp_ms=record.timestamp_ms
    )


def _started(process: Callable[[list[Incoming]], Awaitable[None]]) -> Start:
    """Adapt a ``process(batch)`` that completes a batch by itself to the pipeline."""

    async def start(batch: list[Incoming]) -> Finish:
        await process(batch)
        return _nothing

    return start


async def _nothing() -> None:
    return None
