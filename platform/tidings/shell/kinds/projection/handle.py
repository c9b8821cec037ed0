"""``app.projection``: the declaration validated, the handle (name, sources, handler), its hosting.

``declare_projection`` lists every problem at once and returns the handle; ``App.projection``
registers it with ``app.host(handle)``. Opening it (the hosting protocol of ``hosting.py``) builds a ``ProjectionAgent`` over the
sources' events topics with its view (RocksDB) under the worker's stores.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....errors import DefinitionError
from .agent import Handler, ProjectionAgent, ProjectionSource
from ...runtime.context import KindContext, source_reasons
from ...runtime.hosting import Runtime
from .signals import ProjectionSignals
from ...runtime.topics import TopicSpec
from .views import ViewStore


@dataclass(frozen=True)
class ProjectionHandle:
    """What ``app.projection`` returns: the projection's name, sources and handler."""

    context: KindContext
    name: str
    sources: tuple[ProjectionSource, ...]
    handler: Handler

    @property
    def kind(self) -> str:
        return "projection"

    def view_path(self, data_dir: Path | None = None) -> Path:
        """Where a worker using ``data_dir`` keeps this projection's view."""
        return (data_dir or self.context.data_dir()) / "stores" / self.kind / self.name

    # -- the hosting protocol (the worker side) ------------------------------------------

    def topic_specs(self) -> list[TopicSpec]:
        """None of its own: it reads the sources' events topics, which they declare."""
        return []

    def open(self, runtime: Runtime) -> ProjectionAgent:
        """Open the view and return the agent that runs this projection in a worker."""
        store = ViewStore(self.view_path(runtime.data_dir))
        signals = ProjectionSignals(
            self.name, runtime.connection, replies_topic=self.context.replies_topic,
            timeout=self.context.command_timeout,
        )
        return ProjectionAgent(
            self.name, self.handler, sources=self.sources, store=store, runtime=runtime, signals=signals
        )


def declare_projection(context: KindContext, name: str, sources: Iterable[Any], handler: Handler) -> ProjectionHandle:
    """Validate a projection of ``context`` and return its handle (see ``App.projection``).

    ``sources`` must be aggregate handles declared in ``context``: it is asked for them, so
    this kind needs no import of the aggregate kind.

    Raises:
        DefinitionError: listing every problem with the definition.
    """
    reasons: list[str] = []
    if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        reasons.append(f"name {name!r} must be letters, digits, '_' or '-'")
    if any(declared.name == name for declared in context.declared("projection")):
        reasons.append(f"a projection named {name!r} is already declared")
    sources = list(sources)
    reasons.extend(source_reasons(context, sources))
    if not callable(handler):
        reasons.append("handler must be callable: handler(event, view)")
    if reasons:
        raise DefinitionError(f"projection {name!r}", reasons)
    return ProjectionHandle(
        context,
        name,
        tuple(ProjectionSource(s.name, s.topics.events, s.definition.event_types) for s in sources),
        handler,
    )
