"""The App: where definitions are declared, and what a worker and a client are built from.

Declaring does no I/O: ``app.aggregate(...)`` validates and freezes a definition and
returns a handle. ``tidings worker MODULE:APP`` (``App.worker``) does all the I/O.

The App is a registry and its configuration, with no kind's logic in it: each public
decorator asks the kind's own module to validate the declaration and build its handle
(``kinds/<kind>/``), then registers it with ``app.host(handle)``, the one way a definition
joins the app (a new kind needs only that: ``tests/counter_kind.py``). Handles and clients
know the App as a ``KindContext`` (``runtime/context.py``), the worker as a ``HostedApp``
(``runtime/worker.py``): the App imports them, nothing below imports the App. The worker
alone is imported when it is built, so that a client process never loads Faust.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.aggregate import DEFAULT_COMMAND_RETENTION, Decision
from ..core.saga_starts import SagaStarter
from ..errors import DefinitionError
from .client.client import Client
from .kinds.aggregate.declare import declare_aggregate
from .kinds.aggregate.handle import AggregateHandle
from .kinds.flow.stage import WorkflowFlowStage, declare_flow
from .kinds.orchestration.handle import OrchestrationDefinition, declare_orchestration
from .kinds.projection.agent import Handler
from .kinds.projection.handle import ProjectionHandle, declare_projection
from .kinds.saga.handle import SagaHandle, declare_saga
from .kinds.schedule.handle import ScheduleHandle, declare_schedules
from .kinds.workflow.handle import WorkflowHandle, workflow_builder, workflow_named
from .runtime.acls import CLIENT_NAME_ENV
from .runtime.connection import KafkaConnection, environment_stamp
from .runtime.deadletters import DEAD_LETTER_VALUE_BYTES, MAX_DEAD_LETTER_VALUE_BYTES
from .runtime.hosting import Hosted
from .runtime.topics import (
    BROKER_DEFAULT,
    ApplyReport,
    Replication,
    TopicSpec,
    apply_topics,
    deadletter_topic,
    replication_reasons,
    spec_for,
)

if TYPE_CHECKING:
    from .runtime.worker import Worker

__all__ = ["AggregateHandle", "App", "ProjectionHandle"]

C = TypeVar("C")
E = TypeVar("E")
S = TypeVar("S")
H = TypeVar("H", bound=Hosted)

DEFAULT_PARTITIONS = 8
AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"
#: The processing guarantees a worker offers (``App(processing_guarantee=...)``).
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)


class App:
    """A tidings application: a name (the prefix of its topics) and its definitions.

    Args:
        name: The app name; topics are ``{name}.{kind}.{definition}.{role}``.
        bootstrap: Kafka bootstrap servers; default ``TIDINGS_BOOTSTRAP``.
        kafka: librdkafka properties every Kafka client of the app uses (security,
            ``client.rack``, ...), e.g. ``{"security.protocol": "SASL_SSL", "sasl.mechanism":
            "PLAIN", "sasl.username": ..., "sasl.password": ...}``; ``consumer.``,
            ``producer.`` and ``admin.`` prefixes give one kind of client only. They win
            over ``TIDINGS_KAFKA_*`` and a ``TIDINGS_KAFKA_CONFIG`` file (docs/kafka.md).
        partitions: Partitions of every topic the app declares.
        data_dir: Where workers keep RocksDB state; default ``TIDINGS_DATA_DIR`` or
            ``./.tidings/data``.
        command_timeout: Seconds a command waits for its reply (``App(command_timeout=30)``).
        deadletter_value_limit: Bytes of a bad record's value its dead letter keeps; the
            rest is cut and the original size recorded (docs/limits.md).
        json_outcomes: Write workflow outcome records as JSON instead of Avro, for
            outcome readers that are not Python (``docs/kafka-clients.md``); Python
            readers take either.
        processing_guarantee: ``"at_least_once"`` (the default: a crash may repeat a
            batch's writes, which every reader de-duplicates) or ``"exactly_once"``: each
            worker writes in Kafka transactions that carry the input offsets (KIP-447), so
            a worker that lost its partitions cannot make anything visible and a crash
            leaves nothing half-written (docs/exactly-once.md). A worker's
            ``--processing-guarantee`` overrides it.
        replication_factor: Replicas of every topic the app declares (Kafka Streams'
            ``replication.factor``); default ``TIDINGS_REPLICATION_FACTOR``, else -1, the
            broker's ``default.replication.factor``. Used when a worker or ``tidings topics
            apply`` creates a topic; an existing topic with fewer is reported (docs/kafka.md).
        min_insync_replicas: The topics' ``min.insync.replicas``: how many replicas must have
            a write before it is acknowledged (producers use ``acks=all``); default
            ``TIDINGS_MIN_INSYNC_REPLICAS``, else the broker's. At most ``replication_factor``.
    """

    def __init__(
        self,
        name: str,
        *,
        bootstrap: str | None = None,
        kafka: Mapping[str, object] | None = None,
        partitions: int = DEFAULT_PARTITIONS,
        data_dir: str | os.PathLike[str] | None = None,
        command_timeout: float = 30.0,
        deadletter_value_limit: int = DEAD_LETTER_VALUE_BYTES,
        json_outcomes: bool = False,
        processing_guarantee: str = AT_LEAST_ONCE,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
    ) -> None:
        reasons = []
        if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
            reasons.append(f"name {name!r} must be letters, digits, '_' or '-'")
        if partitions < 1:
            reasons.append(f"partitions must be at least 1, not {partitions}")
        if command_timeout <= 0:
            reasons.append(f"command_timeout must be positive, not {command_timeout}")
        if not 0 <= deadletter_value_limit <= MAX_DEAD_LETTER_VALUE_BYTES:
            reasons.append(f"deadletter_value_limit must be between 0 and "
                           f"{MAX_DEAD_LETTER_VALUE_BYTES}, not {deadletter_value_limit}")
        if processing_guarantee not in GUARANTEES:
            reasons.append(f"processing_guarantee must be one of {', '.join(map(repr, GUARANTEES))}, "
                           f"not {processing_guarantee!r}")
        if replication_factor is not None or min_insync_replicas is not None:
            reasons.extend(replication_reasons(
                BROKER_DEFAULT if replication_factor is None else replication_factor, min_insync_replicas))
        if kafka is not None:
            try:  # the mapping alone, no environment and no file: declaring reads nothing
                KafkaConnection.resolve(bootstrap="-", kafka=kafka, environ={})
            except DefinitionError as exc:
                reasons.extend(exc.reasons)
        if reasons:
            raise DefinitionError(f"App {name!r}", reasons)
        self.name = name
        self.processing_guarantee = processing_guarantee
        self.deadletter_value_limit = deadletter_value_limit
        self.json_outcomes = json_outcomes
        self.partitions = partitions
        # None: the environment decides when the specs are built (``replication``).
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.command_timeout = command_timeout
        self._bootstrap = bootstrap
        self._kafka = dict(kafka or {})
        self._resolved: dict[tuple[Any, ...], KafkaConnection] = {}
        self._data_dir = data_dir
        # Every definition the worker runs, in declaration order, by (kind, name).
        self._hosted: dict[tuple[str, str], Hosted] = {}
        self._schedules: ScheduleHandle | None = None
        self._clients: dict[tuple[KafkaConnection, str | None], Client] = {}
        # aggregate name -> starters registered beside the declared sagas (``sagas_of``).
        self.saga_starters: dict[str, list[SagaStarter]] = {}

    # -- declaring -------------------------------------------------------------------

    def aggregate(
        self,
        name: str,
        initial: S,
        decide: Callable[[C, S], Decision],
        fold: Callable[[E, S], S],
        *,
        command: Any,
        event: Any,
        cache_size: int = 100_000,
        command_retention: timedelta = DEFAULT_COMMAND_RETENTION,
    ) -> AggregateHandle[C, E, S]:
        """Declare an aggregate; returns its handle.

        Args:
            name: The aggregate's name (a topic segment).
            initial: The state before the first event.
            decide: ``decide(command, state) -> Persist | PersistAll | Defer | Ignore``.
            fold: ``fold(event, state) -> state``.
            command: The command model, a union of models, or an iterable of them.
            event: The event model(s), likewise.
            cache_size: Instances a worker keeps in memory per partition, most recently
                used first (the rest are read from RocksDB when a command comes).
            command_retention: How long a command id's first verdict is remembered: a
                command sent again within it gets that verdict, however many other
                commands came in between (7 days; at least the longest resend the
                platform makes itself: ``Retry.command``'s 5 minutes and
                ``command_timeout``). It is also the verdicts topic's ``retention.ms``.

        Raises:
            DefinitionError: listing every problem with the definition
                (``kinds/aggregate/declare.py``).
        """
        return self._hosting(declare_aggregate(
            self, name, initial, decide, fold, command=command, event=event, cache_size=cache_size,
            command_retention=command_retention,
        ))

    def projection(
        self,
        name: str,
        sources: Iterable[AggregateHandle[Any, Any, Any]],
        handler: Handler,
    ) -> ProjectionHandle:
        """Declare a projection of the stored events of ``sources`` into a read model.

        ``handler(event, view)`` (sync or async) gets each stored event once, in journal
        order per instance, and reads and writes the ``View``; the view's writes and the
        source offsets are committed together, so a restart applies nothing twice. An
        async handler may ``await event.signal(workflow, instance_id, name, payload)``
        (``shell/kinds/projection/signals.py``; "Signal a workflow from a projection" in
        ``docs/workflows.md``).

        Raises:
            DefinitionError: listing every problem with the definition.
        """
        return self._hosting(declare_projection(self, name, sources, handler))

    def workflow(self, name: str | None = None, **options: Any) -> Callable[[Any], Any]:
        """Declare a workflow: ``@app.workflow("enrich")`` over ``async def body(ctx, input)``.

        See ``tidings.shell.kinds.workflow.handle.workflow_builder`` for the options.
        """
        if callable(name):  # ``@app.workflow`` without parentheses
            return self.workflow(None, **options)(name)
        build = workflow_builder(self, name, **options)

        def decorate(body: Callable[..., Any]) -> WorkflowHandle:
            return self._hosting(build(body))

        return decorate

    def orchestration(
        self,
        name: str,
        sources: Iterable[Any],
        key_of: Callable[[Any], str | None],
        factory: Callable[[str], Any],
        actions_topic: str | None = None,
        **options: Any,
    ) -> Any:
        """Host an orchestration per instance key over ``sources`` (SPEC §8).

        See ``tidings.shell.kinds.orchestration.handle.declare_orchestration`` for the details.
        """
        definition: OrchestrationDefinition = self._hosting(
            declare_orchestration(self, name, sources, key_of, factory, actions_topic, **options)
        )
        return definition

    def saga(
        self,
        name: str,
        *,
        subscribe: Iterable[Any],
        start_on: Callable[[Any], bool],
        initial: Any,
        handle: Callable[[Any, Any], Any],
        on_enter: Callable[[Any, bool], Any],
        state: Any = None,
    ) -> SagaHandle:
        """Declare a saga over the stored events of ``subscribe`` (SPEC §4, docs/sagas.md).

        ``start_on(event) -> bool`` starts one saga per correlation id; ``handle(event,
        state) -> new state | None`` and ``on_enter(state, recovering) -> (Stay() |
        Goto(state) | Stop(), [Send(...)])`` drive it. See
        ``tidings.shell.kinds.saga.handle.declare_saga``.

        Raises:
            DefinitionError: listing every problem with the definition.
        """
        return self._hosting(declare_saga(self, name, subscribe=subscribe, start_on=start_on,
                                          initial=initial, handle=handle, on_enter=on_enter,
                                          state=state))

    def workflow_flow(
        self,
        name: str,
        source_topic: str,
        handle: WorkflowHandle | str,
        id_of: Callable[[Any], str],
        sink_topic: str,
        parallelism: int,
        timeout: float | timedelta,
        *,
        source_schema: Mapping[str, Any] | str | None = None,
    ) -> WorkflowFlowStage:
        """Deploy ``WorkflowFlow.run`` topic to topic in the workers (SPEC §7, docs/workflows.md).

        Each record of ``source_topic`` (JSON, or Avro written with ``source_schema``:
        single-object or Confluent wire format) starts ``handle``'s workflow with id
        ``id_of(element)``; its outcome is written to ``sink_topic`` keyed by that id, and
        the source offset is committed only then. See ``tidings.shell.kinds.flow.stage``.

        Raises:
            DefinitionError: listing every problem with the arguments.
        """
        return self._hosting(declare_flow(self, name, source_topic, handle, id_of, sink_topic,
                                          parallelism, timeout, source_schema))

    def schedules(self, workflows: Iterable[Any]) -> ScheduleHandle:
        """Declare the schedule aggregate (SPEC §6, docs/schedules.md); returns its handle.

        ``workflows`` lists the workflow handles (or names) a schedule may start. The
        schedules are the aggregate ``schedule``, hosted like any other aggregate, and every
        worker also runs their dispatcher (``ScheduleDispatch``) for the partitions it owns.

        Raises:
            DefinitionError: the app declares schedules already.
        """
        aggregate, dispatch, schedules = declare_schedules(self, workflows)
        self.host(aggregate)
        self.host(dispatch)
        self._schedules = schedules
        return schedules

    def schedule_handle(self) -> ScheduleHandle:
        """Return the handle ``app.schedules`` returned (the CLI's way to the schedules).

        Raises:
            LookupError: The app declares no schedules.
        """
        if self._schedules is None:
            raise LookupError(f"app {self.name!r} declares no schedules: add "
                              "`schedules = app.schedules([workflow, ...])` listing the workflows a "
                              "schedule may start")
        return self._schedules

    def host(self, definition: Hosted) -> None:
        """Register a definition to run in this app's workers (``hosting.Hosted``).

        Every kind goes through here: the public decorators above, and a kind of a
        program's own (``tests/counter_kind.py``).

        Raises:
            DefinitionError: the app already has a definition of that kind and name.
        """
        kind = definition.kind
        key = (kind, definition.name)
        if key in self._hosted:
            raise DefinitionError(
                f"{kind} {definition.name!r}", [f"a {kind} with this name is already declared"]
            )
        self._hosted[key] = definition

    def _hosting(self, definition: H) -> H:
        """Host ``definition`` and return it: what each public decorator returns."""
        self.host(definition)
        return definition

    def register_saga_starter(self, aggregate: str, starter: SagaStarter) -> None:
        """Tell aggregate ``aggregate`` that ``starter`` may start from its stored events.

        A saga declared with ``app.saga(subscribe=[...])`` needs no registering
        (``sagas_of`` lists it); this is for a starter that is no declared saga, e.g. a
        test's. The aggregate then refuses a command whose event would start it twice for
        one correlation id.

        Raises:
            DefinitionError: a starter of that name is already registered there, or a saga
                of that name subscribes to the aggregate.
        """
        registered = self.saga_starters.setdefault(aggregate, [])
        if any(known.name == starter.name for known in self.sagas_of(aggregate)):
            raise DefinitionError(f"saga {starter.name!r}", [
                f"it already subscribes to aggregate {aggregate!r}"
            ])
        registered.append(starter)

    def sagas_of(self, aggregate_name: str) -> list[SagaStarter]:
        """The sagas that subscribe to aggregate ``aggregate_name``, as it asks them.

        Those declared with ``app.saga(subscribe=[...])``, then those registered with
        ``register_saga_starter``.
        """
        declared: list[SagaStarter] = [starter for saga in self.sagas
                                       if (starter := saga.starter_for(aggregate_name)) is not None]
        return declared + list(self.saga_starters.get(aggregate_name, ()))

    # -- what the shell reads ----------------------------------------------------------

    @property
    def hosted(self) -> tuple[Hosted, ...]:
        """Every definition the worker runs, in declaration order."""
        return tuple(self._hosted.values())

    def declared(self, kind: str) -> Sequence[Hosted]:
        """The definitions of ``kind`` (``"aggregate"``, ``"workflow"``, ...), in declaration order.

        The lookup a handle makes through its ``KindContext``: a saga finds its aggregates,
        a schedule its workflows.
        """
        return tuple(h for h in self._hosted.values() if h.kind == kind)

    @property
    def aggregates(self) -> tuple[AggregateHandle[Any, Any, Any], ...]:
        return tuple(h for h in self._hosted.values() if isinstance(h, AggregateHandle))

    @property
    def projections(self) -> tuple[ProjectionHandle, ...]:
        return tuple(h for h in self._hosted.values() if isinstance(h, ProjectionHandle))

    @property
    def workflows(self) -> tuple[WorkflowHandle, ...]:
        """The handles of the app's workflows, in declaration order."""
        return tuple(h for h in self._hosted.values() if isinstance(h, WorkflowHandle))

    @property
    def sagas(self) -> tuple[SagaHandle, ...]:
        """The handles of the app's sagas, in declaration order."""
        return tuple(h for h in self._hosted.values() if isinstance(h, SagaHandle))


    def workflow_handle(self, name: str) -> WorkflowHandle:
        """Return the handle of the workflow ``name``.

        Raises:
            LookupError: The app declares no such workflow (the message lists the known ones).
        """
        return workflow_named(self, name)

    def own_topics(self) -> frozenset[str]:
        """The app's topics no reply may be sent to: all it declares but the replies topics."""
        return frozenset(
            spec.name for spec in self._declared_specs() if not spec.name.endswith(".replies")
        )

    @property
    def replies_topic(self) -> str:
        """Where this app's clients ask for replies."""
        return f"{self.name}.replies"

    def bootstrap(self) -> str:
        """Return the bootstrap servers, or raise ``BrokerError`` saying how to set them."""
        return self.connection.bootstrap

    @property
    def connection(self) -> KafkaConnection:
        """The Kafka connection this app's clients and workers use (``connection_for()``).

        Resolved on each use from ``App(bootstrap=..., kafka=...)``, the environment and the
        ``TIDINGS_KAFKA_CONFIG`` file (docs/kafka.md).

        Raises:
            BrokerError: nothing gives the bootstrap servers.
            DefinitionError: the environment or the file is not a usable configuration.
        """
        return self.connection_for()

    def connection_for(
        self, bootstrap: str | KafkaConnection | None = None, *,
        config_file: str | os.PathLike[str] | None = None,
    ) -> KafkaConnection:
        """The Kafka connection for ``bootstrap``: a connection is used as it is; a
        bootstrap string (a CLI's ``--bootstrap``) replaces the app's bootstrap servers and
        keeps its other properties; ``config_file`` (``--kafka-config``) replaces
        ``TIDINGS_KAFKA_CONFIG``.

        Raises:
            BrokerError: nothing gives the bootstrap servers.
            DefinitionError: a source is not a usable configuration.
        """
        if isinstance(bootstrap, KafkaConnection):
            return bootstrap
        # Every handle call without a connection asks this: resolve again only when what it
        # reads changed (the TIDINGS_* environment, the file's name and modification time),
        # not by reading and parsing the properties file once per command.
        file = config_file or os.environ.get("TIDINGS_KAFKA_CONFIG")
        try:
            stamp = os.stat(file).st_mtime_ns if file else None
        except OSError:
            stamp = None  # resolve says what is wrong with it
        key = (bootstrap, str(file), stamp, environment_stamp())
        cached = self._resolved.get(key)
        if cached is None:
            cached = KafkaConnection.resolve(bootstrap=bootstrap or self._bootstrap, kafka=self._kafka,
                                             config_file=config_file)
            self._resolved = {key: cached}  # the latest only: the sources rarely change
        return cached

    def data_dir(self) -> Path:
        """Return the directory for this app's RocksDB state."""
        root = self._data_dir or os.environ.get("TIDINGS_DATA_DIR") or ".tidings/data"
        return Path(root) / self.name

    def replication(self) -> Replication:
        """The replication the app's topics are created with: ``App(replication_factor=...,
        min_insync_replicas=...)``, else ``TIDINGS_REPLICATION_FACTOR`` /
        ``TIDINGS_MIN_INSYNC_REPLICAS``, else the broker's defaults.

        Raises:
            DefinitionError: an environment variable is not a usable value.
        """
        return Replication.resolve(self.replication_factor, self.min_insync_replicas)

    def topic_specs(self) -> list[TopicSpec]:
        """Return every topic this app needs, for ``tidings topics apply`` and the worker,
        with the app's ``replication()``."""
        return self.replication().applied(self._declared_specs())

    def _declared_specs(self) -> list[TopicSpec]:
        specs = [
            spec_for("deadletter", deadletter_topic(self.name), partitions=self.partitions),
            spec_for("replies", self.replies_topic, partitions=self.partitions),
        ]
        for hosted in self._hosted.values():
            specs.extend(hosted.topic_specs())
        # Hosted definitions list the shared topics (the dead-letter topic) again: once each.
        return list({spec.name: spec for spec in specs}.values())

    def apply_topics(
        self, bootstrap: str | KafkaConnection | None = None, *, out: Callable[[str], Any] = print,
    ) -> ApplyReport:
        """Create the app's missing topics and report differences (``tidings topics apply``).

        Raises:
            BrokerError: Kafka did not answer.
        """
        return apply_topics(self.connection_for(bootstrap), self.topic_specs(), out=out)

    def client(self, bootstrap: str | KafkaConnection | None = None, *, name: str | None = None) -> Client:
        """Return this app's client for ``bootstrap`` (an address or a ``KafkaConnection``;
        default the app's): one per connection and client name, made on first use.

        ``name`` (default ``TIDINGS_CLIENT_NAME``) is the client principal's name: its
        replies come on ``{app}.replies.NAME`` (``Client``, docs/security.md).
        """
        connection = self.connection_for(bootstrap)
        key = (connection, name or os.environ.get(CLIENT_NAME_ENV) or None)
        if key not in self._clients:
            self._clients[key] = Client(connection, app=self, name=key[1])
        return self._clients[key]

    def worker(
        self,
        *,
        bootstrap: str | KafkaConnection | None = None,
        data_dir: Path | None = None,
        instance_id: str | None = None,
        metrics_port: int | None = None,
        processing_guarantee: str | None = None,
        stall_timeout_s: float | None = None,
        stop_grace_s: float | None = None,
    ) -> Worker:
        """Build the worker that runs every definition of this app (no I/O until run).

        ``bootstrap`` is an address or a ``KafkaConnection`` (``connection_for``); every Kafka
        client of the worker is built from that connection.
        ``instance_id`` (default ``TIDINGS_INSTANCE_ID``) makes it a static member of the
        app's consumer group: give each worker a stable, unique one (a pod name) and a
        restarted worker takes its partitions back without a rebalance wait.
        ``metrics_port`` serves Prometheus metrics on that port, with ``/livez`` and ``/readyz``
        (docs/operations.md).
        ``processing_guarantee`` (default ``TIDINGS_PROCESSING_GUARANTEE``, else the
        app's) overrides ``App(processing_guarantee=...)`` for this worker.
        ``stall_timeout_s`` (default 120): seconds the intake may make no progress with
        work waiting while the brokers answer before the worker exits 70; 0 never exits
        (docs/operations.md, "Liveness").
        ``stop_grace_s`` (default 25): seconds from SIGTERM to the worker's exit; activity
        attempts still running near its end are abandoned and run again after the restart
        (docs/operations.md, "Stopping").

        Raises:
            ValueError: ``processing_guarantee`` is not one the worker offers, or
                ``stop_grace_s`` is not from 1 to 3600 seconds.
        """
        # Imported here, not above: Faust takes a third of a second to import, and only a
        # worker process needs it (a client or a CLI command never does). No circle: the
        # worker imports nothing of the App (it runs a ``HostedApp``).
        from .runtime.worker import Worker

        guarantee = (processing_guarantee or os.environ.get("TIDINGS_PROCESSING_GUARANTEE")
                     or self.processing_guarantee)
        if guarantee not in GUARANTEES:
            raise ValueError(f"processing guarantee must be one of {', '.join(GUARANTEES)}, "
                             f"not {guarantee!r}")
        return Worker(
            self,
            connection=self.connection_for(bootstrap),
            data_dir=data_dir,
            instance_id=instance_id or os.environ.get("TIDINGS_INSTANCE_ID") or None,
            metrics_port=metrics_port,
            exactly_once=guarantee == EXACTLY_ONCE,
            stall_timeout_s=stall_timeout_s,
            stop_grace_s=stop_grace_s,
        )
