"""``app.projection``'s handle: its name, sources and handler, and its hosting.

Opening it (the hosting protocol of ``hosting.py``) builds a ``ProjectionAgent`` over the
sources' events topics with its view (RocksDB) under the worker's stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .agent import Handler, ProjectionAgent, ProjectionSource
from ...runtime.hosting import Runtime
from .signals import ProjectionSignals
from ...runtime.topics import TopicSpec
from .views import ViewStore

if TYPE_CHECKING:
    from ...app import App


@dataclass(frozen=True)
class ProjectionHandle:
    """What ``app.projection`` returns: the projection's name, sources and handler."""

    app: App
    name: str
    sources: tuple[ProjectionSource, ...]
    handler: Handler

    @property
    def kind(self) -> str:
        return "projection"

    def view_path(self, data_dir: Path | None = None) -> Path:
        """Where a worker using ``data_dir`` keeps this projection's view."""
        return (data_dir or self.app.data_dir()) / "stores" / self.kind / self.name

    # -- the hosting protocol (the worker side) ------------------------------------------

    def topic_specs(self) -> list[TopicSpec]:
        """None of its own: it reads the sources' events topics, which they declare."""
        return []

    def open(self, runtime: Runtime) -> ProjectionAgent:
        """Open the view and return the agent that runs this projection in a worker."""
        store = ViewStore(self.view_path(runtime.data_dir))
        signals = ProjectionSignals(
            self.name, runtime.connection, replies_topic=self.app.replies_topic, timeout=self.app.command_timeout
        )
        return ProjectionAgent(
            self.name, self.handler, sources=self.sources, store=store, runtime=runtime, signals=signals
        )
