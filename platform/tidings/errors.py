"""Every public exception of tidings.

The tree::

    TidingsError
    ├── DefinitionError (also ValueError)   a definition is invalid; lists every reason
    ├── AggregateVersionConflict            expected_version did not match
    ├── SagaAlreadyStarted                  already started for that (correlation id, aggregate)
    ├── WorkflowNotFound                    no instance was ever started with that id
    ├── WorkflowEnded                       the instance has already ended
    ├── WorkflowFaulted                     value() of a faulted instance (.error: StepError)
    ├── WorkflowCancelled                   value() of a cancelled instance
    ├── WorkflowUpdateRejected              an update was refused on arrival; nothing was stored
    ├── WorkflowUpdateFailed                the body failed an update (.error: StepError)
    ├── WorkflowQueryRejected               no such query handler, or unusable args; nothing changed
    ├── WorkflowQueryFailed                 a query handler raised or overran (.error: StepError)
    ├── WorkflowStepFailed                  a step failed inside a body (.error: StepError)
    ├── NondeterminismError                 the body no longer matches its journal (parked)
    │   └── JournalMismatch                 internal: raised while replaying, becomes parking
    ├── ForeignAwaitError (also TypeError)  a body awaited something that is not a ctx step
    ├── AttemptTimedOut (also TimeoutError) an activity reports that its attempt ran out of time
    ├── RecordError                         a record cannot be used; always dead-lettered
    │   ├── DecodeError                     bytes that are not a known envelope
    │   ├── SchemaError                     a valid envelope whose type/payload is wrong
    │   │   └── LimitError (also ValueError)  an id, size, depth or reply_to breaks a limit
    │   ├── HandlerFailed                   decide, fold or a projection handler raised on it
    │   ├── KeyOfFailed                     an orchestration's key_of raised or gave no key
    │   ├── OrchestrationFailed             an orchestration raised on the event
    │   ├── CommandRefused                  internal: a record claims what only a worker may say
    │   └── ReplyUndeliverable              internal: its reply_to is a topic the worker may not write
    ├── BrokerError                         a Kafka error, translated at the boundary
    │   ├── RecordRejected                  Kafka refused a record itself (topic, size)
    │   ├── KafkaUnreachable (also TimeoutError)  internal: no broker answered a probe in time
    │   ├── TransactionAborted              internal: an exactly-once transaction was aborted
    │   └── Fenced                          internal: Kafka fenced an exactly-once worker
    ├── TokenProviderError (also RuntimeError)  internal: an OAUTHBEARER token provider failed
    ├── UsageError (also ValueError)    internal: a bad CLI argument (exit 2, one line)
    ├── ConsoleRefusal                  internal: the console's API refused a request (its HTTP status)
    ├── ReplayRefused (also ValueError) internal: a dead letter the console may not send back
    └── ReplyTimeout (also TimeoutError)    no reply within the timeout

    BaseException
    ├── QueryTimeout                        internal: stops a query handler that overran its bound
    └── ContinueAsNew                       internal: ``ctx.continue_as_new`` ends the run there (not an error)

A failure of user code on one record (a handler, ``key_of``, an orchestration) is a
``RecordError``: that record is dead-lettered under the class's name (``error_type``)
and the worker goes on with the next.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # core.workflow imports this module: a runtime import would be a cycle
    from tidings.core.workflow.failures import StepError


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
    """The workflow instance ended Faulted; ``error`` is its stored failure (with its causes)."""

    def __init__(self, message: str, error: StepError | None = None) -> None:
        self.error = error
        super().__init__(message)


class WorkflowCancelled(TidingsError):
    """The workflow instance ended Cancelled."""


class WorkflowUpdateRejected(TidingsError):
    """An update was refused on arrival (undeclared name, unreadable payload, its validator);
    the instance stored nothing."""


class WorkflowUpdateFailed(TidingsError):
    """The body answered an update with a failure (``call.fail``); ``error`` is the stored one."""

    def __init__(self, message: str, error: StepError | None = None) -> None:
        self.error = error
        super().__init__(message)


class WorkflowQueryRejected(TidingsError):
    """A query named no handler the instance registered, or its args were no JSON array."""


class WorkflowQueryFailed(TidingsError):
    """A query handler raised, overran its bound or returned no storable value; the instance
    is untouched. ``error`` says what (its kind ``deadline_exceeded`` for an overrun)."""

    def __init__(self, message: str, error: StepError | None = None) -> None:
        self.error = error
        super().__init__(message)


class QueryTimeout(BaseException):  # noqa: N818 - no Error: it is never an error a caller sees
    """Internal: raised inside a query handler that ran longer than its bound
    (``core/workflow/queries.py``). A BaseException, so a handler's ``except Exception``
    cannot swallow it and loop on; the caller gets ``WorkflowQueryFailed``."""


class WorkflowStepFailed(TidingsError):
    """A step failed inside a workflow body; ``error.kind`` says how."""

    def __init__(self, error: StepError) -> None:
        self.error = error
        super().__init__(str(error))


class NondeterminismError(TidingsError):
    """The body's requests no longer match its journal; the instance is parked."""


class JournalMismatch(NondeterminismError):
    """The body's request does not match the journal (raised only while replaying).

    Internal to the workflow interpreter, which catches it and parks the instance; it never
    reaches user code or a caller.
    """


class ForeignAwaitError(TidingsError, TypeError):
    """A workflow body awaited something other than a ``ctx`` step or ``@subroutine`` call.

    Its result could not be journaled or replayed (``asyncio.sleep``, a task, an HTTP call),
    so the interpreter throws this into the body at that ``await``; uncaught, it faults the
    instance.
    """


class AttemptTimedOut(TidingsError, TimeoutError):
    """Raise this in an activity to report that the attempt ran out of time.

    The attempt counts as timed out, not as failed with an error: the step's retry policy
    tries again (``retry_on`` is not asked) until its attempts or deadline are used up. A
    worker treats any ``TimeoutError`` an activity raises this way; ``WorkflowTestRuntime``
    only this one.
    """


class RecordError(TidingsError):
    """A record cannot be used. Agents dead-letter it and go on; never raised out of an agent."""


class CommandRefused(RecordError):
    """A record claims what only a worker may say (a fire ahead of the worker's clock, a
    start report with no start token of the run): refused, dead-lettered with the reason."""


class ReplyUndeliverable(RecordError):
    """A request's ``reply_to`` names a topic that does not exist or that the worker's
    principal may not write: the request is refused, dead-lettered with the reason, and
    nothing of it is done (a transaction with a refused write would abort as a whole)."""


class DecodeError(RecordError):
    """The bytes are not a record tidings can decode."""


class SchemaError(RecordError):
    """The envelope decoded, but its type is unknown or its payload is invalid for the type."""


class HandlerFailed(RecordError):
    """User code (``decide``, ``fold``, a projection handler) raised on a record.

    The record is dead-lettered with the exception in the reason, and the worker goes on.
    """


class KeyOfFailed(RecordError):
    """``key_of`` raised on an event or returned something other than a str or None."""


class OrchestrationFailed(RecordError):
    """An orchestration raised on an event, or gave a value that cannot be encoded.

    The event is dead-lettered and not journaled: the instance stays as it was.
    """


class LimitError(SchemaError, ValueError):
    """A value breaks one of the documented input limits (``tidings.core.limits``).

    An id that is empty, not valid UTF-8 or too long; a payload, metadata or JSON text
    that is too large or nested too deeply; a ``reply_to`` that is no valid topic name or
    names one of the app's own topics. In an agent it is a ``SchemaError`` (the record is
    dead-lettered); the client raises it before producing, and as a ``ValueError`` it is
    what callers that validate arguments expect.
    """


class BrokerError(TidingsError):
    """Kafka reported an error; the original is the ``__cause__``."""


class RecordRejected(BrokerError):
    """Kafka refused records of one send for reasons tied to them, not to the broker.

    An invalid or unknown topic (a hostile ``reply_to``) or a record larger than the
    producer's or the topic's size limit. The other records of the same send were produced
    (``delivered`` says where); retrying the refused ones would fail the same way, so the
    caller dead-letters or drops them instead of stopping.

    Attributes:
        rejections: ``(index in the send, topic, Kafka's reason)`` of each refused record.
        delivered: Per record of the send, where it landed, or None when it was refused.
    """

    def __init__(
        self, rejections: Iterable[tuple[int, str, str]], delivered: Iterable[Any] = ()
    ) -> None:
        self.rejections = tuple(rejections)
        self.delivered = list(delivered)
        # A refused topic may be a hostile name of any length: show only its start.
        described = "; ".join(
            f"record {index} to {topic[:120]!r}: {reason}" for index, topic, reason in self.rejections
        )
        super().__init__(f"Kafka refused {len(self.rejections)} record(s): {described}")


class KafkaUnreachable(BrokerError, TimeoutError):
    """No broker of the bootstrap servers answered a probe within its timeout (the CLI exits 69).

    Attributes:
        bootstrap: The bootstrap servers tried.
        timeout_s: How long the probe waited.
        detail: The last reason librdkafka gave (``Connection refused``, an SASL failure).
    """

    def __init__(self, bootstrap: str, timeout_s: float, detail: str) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.detail = detail
        super().__init__(f"cannot reach Kafka at {bootstrap} within {timeout_s:g} s ({detail})")


class TransactionAborted(BrokerError):
    """The transaction that carried a caller's records and offsets was aborted (exactly-once).

    Internal to the worker: nothing sent in it is visible to ``read_committed`` readers and
    its offsets were not committed, so the input is redone, as after a crash.
    """


class Fenced(BrokerError):
    """Kafka refused an exactly-once worker's writes: another member owns its partitions now.

    Internal to the worker: the consumer group moved on (a stale generation, an unknown
    member, a fenced static instance) or another producer took the transactional id over.
    Nothing of the transaction became visible; the worker gives its partitions up.
    """


class ReplyTimeout(TidingsError, TimeoutError):
    """No reply arrived within the timeout. The command may still be processed later."""


class TokenProviderError(TidingsError, RuntimeError):
    """The token provider failed or returned something that is not a token (one line)."""


class UsageError(TidingsError, ValueError):
    """A bad command-line argument: the command prints it in one line and exits 2."""


class ConsoleRefusal(TidingsError):
    """The console's API refused a request: its HTTP status and one line saying what to do.

    Internal to ``tidings console``: the server answers it as ``{"error": message}``.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ReplayRefused(TidingsError, ValueError):
    """A dead letter the console may not send back; the message says why (internal)."""


class ContinueAsNew(BaseException):
    """Raised by ``await ctx.continue_as_new(input)``: end this run and start the next with ``input``.

    Control flow, not an error: a BaseException, so a body's ``except Exception`` does not
    catch it (the run would go on). The interpreter takes it when it leaves the body.
    """

    def __init__(self, input: Any) -> None:
        super().__init__("the run continues as new")
        self.input = input
