"""Every public exception of tidings.

The tree::

    TidingsError
    ├── DefinitionError (also ValueError)   a definition is invalid; lists every reason
    ├── AggregateVersionConflict            expected_version did not match
    ├── SagaAlreadyStarted
    ├── WorkflowNotFound                    no instance was ever started with that id
    ├── WorkflowEnded                       the instance has already ended
    ├── WorkflowFaulted                     value() of a faulted instance
    ├── WorkflowCancelled                   value() of a cancelled instance
    ├── WorkflowStepFailed                  a step failed inside a body (.error.kind)
    ├── NondeterminismError                 the body no longer matches its journal (parked)
    ├── ForeignAwaitError (also TypeError)  a body awaited something that is not a ctx step
    ├── RecordError                         a record cannot be used; always dead-lettered
    │   ├── DecodeError                     bytes that are not a known envelope
    │   ├── SchemaError                     a valid envelope whose type/payload is wrong
    │   └── HandlerFailed                   user code (decide, fold, a handler) raised on it
    ├── BrokerError                         a Kafka error, translated at the boundary
    └── ReplyTimeout (also TimeoutError)    no reply within the timeout
"""

from __future__ import annotations

from collections.abc import Iterable


class TidingsError(Exception):
    """Base class of every exception tidings raises on purpose."""


class DefinitionError(TidingsError, ValueError):
    """A definition is invalid. ``reasons`` lists every problem found, not just the first."""

    def __init__(self, what: str, reasons: Iterable[str]) -> None:
        self.what = what
        self.reasons = list(reasons)
        lines = "\n".join(f"  - {reason}" for reason in self.reasons)
        super().__init__(f"{what} is invalid:\n{lines}")


class AggregateVersionConflict(TidingsError):
    """A command's ``expected_version`` differs from the aggregate's persisted version."""

    def __init__(self, aggregate_id: str, expected: int, actual: int) -> None:
        self.aggregate_id = aggregate_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"aggregate {aggregate_id!r} is at version {actual}, the command expected {expected}"
        )


class SagaAlreadyStarted(TidingsError):
    """A saga was already started for this (correlation id, aggregate) pair."""


class WorkflowNotFound(TidingsError, LookupError):
    """No workflow instance was ever started with this id."""


class WorkflowEnded(TidingsError):
    """The workflow instance has already ended and takes no more signals."""


class WorkflowFaulted(TidingsError):
    """The workflow instance ended Faulted."""


class WorkflowCancelled(TidingsError):
    """The workflow instance ended Cancelled."""


class WorkflowStepFailed(TidingsError):
    """A step failed inside a workflow body; ``error.kind`` says how."""

    def __init__(self, error: object) -> None:
        self.error = error
        super().__init__(str(error))


class NondeterminismError(TidingsError):
    """The body's requests no longer match its journal; the instance is parked."""


class ForeignAwaitError(TidingsError, TypeError):
    """A workflow body awaited something other than a ``ctx`` step or ``@subroutine`` call.

    Its result could not be journaled or replayed (``asyncio.sleep``, a task, an HTTP call),
    so the interpreter throws this into the body at that ``await``; uncaught, it faults the
    instance.
    """


class RecordError(TidingsError):
    """A record cannot be used. Agents dead-letter it and go on; never raised out of an agent."""


class DecodeError(RecordError):
    """The bytes are not a record tidings can decode."""


class SchemaError(RecordError):
    """The envelope decoded, but its type is unknown or its payload is invalid for the type."""


class HandlerFailed(RecordError):
    """User code (``decide``, ``fold``, a projection handler, ``key_of``) raised on a record.

    The record is dead-lettered with the exception in the reason, and the worker goes on.
    """


class BrokerError(TidingsError):
    """Kafka reported an error; the original is the ``__cause__``."""


class ReplyTimeout(TidingsError, TimeoutError):
    """No reply arrived within the timeout. The command may still be processed later."""
