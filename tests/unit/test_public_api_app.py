"""The App's public methods keep their names and signatures (issue 17 moved their bodies out).

``app.aggregate``, ``app.projection``, ``@app.workflow``, ``app.saga``, ``app.orchestration``,
``app.workflow_flow`` and ``app.schedules`` hand their declarations to the kinds' modules
(``kinds/<kind>/``) and register what comes back with ``app.host``: a program sees no change.
``declared`` is new: the lookup handles make through their ``KindContext``; so are
``kafka=``, ``connection`` and ``connection_for`` (the one Kafka connection, docs/kafka.md),
and ``client``/``worker``/``apply_topics`` take a ``KafkaConnection`` as well as an address.
``replication_factor=``, ``min_insync_replicas=`` and ``replication()`` are issue 18's: one
replication setting for every topic the app declares (docs/kafka.md, "Replication"); and
``client(name=...)``: a client principal's own replies topic (docs/security.md).
"""

import inspect

from tidings import App
from tidings.shell.runtime.context import KindContext
from tidings.shell.runtime.worker import HostedApp

#: Every public member of App: a property, or the signature of a method.
APP_MEMBERS = {
    '__init__': "(self, name: 'str', *, bootstrap: 'str | None' = None, kafka: 'Mapping[str, object] | None' = None, partitions: 'int' = 8, data_dir: 'str | os.PathLike[str] | None' = None, command_timeout: 'float' = 30.0, deadletter_value_limit: 'int' = 65536, json_outcomes: 'bool' = False, processing_guarantee: 'str' = 'at_least_once', replication_factor: 'int | None' = None, min_insync_replicas: 'int | None' = None) -> 'None'",
    'aggregate': "(self, name: 'str', initial: 'S', decide: 'Callable[[C, S], Decision]', fold: 'Callable[[E, S], S]', *, command: 'Any', event: 'Any', cache_size: 'int' = 100000, command_retention: 'timedelta' = datetime.timedelta(days=7)) -> 'AggregateHandle[C, E, S]'",
    'aggregates': 'property',
    'apply_topics': "(self, bootstrap: 'str | KafkaConnection | None' = None, *, out: 'Callable[[str], Any]' = <built-in function print>) -> 'ApplyReport'",
    'bootstrap': "(self) -> 'str'",
    'client': "(self, bootstrap: 'str | KafkaConnection | None' = None, *, name: 'str | None' = None) -> 'Client'",
    'connection': 'property',
    'connection_for': "(self, bootstrap: 'str | KafkaConnection | None' = None, *, config_file: 'str | os.PathLike[str] | None' = None) -> 'KafkaConnection'",
    'data_dir': "(self) -> 'Path'",
    'declared': "(self, kind: 'str') -> 'Sequence[Hosted]'",
    'host': "(self, definition: 'Hosted') -> 'None'",
    'hosted': 'property',
    'orchestration': "(self, name: 'str', sources: 'Iterable[Any]', key_of: 'Callable[[Any], str | None]', factory: 'Callable[[str], Any]', actions_topic: 'str | None' = None, **options: 'Any') -> 'Any'",
    'own_topics': "(self) -> 'frozenset[str]'",
    'projection': "(self, name: 'str', sources: 'Iterable[AggregateHandle[Any, Any, Any]]', handler: 'Handler') -> 'ProjectionHandle'",
    'projections': 'property',
    'replication': "(self) -> 'Replication'",
    'register_saga_starter': "(self, aggregate: 'str', starter: 'SagaStarter') -> 'None'",
    'replies_topic': 'property',
    'saga': "(self, name: 'str', *, subscribe: 'Iterable[Any]', start_on: 'Callable[[Any], bool]', initial: 'Any', handle: 'Callable[[Any, Any], Any]', on_enter: 'Callable[[Any, bool], Any]', state: 'Any' = None) -> 'SagaHandle'",
    'sagas': 'property',
    'sagas_of': "(self, aggregate_name: 'str') -> 'list[SagaStarter]'",
    'schedule_handle': "(self) -> 'ScheduleHandle'",
    'schedules': "(self, workflows: 'Iterable[Any]') -> 'ScheduleHandle'",
    'topic_specs': "(self) -> 'list[TopicSpec]'",
    'worker': "(self, *, bootstrap: 'str | KafkaConnection | None' = None, data_dir: 'Path | None' = None, instance_id: 'str | None' = None, metrics_port: 'int | None' = None, processing_guarantee: 'str | None' = None, stall_timeout_s: 'float | None' = None, stop_grace_s: 'float | None' = None) -> 'Worker'",
    'workflow': "(self, name: 'str | None' = None, **options: 'Any') -> 'Callable[[Any], Any]'",
    'workflow_flow': "(self, name: 'str', source_topic: 'str', handle: 'WorkflowHandle | str', id_of: 'Callable[[Any], str]', sink_topic: 'str', parallelism: 'int', timeout: 'float | timedelta', *, source_schema: 'Mapping[str, Any] | str | None' = None) -> 'WorkflowFlowStage'",
    'workflow_handle': "(self, name: 'str') -> 'WorkflowHandle'",
    'workflows': 'property',
}


def public_members() -> dict[str, str]:
    members = {}
    for name, member in sorted(vars(App).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, property):
            members[name] = "property"
        elif callable(member):
            members[name] = str(inspect.signature(member))
    return members


def test_the_app_s_public_methods_and_their_signatures_are_locked() -> None:
    assert public_members() == APP_MEMBERS


def test_the_app_is_the_context_of_its_handles_and_what_its_worker_hosts() -> None:
    app: KindContext = App("locked")
    hosted: HostedApp = App("locked")
    assert app.declared("aggregate") == () and hosted.hosted == ()
