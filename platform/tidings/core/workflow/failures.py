"""Why a step, or a whole workflow, ended without a value.

``StepError`` is what the journal stores for a failed step and what a body sees as
``WorkflowStepFailed.error``. Replay raises the stored ``StepError`` again, never the
original exception, so everything in it is plain JSON-compatible data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


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
class StepError:
    """A stored failure.

    Attributes:
        kind: Why the step failed. ``None`` only in a ``Faulted`` outcome whose body
            raised an exception of its own (not a step failure).
        message: A human-readable reason, including the last attempt's exception.
        type: The name of the exception type behind the failure, if any.
    """

    kind: ErrorKind | None
    message: str
    type: str | None = None

    def __str__(self) -> str:
        label = self.kind.value if self.kind is not None else (self.type or "error")
        return f"{label}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-compatible form stored in the journal."""
        return {
            "kind": self.kind.value if self.kind is not None else None,
            "message": self.message,
            "type": self.type,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepError:
        """Rebuild a ``StepError`` from ``to_json``'s output."""
        kind = data.get("kind")
        return cls(
            kind=ErrorKind(kind) if kind is not None else None,
            message=str(data.get("message", "")),
            type=data.get("type"),
        )

    @classmethod
    def of_exception(cls, kind: ErrorKind | None, exc: BaseException, context: str = "") -> StepError:
        """Describe ``exc`` as a stored failure of ``kind``.

        Args:
            kind: The failure's kind.
            exc: The exception behind it.
            context: Text put before the exception's description.
        """
        described = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return cls(kind=kind, message=f"{context}{described}", type=type(exc).__name__)
