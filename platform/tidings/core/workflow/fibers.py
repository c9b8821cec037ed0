"""The interpreter's scheduling structures: fibers (branches), groups and pending steps.

A *fiber* is one line of execution of a body: the body itself, or one branch of a parallel
step. It holds a stack of coroutine frames (the body, then one frame per ``@subroutine``
call in progress) and resumes only the innermost, so the cost of a step does not depend on
the call depth. A *group* is a parallel step waiting for its branches. A *pending step* is
a step the journal has started and not ended: an activity, a timer or a signal wait.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from tidings.core.workflow.paths import branch_prefix
from tidings.core.workflow.requests import AllRequest, CallRequest, RaceRequest, StepRequest

Frame = Coroutine[Any, Any, Any]

BLOCKED: Any = object()
"""What a step handler returns when its fiber must wait for an input."""


class Fiber:
    """One branch of execution and its frame stack."""

    __slots__ = ("prefix", "counter", "frames", "group", "branch", "dead", "waiting", "version_at", "version_ids")

    def __init__(self, prefix: str, frame: Frame, group: Group | None = None, branch: int = 0) -> None:
        self.prefix = prefix
        self.counter = 0
        self.frames: list[Frame] = [frame]
        self.group = group
        self.branch = branch
        # dead: finished, abandoned or parked; a dead fiber is never resumed again.
        self.dead = False
        self.waiting: Pending | Group | None = None
        # The change ids ``version`` used at the current position, to refuse a repeat.
        self.version_at = 0
        self.version_ids: set[str] | None = None

    def next_path(self) -> str:
        """Take the next step position of this branch and return its path."""
        self.counter += 1
        return f"{self.prefix}{self.counter}"

    def close(self) -> None:
        """Close every frame, innermost first, so ``finally`` blocks of an abandoned branch run.

        A ``finally`` that awaits a step cannot take it (the branch is gone); Python then
        reports ``RuntimeError`` from ``close``. That, and anything else such a block
        raises, has nowhere to go and is ignored.
        """
        self.dead = True
        frames = self.frames
        while frames:
            frame = frames.pop()
            try:
                frame.close()
            except Exception:  # noqa: BLE001 - a finally block of a branch that no longer exists
                pass


class Group:
    """A parallel step (``all``/``both``/``all_at_most``/``race``) waiting for its branches."""

    __slots__ = ("path", "request", "parent", "fibers", "results", "remaining", "spawned", "done")

    def __init__(self, path: str, request: AllRequest | RaceRequest, parent: Fiber) -> None:
        self.path = path
        self.request = request
        self.parent = parent
        size = len(request.branches)
        self.fibers: list[Fiber | None] = [None] * size
        self.results: list[Any] = [None] * size
        self.remaining = size
        self.spawned = 0
        self.done = False

    @property
    def is_race(self) -> bool:
        """True for ``race``: the first branch to finish decides."""
        return isinstance(self.request, RaceRequest)

    def spawn_next(self) -> Fiber:
        """Create the fiber of the next branch (1-based numbering in its prefix)."""
        index = self.spawned
        self.spawned += 1
        request = self.request
        item = request.branches[index]
        body = request.body if isinstance(request, AllRequest) else None
        fiber = Fiber(branch_prefix(self.path, index + 1), frame_of(item, body), self, index + 1)
        self.fibers[index] = fiber
        return fiber


class Pending:
    """A started step waiting for an input: an activity result, a timer or a signal."""

    __slots__ = ("path", "kind", "fiber", "request", "started_at", "due", "attempt", "issued")

    def __init__(
        self, path: str, kind: str, fiber: Fiber, request: StepRequest[Any], started_at: int, due: int | None
    ) -> None:
        self.path = path
        self.kind = kind
        self.fiber = fiber
        self.request = request
        self.started_at = started_at
        self.due = due
        self.attempt = 1
        # issued: the shell has been told to run/arm it (False while replaying).
        self.issued = False


def frame_of(branch: Any, body: Any = None) -> Frame:
    """Return the coroutine frame that runs one branch of a parallel step.

    A branch is a coroutine (run as is), a ``@subroutine`` call (started), or any other
    awaitable (awaited by a one-line frame, so a foreign awaitable is rejected like any
    other await of the body). With ``body`` set, the branch is ``body(branch)``.
    """
    if body is not None:
        try:
            branch = body(branch)
        except Exception as exc:  # noqa: BLE001 - the branch fails with it, like a raise inside it
            return _raise(exc)
    if isinstance(branch, CallRequest):
        return branch.start()
    if hasattr(branch, "send") and hasattr(branch, "throw"):
        return branch  # type: ignore[no-any-return]
    return _await(branch)


async def _await(awaitable: Any) -> Any:
    return await awaitable


async def _raise(exc: Exception) -> Any:
    raise exc
