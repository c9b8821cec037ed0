"""The pure workflow core: context, step requests, journal, interpreter, retry policies.

No Kafka, Faust or RocksDB here. A shell (the Faust agent, or ``tidings.testing``'s
in-memory runtime) feeds ``WorkflowInstance.advance`` one inbox message at a time, journals
the returned records, then carries out the returned effects; after a restart it rebuilds
instances with ``replay``. See ``docs/workflows.md``.
"""

from tidings.core.workflow.context import WorkflowContext
from tidings.core.workflow.definition import WorkflowBody, WorkflowDefinition, define_workflow
from tidings.core.workflow.effects import (
    ArmTimer,
    Attempt,
    CancelActivity,
    Cancellation,
    CancelTimer,
    DropRun,
    Effect,
    PublishOutcome,
    ReportParked,
    RunActivity,
)
from tidings.core.workflow.failures import ErrorKind, StepCause, StepError
from tidings.core.workflow.inbox import ActivityResult, Cancel, InboxMessage, Signal, Start, TimerFired
from tidings.core.workflow.interpreter import Decision, Entropy, WorkflowInstance, replay
from tidings.core.workflow.continuing import ContinueAsNew
from tidings.core.workflow.journal import (
    CancelRequested,
    ContinuedAsNew,
    Ended,
    JournalRecord,
    SignalReceived,
    Started,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepKind,
    StepStarted,
    VersionMarker,
    record_from_json,
    record_to_json,
    record_type_name,
)
from tidings.core.workflow.outcomes import Cancelled, Faulted, Finished, Outcome, WorkflowStatus
from tidings.core.workflow.requests import StepRequest, subroutine
from tidings.core.workflow.retry import Backoff, GiveUp, Retry, RetryAt, RetryDecision, RetryPolicy
from tidings.core.workflow.updates import AnswerUpdate, Update, UpdateCall, UpdateDeclaration

__all__ = [
    "ActivityResult",
    "AnswerUpdate",
    "ArmTimer",
    "Attempt",
    "Backoff",
    "Cancel",
    "CancelActivity",
    "CancelRequested",
    "CancelTimer",
    "Cancellation",
    "Cancelled",
    "ContinueAsNew",
    "ContinuedAsNew",
    "Decision",
    "DropRun",
    "Effect",
    "Ended",
    "Entropy",
    "ErrorKind",
    "Faulted",
    "Finished",
    "GiveUp",
    "InboxMessage",
    "JournalRecord",
    "Outcome",
    "PublishOutcome",
    "ReportParked",
    "Retry",
    "RetryAt",
    "RetryDecision",
    "RetryPolicy",
    "RunActivity",
    "Signal",
    "SignalReceived",
    "Start",
    "Started",
    "StepAttemptFailed",
    "StepCause",
    "StepCompleted",
    "StepError",
    "StepFailed",
    "StepKind",
    "StepRequest",
    "StepStarted",
    "TimerFired",
    "Update",
    "UpdateCall",
    "UpdateDeclaration",
    "VersionMarker",
    "WorkflowBody",
    "WorkflowContext",
    "WorkflowDefinition",
    "WorkflowInstance",
    "WorkflowStatus",
    "define_workflow",
    "record_from_json",
    "record_to_json",
    "record_type_name",
    "replay",
    "subroutine",
]
