"""The worker: one Faust app that runs every definition of a tidings App.

The worker knows the app only as a ``HostedApp`` (below): a name, a partition count, the
``Hosted`` definitions and their topics, where stores go and the limits the runtime
applies. ``App`` (``shell/app.py``) is one; nothing here imports it or any kind.

This is the only module that speaks Faust. Faust is the runtime: the ``faust.App``, the
``faust.Worker`` lifecycle (signals, logging, ordered start and stop of services), its
sensors. Records do not come through Faust's consumer, which delivers them one at a time;
the worker's ``Intake`` (``intake.py``, one confluent-kafka consumer) runs as a Faust
service and feeds each ``Input`` of each agent its records in lists, through a
``pipeline.Feed`` per input. Starting the worker is where all I/O happens: topics are
applied, every hosted definition is opened with the worker's ``Runtime`` (``hosting.py``),
partition assignments and revocations go to every agent (each keeps what concerns its
topics). A batch's offsets are committed only after the agent completed it (its writes
acknowledged by the broker). A stop (SIGTERM) lets running activity attempts end within
its grace, abandons the rest, then stops the intake (``stopping.py``). See
docs/architecture.md and docs/operations.md, "Stopping".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import faust
import mode
from confluent_kafka import KafkaError, KafkaException
from faust.app.base import BootStrategy

from ...errors import BrokerError, KafkaUnreachable
from .connection import KafkaConnection
from .hosting import Agent, Hosted, Runtime, TopicPartition, Winding
from .intake import Intake, describe
from .kafka import ConfluentPublisher, is_transient
from .health import HealthServer
from .liveness import STALL_TIMEOUT_S, Liveness, LivenessWatch
from .metrics import Metrics
from .pipeline import stop_worker, stop_worker_on_failure
from .reachability import probe_kafka, wait_for_kafka
from .readiness import Readiness
from .stopping import DEFAULT_STOP_GRACE_S, STOP_GRACE_ENV, Grace, HardStop, check_stop_grace
from .topics import TopicSpec, apply_topics, deadletter_topic
from . import collector, tracing
from .transactions import TransactionalPublisher
from .worker_dir import WorkerDir

log = logging.getLogger(__name__)

#: How long applying the topics is retried while Kafka fails it with passing errors (a
#: broker of the cluster restarting: its partitions' leaders move within seconds).
APPLY_RETRY_S = 120.0
#: The pause between two tries.
APPLY_PAUSE_S = 2.0


class HostedApp(Protocol):
    """What a worker runs: an app's definitions, its topics and the limits it applies."""

    @property
    def name(self) -> str:
        """The consumer group, the prefix of every topic and of transactional ids."""
        ...

    @property
    def partitions(self) -> int: ...

    @property
    def hosted(self) -> Sequence[Hosted]:
        """Every definition to open, in declaration order."""
        ...

    @property
    def deadletter_value_limit(self) -> int: ...

    @property
    def json_outcomes(self) -> bool: ...

    def topic_specs(self) -> list[TopicSpec]:
        """Every topic the app needs, applied before the worker starts."""
        ...

    def own_topics(self) -> frozenset[str]: ...

    def data_dir(self) -> Path:
        """Where the worker keeps its stores unless told otherwise."""
        ...


class _Boot(BootStrategy):
    """Faust's services without its Kafka consumer and producer: the intake and the
    publisher are the worker's own (confluent-kafka), so Faust joins no group.

    Faust then builds no Kafka client at all (no aiokafka producer, consumer or admin: the
    app has no tables, no Faust agents and no web server), so it needs none of the
    connection's security settings: ``tests/integration/test_kafka_connection_everywhere.py``
    records every aiokafka client a worker builds, and finds none."""

    enable_kafka_consumer = False
    enable_kafka_producer = False


class _FaustApp(faust.App):
    BootStrategy = _Boot


class Worker:
    """Runs an App's agents in one process. Build it with ``app.worker()``."""

    def __init__(
        self,
        app: HostedApp,
        *,
        connection: KafkaConnection,
        data_dir: Path | None = None,
        instance_id: str | None = None,
        metrics_port: int | None = None,
        exactly_once: bool = False,
        stall_timeout_s: float | None = None,
        stop_grace_s: float | None = None,
    ) -> None:
        self.app = app
        self.exactly_once = exactly_once
        self._clean = False  # exactly once: every write committed at stop
        # Every Kafka client of the worker is built from it (connection.py).
        self.connection = connection
        self.bootstrap = connection.bootstrap
        self.data_dir = data_dir or app.data_dir()
        # Static group membership (KIP-345): a worker restarted with the same id gets its
        # partitions back at once instead of waiting for the session timeout.
        self.instance_id = instance_id
        # /metrics, /livez and /readyz on this port while running (None: not served).
        self.metrics_port = metrics_port
        self.metrics = Metrics()
        # Member of the group, assigned partitions recovered (readiness.py): /readyz.
        self.readiness = Readiness(app.name)
        # Deafness (liveness.py): work waiting, no progress, brokers answering; exit 70 past
        # this many seconds (0: never).
        self.stall_timeout_s = STALL_TIMEOUT_S if stall_timeout_s is None else stall_timeout_s
        self.liveness = Liveness()
        # Seconds from SIGTERM to exit (stopping.py); checked here, before any I/O.
        self.stop_grace_s = check_stop_grace(DEFAULT_STOP_GRACE_S if stop_grace_s is None else stop_grace_s)
        self._hard_stop: HardStop | None = None
        self._watch: LivenessWatch | None = None
        self._http: HealthServer | None = None
        self.agents: list[Agent] = []
        self._beating: asyncio.Future[None] | None = None  # the event loop's beat (liveness.py)
        self._runtime: Runtime | None = None
        # Built by run() once Kafka answers: its publisher connects as it is made.
        self.faust: faust.App | None = None

    def run(self, *, apply: bool = True, loglevel: str = "INFO") -> None:
        """Wait for Kafka, apply the topics, then run until stopped (SIGTERM/SIGINT stop it
        cleanly)."""
        if self.metrics_port is not None:
            # First: the probes answer while the worker waits for Kafka (alive, not ready).
            self._http = HealthServer(self.metrics.registry, live=self.liveness.verdict,
                                      ready=self.readiness.verdict, port=self.metrics_port)
        try:
            with _startup_logging(loglevel):
                self._apply_when_kafka_answers(apply)
            self.faust = self._faust_app()
            collector.settle()  # the app is loaded: freeze it, full collections rarely
        except BaseException:
            self.close()
            raise
        worker = faust.Worker(self.faust, loglevel=loglevel, quiet=True, redirect_stdouts=False)
        try:
            worker.execute_from_commandline()
        finally:
            self.close()
            if self._hard_stop is not None:  # stopped in time: the process exits on its own
                self._hard_stop.disarm()

    async def _wind_down(self, grace: Grace) -> None:
        """Let the agents' running work end within the grace's working part, then abandon
        the rest, logging it in one line. The intake still runs meanwhile: the partitions
        stay this worker's, so no other worker runs the same attempts yet."""
        winding = [agent for agent in self.agents if isinstance(agent, Winding)]
        for agent in winding:
            agent.wind_down()
        try:
            await asyncio.wait_for(asyncio.gather(*(agent.wound_down() for agent in winding)),
                                   grace.work_left())
        except asyncio.TimeoutError:
            pass
        except Exception:  # noqa: BLE001 - a bug here must not keep the intake from stopping
            log.exception("waiting for the running activity attempts failed; abandoning them")
        abandoned = [what for agent in winding for what in agent.abandon()]
        if abandoned:
            shown = ", ".join(abandoned[:20]) + (f" and {len(abandoned) - 20} more" if len(abandoned) > 20 else "")
            log.warning("stopping within the %g s grace (%s): abandoned %d unfinished: %s; each runs "
                        "again after the restart (its journal shows its step started, not ended)",
                        grace.seconds, STOP_GRACE_ENV, len(abandoned), shown)

    def _apply_when_kafka_answers(self, apply: bool) -> None:
        """A worker is a server: with Kafka away it waits (one line, then a reminder every
        30 s) instead of exiting, and applies the topics once a broker answers.

        A broker of a cluster that dies while it answers the admin requests fails them with
        a passing error (its handle destroyed, a request timed out, no controller yet) while
        the others still answer: that is retried for ``APPLY_RETRY_S``. What Kafka keeps
        refusing (an ACL, a policy) or keeps failing ends the worker with status 70.
        """
        transient_since: float | None = None
        while True:
            self.readiness.phase(f"waiting for Kafka at {self.bootstrap}")
            wait_for_kafka(self.connection)
            if not apply:
                return
            self.readiness.phase("applying the App's topics")
            try:
                apply_topics(self.connection, self.app.topic_specs(), out=log.info)
                return
            except BrokerError as exc:
                try:  # the broker went away meanwhile: wait again; else the error is real
                    probe_kafka(self.connection, 5.0)
                except KafkaUnreachable:
                    continue
                now = time.monotonic()
                transient_since = now if transient_since is None else transient_since
                if not _passing(exc) or now - transient_since > APPLY_RETRY_S:
                    stop_worker("applying the App's topics", exc)
                log.warning("%s; a broker of the cluster is changing, asking again in %g s", exc,
                            APPLY_PAUSE_S)
                time.sleep(APPLY_PAUSE_S)

    def close(self) -> None:
        """Close every agent, then readers, stores and the publisher."""
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        for agent in self.agents:
            agent.close()
        self.agents.clear()
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
        if self._clean:
            WorkerDir(self.data_dir).mark_clean()

    def _faust_app(self) -> faust.App:
        # Faust creates its directory without parents, and a kind may keep nothing on disk.
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fapp = _FaustApp(
            self.app.name,
            # Only names the cluster: Faust connects to nothing (``_Boot``).
            broker=[f"kafka://{server}" for server in self.bootstrap.split(",")],
            store="memory://",
            web_enabled=False,
            datadir=str(self.data_dir / "faust"),
        )
        publisher: ConfluentPublisher | TransactionalPublisher
        intake: Intake  # made below; the transaction asks it for the group's metadata
        if self.exactly_once:
            home = WorkerDir(self.data_dir)
            home.drop_stores_unless_clean()
            publisher = TransactionalPublisher(
                self.connection,
                transactional_id=home.transactional_id(self.app.name, self.instance_id),
                group_metadata=lambda: intake.group_metadata(),
                fence_offsets=lambda metadata: intake.fence_offsets(metadata),
                on_fenced=_fenced,
                on_outcome=self.metrics.transaction,
            )
        else:
            publisher = ConfluentPublisher(self.connection, on_fatal=_producer_failed)
        runtime = Runtime(
            connection=self.connection,
            data_dir=self.data_dir,
            partitions=self.app.partitions,
            publisher=self.metrics.counting(publisher),
            metrics=self.metrics,
            deadletter_topic=deadletter_topic(self.app.name),
            own_topics=self.app.own_topics(),
            deadletter_value_limit=self.app.deadletter_value_limit,
            json_outcomes=self.app.json_outcomes,
            exactly_once=self.exactly_once,
            committed=publisher.committed if isinstance(publisher, TransactionalPublisher) else None,
            progress=self.liveness.progressed,
            group_prefix=f"{self.app.name}.",  # its readers' groups: under the worker's Group ACL
            # After the App's module is imported: a provider it set up is the one used.
            tracing=tracing.from_environment(),
        )
        if runtime.tracing is not None:
            runtime.on_close(tracing.shutdown)  # closed after the publisher: the last spans are flushed
            log.info("traces are on (OpenTelemetry; docs/tracing.md)")
        runtime.on_close(publisher.close)  # closed last: the agents' last writes go out
        self._runtime = runtime
        agents = self.agents
        labels: list[str] = []  # each agent's definition, as /readyz names it
        worker = self
        readiness = self.readiness
        joined: list[bool] = []
        readiness.phase(f"joining group {self.app.name}")

        def assigned(partitions: list[TopicPartition]) -> None:
            log.info("partitions assigned: %s", describe(partitions))
            if not joined:  # tests and operators wait for this line
                joined.append(True)
                log.info("Worker ready: joined group %s", self.app.name)
            readiness.assigned(partitions)
            for agent, label in zip(agents, labels):
                # Not awaited: an agent's recovery reads its journal; the agents make
                # records of partitions they are recovering wait (PartitionOwner.ensure_ready).
                # /readyz waits for every one of them (readiness.py).
                done = readiness.recovering(label)
                future = asyncio.ensure_future(agent.assign(partitions))
                future.add_done_callback(_call(done))
                future.add_done_callback(stop_worker_on_failure("recovering assigned partitions"))

        def revoked(partitions: list[TopicPartition]) -> None:
            log.info("partitions revoked: %s", describe(partitions))
            readiness.revoked(partitions)
            for agent in agents:
                agent.revoke(partitions)

        intake = Intake(self.connection, self.app.name, instance_id=self.instance_id,
                        on_assigned=assigned, on_revoked=revoked, on_lag=self.metrics.set_lag,
                        liveness=self.liveness, on_lost=readiness.lost,
                        on_commit=publisher.commit_offsets
                        if isinstance(publisher, TransactionalPublisher) else None)
        for hosted in self.app.hosted:
            agent = hosted.open(runtime.scoped(hosted.kind, hosted.name))
            agents.append(agent)
            labels.append(f"{hosted.kind} {hosted.name}")
            for source in agent.inputs:
                start = self.metrics.instrument(hosted.kind, hosted.name, source.name, source.start)
                intake.add(source.topics, start, source.name.replace("-", " "),
                           max_in_flight=source.max_in_flight)

        @fapp.service
        class Consuming(mode.Service):
            """Runs the intake inside Faust's service lifecycle."""

            async def on_start(self) -> None:
                # Every property every client of this worker uses; secrets as [redacted].
                shown = " ".join(f"{key}={value}" for key, value in worker.connection.redacted().items())
                log.info("Kafka connection: %s", shown)
                if isinstance(publisher, TransactionalPublisher):
                    # Aborts what a killed run left open before any journal is read.
                    await publisher.start()
                await intake.start()
                worker._watch = LivenessWatch(worker.liveness, held=intake.held,
                                              report=worker.metrics.set_stalled,
                                              timeout_s=worker.stall_timeout_s)
                worker._watch.start()
                worker._beating = asyncio.ensure_future(_beat(worker.liveness))

            async def on_stop(self) -> None:
                grace = Grace(worker.stop_grace_s, time.monotonic())
                worker._hard_stop = hard = HardStop(grace)
                readiness.stopping()
                if worker._beating is not None:
                    worker._beating.cancel()
                if worker._watch is not None:  # a stopping worker takes nothing more
                    worker._watch.close()
                hard.doing = "waiting for activity attempts"
                await worker._wind_down(grace)
                hard.doing = "completing the batches in flight and leaving the group"
                await intake.stop(timeout=grace.left())
                if isinstance(publisher, TransactionalPublisher):
                    # Clean only when every write of this run is committed: the next run
                    # keeps its stores (worker_dir.py).
                    hard.doing = "committing the last transaction"
                    await publisher.committed()
                    worker._clean = True
                    await publisher.aclose()
                hard.doing = "closing stores and clients"

        return fapp



def _call(done: Callable[[], None]) -> Callable[[asyncio.Future[None]], None]:
    """A done-callback that calls ``done`` however the future ended."""
    return lambda future: done()


async def _beat(liveness: Liveness) -> None:
    """Tell ``liveness`` every second that the event loop runs (``/livez`` fails when it
    stops hearing this)."""
    while True:
        liveness.beat()
        await asyncio.sleep(1.0)


@contextmanager
def _startup_logging(loglevel: str) -> Iterator[None]:
    """Log on stderr as Faust will (it sets logging up once it starts) while the worker
    waits for Kafka, unless the process has set up logging itself."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] [%(process)s] [%(levelname)s]: %(message)s"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(loglevel.upper())
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _producer_failed(error: BaseException) -> None:
    """The worker's producer failed fatally: every later write would fail; restart now."""
    stop_worker("producing", error)


def _fenced(error: BaseException) -> None:
    """The broker refused this worker's transaction: another worker owns its partitions."""
    log.critical("this worker was fenced: its group generation is stale, another worker owns "
                 "its partitions now; nothing it wrote since its last commit becomes visible")
    stop_worker("writing as the partitions' owner", error)


def _passing(error: BrokerError) -> bool:
    """Whether the Kafka error under ``error`` is a broker's passing state (see ``is_transient``)."""
    cause = error.__cause__
    return (isinstance(cause, KafkaException) and bool(cause.args)
            and isinstance(cause.args[0], KafkaError) and is_transient(cause.args[0]))
