"""Why a step, or a whole workflow, ended without a value.

``StepError`` is what the journal stores for a failed step and what a body sees as
``WorkflowStepFailed.error``. Replay raises the stored ``StepError`` again, never the
original exception, so everything in it is plain JSON-compatible data.

A failure built from an exception keeps the chain of exceptions behind it (``causes``: the
type and message of each ``__cause__``, else ``__context__`` unless suppressed, nearest
first), bounded so a hostile or runaway chain cannot grow a journal record: at most
``MAX_CAUSES`` causes, each message at most ``MAX_CAUSE_MESSAGE_BYTES``, and a chain that
loops back on itself stops at the first exception seen twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from tidings.core.limits import clip_text

MAX_CAUSES: Final = 8
"""Most causes a ``StepError`` keeps (the nearest ones); a longer chain is cut there."""

MAX_CAUSE_MESSAGE_BYTES: Final = 1024
"""Longest message of one cause, in UTF-8 bytes (a message may quote megabytes of input)."""

_MAX_TYPE_BYTES: Final = 256


class ErrorKind(str, Enum):
    """Why a step ended without a value (the reference's ``ErrorKind``)."""

    CANCELLED = "cancelled"
    """The workflow was cancelled while the step was pending."""
    DEADLINE_EXCEEDED = "deadline_exceeded"
    """The policy's deadline, measured from the stored start of the step, passed."""
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    """The policy allowed no more attempts."""
    NOT_RETRYABLE = "not_retryable"
    """The failure is not worth another attempt (``retry_on``), or the result cannot be
    stored or read back as the declared type."""
    OUTCOME_UNKNOWN = "outcome_unknown"
    """A command got no reply in time; it may have been applied."""
    CHILD_FAULTED = "child_faulted"
    """A child workflow ended Faulted."""
    BAD_PAYLOAD = "bad_payload"
    """A signal's payload could not be read as the wait's type; the signal is consumed."""


@dataclass(frozen=True, slots=True)
class StepCause:
    """One exception of the chain behind a failure: its type's name and its message."""

    type: str
    message: str

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-compatible form stored in the journal."""
        return {"type": self.type, "message": self.message}


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a hostile __str__ must not lose the failure
        return "<the exception's message could not be read>"


def causes_of(exc: BaseException) -> tuple[StepCause, ...]:
    """Return the chain of exceptions behind ``exc``, nearest first, bounded.

    Follows ``__cause__`` (``raise X from Y``), else ``__context__`` (raised while handling
    another) unless ``__suppress_context__`` (``raise X from None``) hides it. Keeps at most
    ``MAX_CAUSES``, clips each message to ``MAX_CAUSE_MESSAGE_BYTES``, and stops at an
    exception already seen (a chain can be made to loop).
    """
    causes: list[StepCause] = []
    seen = {id(exc)}
    current: BaseException | None = exc
    while current is not None and len(causes) < MAX_CAUSES:
        nxt = current.__cause__
        if nxt is None and not current.__suppress_context__:
            nxt = current.__context__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        causes.append(StepCause(clip_text(type(nxt).__name__, _MAX_TYPE_BYTES),
                                clip_text(_text_of(nxt), MAX_CAUSE_MESSAGE_BYTES)))
        current = nxt
    return tuple(causes)


def _causes_from(data: Any) -> tuple[StepCause, ...]:
    # Stored causes may come from any producer (a JSON reply): check the shape, keep the bound.
    if data is None:
        return ()
    if not isinstance(data, (list, tuple)):
        raise ValueError("'causes' must be a list of {type, message} objects")
    causes = []
    for item in list(data)[:MAX_CAUSES]:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str) \
                or not isinstance(item.get("message", ""), str):
            raise ValueError("each of 'causes' must be an object with a string 'type' and 'message'")
        causes.append(StepCause(clip_text(item["type"], _MAX_TYPE_BYTES),
                                clip_text(item.get("message", ""), MAX_CAUSE_MESSAGE_BYTES)))
    return tuple(causes)


@dataclass(frozen=True, slots=True)
class StepError:
    """A stored failure.

    Attributes:
        kind: Why the step failed. ``None`` only in a ``Faulted`` outcome whose body
            raised an exception of its own (not a step failure).
        message: A human-readable reason, including the last attempt's exception.
        type: The name of the exception type behind the failure, if any.
        causes: The exceptions behind that one (``causes_of``), nearest first; empty when
            it had none, or for a failure stored before ``workflowjournal.v6``.
    """

    kind: ErrorKind | None
    message: str
    type: str | None = None
    causes: tuple[StepCause, ...] = ()

    def __str__(self) -> str:
        label = self.kind.value if self.kind is not None else (self.type or "error")
        return f"{label}: {self.message}{self.causes_text()}"

    def causes_text(self) -> str:
        """Return ``" (caused by A: a; caused by B: b)"``, or "" without causes."""
        if not self.causes:
            return ""
        return " (" + "; ".join(f"caused by {cause}" for cause in self.causes) + ")"

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-compatible form stored in the journal (``causes`` only when there are some,
        so a JSON record of a failure without causes reads as it did before them)."""
        data: dict[str, Any] = {
            "kind": self.kind.value if self.kind is not None else None,
            "message": self.message,
            "type": self.type,
        }
        if self.causes:
            data["causes"] = [cause.to_json() for cause in self.causes]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepError:
        """Rebuild a ``StepError`` from ``to_json``'s output (no ``causes``: none).

        Raises:
            ValueError: An unknown kind, or ``causes`` of the wrong shape.
        """
        kind = data.get("kind")
        return cls(
            kind=ErrorKind(kind) if kind is not None else None,
            message=str(data.get("message", "")),
            type=data.get("type"),
            causes=_causes_from(data.get("causes")),
        )

    @classmethod
    def of_exception(cls, kind: ErrorKind | None, exc: BaseException, context: str = "") -> StepError:
        """Describe ``exc`` as a stored failure of ``kind``.

        Args:
            kind: The failure's kind.
            exc: The exception behind it.
            context: Text put before the exception's description.
        """
        text = _text_of(exc)
        described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return cls(kind=kind, message=f"{context}{described}", type=type(exc).__name__, causes=causes_of(exc))
