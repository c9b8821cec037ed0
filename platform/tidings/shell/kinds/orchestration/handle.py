"""Hosted orchestrations: ``app.orchestration(...)`` declared, validated, and hosted.

Declaring does no I/O; ``open`` (called by the worker) opens the RocksDB store and returns
two agents: the router over the sources' events topics and the instance agent over
the orchestration's inbox (``tidings.shell.kinds.orchestration.agent``). The design, with its
guarantees and limits, is in docs/orchestrations-hosted.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ....errors import DefinitionError
from .agent import (
    Factory,
    KeyOf,
    OrchestrationAgent,
    OrchestrationStore,
    OrchestrationTopics,
    orchestration_router,
)
from ...runtime.context import KindContext, source_reasons
from ...runtime.hosting import Runtime
from ...runtime.journaled import Agents, EventSource
from ...runtime.topics import TopicSpec, deadletter_topic, spec_for, topic_name


@dataclass(frozen=True)
class OrchestrationDefinition:
    """A hosted orchestration: what ``app.orchestration`` returns and the worker runs.

    Attributes:
        context: The app it belongs to (``runtime/context.py``).
        name: Its name (a topic segment).
        sources: The events topics it reads, with the types to decode them.
        key_of: ``key_of(SourceEvent) -> instance key | None``.
        factory: ``factory(instance key) -> Orchestration`` for a new instance.
        topics: Its inbox, journal, actions and outcomes topics.
    """

    context: KindContext
    name: str
    sources: tuple[EventSource, ...]
    key_of: KeyOf
    factory: Factory
    topics: OrchestrationTopics

    def topic_specs(self) -> list[TopicSpec]:
        """Return the inbox, journal, actions and outcomes topics, co-partitioned."""
        partitions = self.context.partitions
        return [
            spec_for("inbox", self.topics.inbox, partitions=partitions),
            spec_for("journal", self.topics.journal, partitions=partitions),
            spec_for("actions", self.topics.actions, partitions=partitions),
            spec_for("outcomes", self.topics.outcomes, partitions=partitions),
        ]

    @property
    def kind(self) -> str:
        return "orchestration"

    def open(self, runtime: Runtime) -> Agents:
        """Open the store and return the router and instance agents of this orchestration."""
        store = OrchestrationStore(runtime.store_path(self.kind, self.name))
        router = orchestration_router(self.name, self.key_of, sources=self.sources, topics=self.topics,
                                      runtime=runtime)
        agent = OrchestrationAgent(self.name, self.factory, sources=self.sources, topics=self.topics,
                                   store=store, runtime=runtime)
        return Agents((router, agent))


def declare_orchestration(
    context: KindContext,
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
        context: The app it belongs to.
        name: The orchestration's name (letters, digits, ``_``, ``-``).
        sources: Aggregate handles of the app whose stored events it reads.
        key_of: ``key_of(event) -> str | None``; must be deterministic.
        factory: ``factory(key) -> Orchestration``; must be deterministic.
        actions_topic: Where actions go; it must have the app's partition count.
        **options: None are accepted yet.

    Returns:
        The definition; ``App.orchestration`` registers it with ``app.host(...)``.

    Raises:
        DefinitionError: listing every problem with the declaration.
    """
    reasons: list[str] = []
    if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        reasons.append(f"name {name!r} must be letters, digits, '_' or '-'")
    sources = list(sources)
    reasons.extend(source_reasons(
        context, sources, hint=" (raw topics are not accepted: see docs/orchestrations-hosted.md)"))
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
        inbox=topic_name(context.name, "orchestration", name, "inbox"),
        journal=topic_name(context.name, "orchestration", name, "journal"),
        actions=actions_topic or topic_name(context.name, "orchestration", name, "actions"),
        outcomes=topic_name(context.name, "orchestration", name, "outcomes"),
        deadletter=deadletter_topic(context.name),
    )
    return OrchestrationDefinition(
        context,
        name,
        tuple(
            EventSource(s.name, s.topics.events, s.definition.event_types) for s in sources
        ),
        key_of,
        factory,
        topics,
    )

