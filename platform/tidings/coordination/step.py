"""The outcome of applying one event to a coordination."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from tidings.coordination.coordination import Coordination

E = TypeVar("E")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Step(Generic[E, T]):
    """What a coordination produced for one event, and what it becomes.

    Attributes:
        results: The results the event produced, in order (possibly none). Treat as read-only.
        next: The coordination that takes the following event, or ``None`` when finished.
    """

    results: list[T]
    next: Coordination[E, T] | None

    @property
    def finished(self) -> bool:
        """Whether the coordination is finished (takes no more events)."""
        return self.next is None
