"""``app.aggregate``'s handle: the definition, its topics, a way to send, and its hosting.

The handle is what a program holds (``await accounts.send(...)``) and what the worker runs
(``topic_specs`` and ``open``, the hosting protocol of ``hosting.py``): opening it builds an
``AggregateAgent`` over the commands topic with a RocksDB store under the worker's stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from ....core.aggregate import AggregateDefinition
from .agent import Admit, AggregateAgent, AggregateTopics
from ...runtime.context import KindContext
from ...runtime.hosting import Runtime
from .store import AggregateStore
from ...runtime.topics import TopicSpec, spec_for

C = TypeVar("C")
E = TypeVar("E")
S = TypeVar("S")


@dataclass(frozen=True)
class AggregateHandle(Generic[C, E, S]):
    """What ``app.aggregate`` returns: the definition, its topics and a way to send.

    ``context`` is the app it is declared in (``runtime/context.py``): its partitions, its
    client, and the sagas that subscribe to it.
    """

    context: KindContext
    definition: AggregateDefinition[C, E, S]
    topics: AggregateTopics
    cache_size: int = 100_000
    #: RocksDB memtable size of the worker's store (None: RocksDB's 64 MiB default).
    write_buffer_bytes: int | None = None
    #: What the worker makes of a command before deciding it (``agent.Admit``); None: as sent.
    admit: Admit | None = None

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def kind(self) -> str:
        return "aggregate"

    async def send(
        self,
        aggregate_id: str,
        command: C,
        timeout: float | None = None,
        *,
        expected_version: int | None = None,
        command_id: str | None = None,
        correlation_id: str | None = None,
    ) -> E:
        """Send ``command`` to ``aggregate_id`` and return the reply event.

        Uses the context's client (the app's Kafka connection, docs/kafka.md) and, without
        ``timeout``, the context's ``command_timeout``; see ``Client.send`` for the errors it
        raises (``SagaAlreadyStarted`` among them).
        """
        client = self.context.client()
        result: E = await client.send(
            self,
            aggregate_id,
            command,
            self.context.command_timeout if timeout is None else timeout,
            expected_version=expected_version,
            command_id=command_id,
            correlation_id=correlation_id,
        )
        return result

    # -- the hosting protocol (the worker side) ------------------------------------------

    def topic_specs(self) -> list[TopicSpec]:
        """The commands, events and verdicts topics, co-partitioned; the verdicts topic
        keeps its records for the definition's ``command_retention``."""
        partitions = self.context.partitions
        verdicts = spec_for("verdicts", self.topics.verdicts, partitions=partitions)
        verdicts.config["retention.ms"] = str(self.definition.command_retention_ms)
        return [
            spec_for("commands", self.topics.commands, partitions=partitions),
            spec_for("events", self.topics.events, partitions=partitions),
            verdicts,
        ]

    def open(self, runtime: Runtime) -> AggregateAgent:
        """Open the store and return the agent that runs this aggregate in a worker.

        The agent is given the sagas subscribed to this aggregate, to refuse a command
        whose event would start one a second time (``core/saga_starts.py``).
        """
        starters = self.context.sagas_of(self.name)
        store: AggregateStore[S] = AggregateStore(
            runtime.store_path(self.kind, self.name),
            type(self.definition.initial),
            definition_name=self.name,
            sagas=[starter.name for starter in starters],
            write_buffer_bytes=self.write_buffer_bytes,
        )
        return AggregateAgent(self.definition, topics=self.topics, store=store, runtime=runtime,
                              starters=starters, cache_size=self.cache_size, admit=self.admit)
