"""The worker: one Faust app that runs every definition of a tidings App.

This is the only module that speaks Faust (with ``transport.py``). Starting the worker is
where all I/O happens: topics are applied, every hosted definition is opened with the
worker's ``Runtime`` (``hosting.py``), and each ``Input`` of each agent becomes one Faust
agent over raw-bytes topics that feeds ``pipeline.run_batches``. Partition assignments and
revocations go to every agent (each keeps what concerns its topics). A batch's offsets are
acked only after the agent completed it (its writes acknowledged by the broker).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faust

from .hosting import Agent, Runtime, TopicPartition
from .kafka import ConfluentPublisher
from .metrics import Metrics, MetricsServer
from .pipeline import BATCH_SIZE, agent_body, stop_worker_on_failure
from .topics import apply_topics, deadletter_topic

if TYPE_CHECKING:
    from .app import App

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
        metrics_port: int | None = None,
    ) -> None:
        self.app = app
        self.bootstrap = bootstrap
        self.data_dir = data_dir or app.data_dir()
        # Static group membership (KIP-345): a worker restarted with the same id gets its
        # partitions back at once instead of waiting for the session timeout.
        self.instance_id = instance_id
        # Prometheus /metrics on this port while running (None: not served).
        self.metrics_port = metrics_port
        self.metrics = Metrics()
        self._metrics_server: MetricsServer | None = None
        self.agents: list[Agent] = []
        self._runtime: Runtime | None = None
        self.faust = self._faust_app()

    def run(self, *, apply: bool = True, loglevel: str = "INFO") -> None:
        """Apply the topics, then run until stopped (SIGTERM/SIGINT stop it cleanly)."""
        if apply:
            apply_topics(self.bootstrap, self.app.topic_specs(), out=log.info)
        worker = faust.Worker(self.faust, loglevel=loglevel, quiet=True, redirect_stdouts=False)
        if self.metrics_port is not None:
            self._metrics_server = self.metrics.serve(self.metrics_port)
        try:
            worker.execute_from_commandline()
        finally:
            self.close()

    def close(self) -> None:
        """Close every agent, then readers, stores and the publisher."""
        for agent in self.agents:
            agent.close()
        self.agents.clear()
        if self._metrics_server is not None:
            self._metrics_server.close()
            self._metrics_server = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def _faust_app(self) -> faust.App:
        # Faust creates its directory without parents, and a kind may keep nothing on disk.
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
        runtime = Runtime(
            bootstrap=self.bootstrap,
            data_dir=self.data_dir,
            partitions=self.app.partitions,
            publisher=self.metrics.counting(publisher),
            metrics=self.metrics,
            deadletter_topic=deadletter_topic(self.app.name),
            own_topics=self.app.own_topics(),
            deadletter_value_limit=self.app.deadletter_value_limit,
            json_outcomes=self.app.json_outcomes,
        )
        runtime.on_close(publisher.close)  # closed last: the agents' last writes go out
        self._runtime = runtime
        for hosted in self.app.hosted:
            agent = hosted.open(runtime.scoped(hosted.kind, hosted.name))
            self.agents.append(agent)
            for source in agent.inputs:
                topic = fapp.topic(
                    *source.topics,
                    # The agents decode records themselves (Avro or JSON, dead letters for bad
                    # ones), so Faust must hand them over untouched.
                    key_type=bytes,
                    value_type=bytes,
                    key_serializer="raw",
                    value_serializer="raw",
                    partitions=source.partitions,
                )
                start = self.metrics.instrument(hosted.kind, hosted.name, source.name, source.start)
                body = agent_body(start, source.name.replace("-", " "),
                                  max_in_flight=source.max_in_flight)
                fapp.agent(topic, name=source.name)(body)

        agents = self.agents

        @fapp.on_partitions_assigned.connect  # type: ignore[arg-type]  # called with assigned=, signal=
        async def on_assigned(sender: Any, assigned: Iterable[Any], **_: Any) -> None:
            partitions = _pairs(assigned)
            for agent in agents:
                # Not awaited: an agent's recovery reads its journal, and Faust waits for
                # these handlers before it hands out records; the agents make records of
                # partitions they are recovering wait (PartitionOwner.ensure_ready).
                asyncio.ensure_future(agent.assign(partitions)).add_done_callback(
                    stop_worker_on_failure("recovering assigned partitions"))

        @fapp.on_partitions_revoked.connect  # type: ignore[arg-type]  # called with revoked=, signal=
        async def on_revoked(sender: Any, revoked: Iterable[Any], **_: Any) -> None:
            partitions = _pairs(revoked)
            for agent in agents:
                agent.revoke(partitions)

        return fapp


def _pairs(partitions: Iterable[Any]) -> list[TopicPartition]:
    return [(tp.topic, tp.partition) for tp in partitions]
