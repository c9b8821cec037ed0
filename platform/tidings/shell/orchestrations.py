"""Hosted orchestrations: ``app.orchestration(...)`` declared, validated, run as Faust agents.

Declaring does no I/O; ``attach`` (called by the worker) opens the RocksDB store and adds
two Faust agents: the router over the sources' events topics and the instance agent over
the orchestration's inbox (``tidings.shell.agents.orchestration``). The design, with its
guarantees and limits, is in docs/orchestrations-hosted.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DefinitionError
from .agents.orchestration import (
    Factory,
    KeyOf,
    OrchestrationAgent,
    OrchestrationRouter,
    OrchestrationStore,
    OrchestrationTopics,
)
from .agents.projection import ProjectionSource
from .kafka import KafkaPartitionReader
from .pipeline import agent_body, raw_topic
from .topics import TopicSpec, deadletter_topic, spec_for, topic_name

if TYPE_CHECKING:
    from .app import App
    from .worker import Worker


@dataclass(frozen=True)
class OrchestrationDefinition:
    """A hosted orchestration: what ``app.orchestration`` returns and the worker runs.

    Attributes:
        app: The App it belongs to.
        name: Its name (a topic segment).
        sources: The events topics it reads, with the types to decode them.
        key_of: ``key_of(SourceEvent) -> instance key | None``.
        factory: ``factory(instance key) -> Orchestration`` for a new instance.
        topics: Its inbox, journal, actions and outcomes topics.
    """

    app: App
    name: str
    sources: tuple[ProjectionSource, ...]
    key_of: KeyOf
    factory: Factory
    topics: OrchestrationTopics

    def topic_specs(self) -> list[TopicSpec]:
        """Return the inbox, journal, actions and outcomes topics, co-partitioned."""
        partitions = self.app.partitions
        return [
            spec_for("inbox", self.topics.inbox, partitions=partitions),
            spec_for("journal", self.topics.journal, partitions=partitions),
            spec_for("actions", self.topics.actions, partitions=partitions),
            spec_for("outcomes", self.topics.outcomes, partitions=partitions),
        ]

    def attach(self, worker: Worker, faust_app: Any, publisher: Any) -> None:
        """Open the store and add the router and instance agents to ``faust_app``."""
        reader = KafkaPartitionReader(worker.bootstrap)
        offsets_reader = KafkaPartitionReader(worker.bootstrap)
        store = OrchestrationStore(worker.data_dir / "orchestrations" / self.name)
        worker.on_close(reader.close)
        worker.on_close(offsets_reader.close)
        worker.on_close(store.close)
        partitions = self.app.partitions
        router = OrchestrationRouter(
            self.name, self.key_of, sources=self.sources, topics=self.topics,
            partitions=partitions, publisher=publisher,
        )
        agent = OrchestrationAgent(
            self.name, self.factory, sources=self.sources, topics=self.topics,
            partitions=partitions, store=store, reader=reader, publisher=publisher,
            offsets_reader=offsets_reader,
        )
        sources = raw_topic(faust_app, *router.source_topics)
        faust_app.agent(sources, name=f"orchestration-{self.name}-router")(
            agent_body(router.start, f"orchestration {self.name} router")
        )
        inbox = raw_topic(faust_app, self.topics.inbox, partitions=partitions)
        # One batch in flight: the next batch's catch-up and decisions read RocksDB, which
        # must hold the previous batch first.
        faust_app.agent(inbox, name=f"orchestration-{self.name}")(
            agent_body(agent.start, f"orchestration {self.name}", max_in_flight=1)
        )

        @faust_app.on_partitions_revoked.connect
        async def on_revoked(sender: Any, revoked: Iterable[Any], **_: Any) -> None:
            agent.revoke(tp.partition for tp in revoked if tp.topic == self.topics.inbox)



def declare_orchestration(
    app: App,
    name: str,
    sources: Iterable[Any],
    key_of: Callable[[Any], str | None],
    factory: Callable[[str], Any],
    actions_topic: str | None = None,
    **options: Any,
) -> OrchestrationDefinition:
    """Declare an orchestration hosted per instance key over the events of ``sources``.

    Every stored event of the sources is given to ``key_of`` as a ``SourceEvent``
    (``aggregate``, ``aggregate_id``, ``version``, ``value``, ``envelope``); it returns the
    instance key, or None when the event is not for this orchestration. Each instance is
    ``factory(key)``, stepped with the events' *values* in the order they reach it, and
    evaluated with ``None`` after each; the new actions of its ``Break`` results go to
    ``actions_topic`` (default ``{app}.orchestration.{name}.actions``) keyed
    ``{instance}/{position}``, and a finished instance's last ``Continue`` value to
    ``{app}.orchestration.{name}.outcomes`` keyed by instance.

    *Journaled:* each event at ``{app}.orchestration.{name}.journal``, key
    ``{instance}/{sequence}``. *Idempotent by:* the event's source topic, partition and
    offset. *Replay:* after a restart, instances are rebuilt by feeding their journal again.

    Args:
        app: The App.
        name: The orchestration's name (letters, digits, ``_``, ``-``).
        sources: Aggregate handles of ``app`` whose stored events it reads.
        key_of: ``key_of(event) -> str | None``; must be deterministic.
        factory: ``factory(key) -> Orchestration``; must be deterministic.
        actions_topic: Where actions go; it must have the app's partition count.
        **options: None are accepted yet.

    Returns:
        The definition, registered with ``app.host("orchestration", ...)``.

    Raises:
        DefinitionError: listing every problem with the declaration.
    """
    from .app import AggregateHandle

    reasons: list[str] = []
    if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        reasons.append(f"name {name!r} must be letters, digits, '_' or '-'")
    sources = list(sources)
    if not sources:
        reasons.append("sources must name at least one aggregate handle")
    for source in sources:
        if not isinstance(source, AggregateHandle) or source.app is not app:
            reasons.append(f"{source!r} is not an aggregate handle of this app "
                           "(raw topics are not accepted: see docs/orchestrations-hosted.md)")
    if not callable(key_of):
        reasons.append("key_of must be callable: key_of(event) -> str | None")
    if not callable(factory):
        reasons.append("factory must be callable: factory(key) -> Orchestration")
    if actions_topic is not None and (not isinstance(actions_topic, str) or not actions_topic):
        reasons.append(f"actions_topic must be a topic name, not {actions_topic!r}")
    if options:
        reasons.append(f"unknown options: {', '.join(sorted(options))}")
    if reasons:
        raise DefinitionError(f"orchestration {name!r}", reasons)
    topics = OrchestrationTopics(
        inbox=topic_name(app.name, "orchestration", name, "inbox"),
        journal=topic_name(app.name, "orchestration", name, "journal"),
        actions=actions_topic or topic_name(app.name, "orchestration", name, "actions"),
        outcomes=topic_name(app.name, "orchestration", name, "outcomes"),
        deadletter=deadletter_topic(app.name),
    )
    definition = OrchestrationDefinition(
        app,
        name,
        tuple(
            ProjectionSource(s.name, s.topics.events, s.definition.event_types) for s in sources
        ),
        key_of,
        factory,
        topics,
    )
    app.host("orchestration", definition)
    return definition

