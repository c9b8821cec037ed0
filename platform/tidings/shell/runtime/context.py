"""What a kind's handle knows of the app it is declared in: ``KindContext``, a narrow protocol.

A handle (``kinds/<kind>/handle.py``) is what a program holds and what the worker opens. It
needs a few facts of its app (its name, partition count, timeouts, replies topic), a client
to send through, and the other definitions it is declared to use (a saga its aggregates, a
schedule its workflows). It gets them through this protocol, never through ``App``: so no
kind imports ``app.py``, and a test or the CLI can hand a handle a context of its own (one
that sends through a chosen client, ``cli/schedule.py``).

``App`` (``shell/app.py``) is the context of every handle it declares; it satisfies this
protocol structurally. The lookups are by kind (``declared("aggregate")``): the kind that
asks filters them with the handle type of the kind it depends on, which is an import along
a declared edge (saga -> aggregate, schedule -> aggregate and workflow, projection and flow
-> workflow), checked by import-linter (pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...core.saga_starts import SagaStarter
from .connection import KafkaConnection
from .hosting import Hosted
from .requester import Requester


class KindClient(Protocol):
    """What a handle asks of the client it sends through (``client.Client`` is one)."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def connection(self) -> KafkaConnection: ...

    @property
    def requester(self) -> Requester: ...

    async def send(
        self,
        aggregate: Any,
        aggregate_id: str,
        command: Any,
        timeout: float | None = None,
        *,
        expected_version: int | None = None,
        command_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Any: ...

    def close(self) -> None: ...


class KindContext(Protocol):
    """What a handle needs of its app: facts, a client source and the other kinds' handles."""

    @property
    def name(self) -> str:
        """The app name, the first segment of every topic."""
        ...

    @property
    def partitions(self) -> int:
        """The partition count of every topic the app declares."""
        ...

    @property
    def command_timeout(self) -> float:
        """Seconds a request waits for its answer unless the call names a timeout."""
        ...

    @property
    def replies_topic(self) -> str:
        """Where the app's clients are answered."""
        ...

    def bootstrap(self) -> str:
        """The Kafka bootstrap servers, for the readers a handle opens itself (journals)."""
        ...

    def connection_for(
        self, bootstrap: str | KafkaConnection | None = None, *, config_file: str | None = None
    ) -> KafkaConnection:
        """The Kafka connection for ``bootstrap`` (None: the app's own; an address keeps the
        app's other properties; a connection is used as it is), docs/kafka.md."""
        ...

    def data_dir(self) -> Path:
        """Where the app's workers keep their stores by default."""
        ...

    def own_topics(self) -> frozenset[str]:
        """The app's topics no reply may be sent to (a flow may neither read nor write them)."""
        ...

    def client(self, connection: Any = None, /) -> KindClient:
        """The client for ``connection`` (None: the app's own), passed through unread."""
        ...

    def declared(self, kind: str) -> Sequence[Hosted]:
        """The definitions of ``kind`` declared so far, in declaration order."""
        ...

    def sagas_of(self, aggregate_name: str) -> list[SagaStarter]:
        """The sagas an aggregate must ask before storing an event that would start one."""
        ...


@dataclass(frozen=True)
class ThroughClient:
    """``base`` with its client chosen: every send of a handle declared with it goes through
    ``chosen``, and waits ``timeout`` seconds unless the call names one (the CLI's
    ``--bootstrap`` and ``--timeout``: ``dataclasses.replace(handle, context=...)``).
    """

    base: KindContext
    chosen: KindClient
    timeout: float | None = None

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def partitions(self) -> int:
        return self.base.partitions

    @property
    def command_timeout(self) -> float:
        return self.base.command_timeout if self.timeout is None else self.timeout

    @property
    def replies_topic(self) -> str:
        return self.base.replies_topic

    def bootstrap(self) -> str:
        return self.chosen.bootstrap

    def connection_for(
        self, bootstrap: str | KafkaConnection | None = None, *, config_file: str | None = None
    ) -> KafkaConnection:
        if bootstrap is None and config_file is None:
            return self.chosen.connection
        return self.base.connection_for(bootstrap, config_file=config_file)

    def data_dir(self) -> Path:
        return self.base.data_dir()

    def own_topics(self) -> frozenset[str]:
        return self.base.own_topics()

    def client(self, connection: Any = None, /) -> KindClient:
        return self.chosen

    def declared(self, kind: str) -> Sequence[Hosted]:
        return self.base.declared(kind)

    def sagas_of(self, aggregate_name: str) -> list[SagaStarter]:
        return self.base.sagas_of(aggregate_name)


def source_reasons(context: KindContext, sources: Sequence[Any], *, hint: str = "") -> list[str]:
    """Why ``sources`` are not a usable list of ``context``'s aggregate handles (empty: they are).

    Asked of the context, not checked by type, so a kind that reads aggregates' events (a
    projection, an orchestration) imports no aggregate module.
    """
    if not sources:
        return ["sources must name at least one aggregate handle"]
    aggregates = context.declared("aggregate")
    return [f"{source!r} is not an aggregate handle of this app{hint}"
            for source in sources if not any(source is aggregate for aggregate in aggregates)]


__all__ = ["KindClient", "KindContext", "ThroughClient", "source_reasons"]
