"""tidings: event-sourced aggregates, sagas and durable workflows on Apache Kafka.

Start here. The package is split into a pure core and a thin shell:

- ``tidings.core``: pure decisions (aggregate decide/fold, records, partitioning); no I/O.
- ``tidings.codec``: Avro/JSON bytes <-> records; pure.
- ``tidings.coordination``: the reactive coordination model; pure.
- ``tidings.shell``: the App; the runtime every kind shares (worker, Kafka, RocksDB);
  the Client; one folder per kind.
- ``tidings.broker``: a local single-node Apache Kafka for development and tests.
- ``tidings.cli``: the ``tidings`` command.

See docs/architecture.md for how a message flows through them.
"""

from .core.workflow import Attempt as Attempt
from .core.workflow import Backoff as Backoff
from .core.workflow import Cancelled as Cancelled
from .core.workflow import ErrorKind as ErrorKind
from .core.workflow import Faulted as Faulted
from .core.workflow import Finished as Finished
from .core.workflow import Retry as Retry
from .core.workflow import RetryPolicy as RetryPolicy
from .core.workflow import StepCause as StepCause
from .core.workflow import StepError as StepError
from .core.workflow import WorkflowContext as WorkflowContext
from .core.workflow import WorkflowStatus as WorkflowStatus
from .core.workflow import subroutine as subroutine
from .core.aggregate import Defer as Defer
from .core.schedule import CatchUp as CatchUp
from .core.schedule import ScheduledRun as ScheduledRun
from .core.schedule import ScheduleRule as ScheduleRule
from .core.schedule import Weekday as Weekday
from .core.saga import Expect as Expect
from .core.saga import ExpectationExhausted as ExpectationExhausted
from .core.saga import Goto as Goto
from .core.saga import SagaEvent as SagaEvent
from .core.saga import Send as Send
from .core.saga import Stay as Stay
from .core.saga import Stop as Stop
from .core.aggregate import Ignore as Ignore
from .core.aggregate import Persist as Persist
from .core.aggregate import PersistAll as PersistAll
from .errors import AggregateVersionConflict as AggregateVersionConflict
from .errors import AttemptTimedOut as AttemptTimedOut
from .errors import BrokerError as BrokerError
from .errors import DecodeError as DecodeError
from .errors import DefinitionError as DefinitionError
from .errors import ForeignAwaitError as ForeignAwaitError
from .errors import HandlerFailed as HandlerFailed
from .errors import KeyOfFailed as KeyOfFailed
from .errors import LimitError as LimitError
from .errors import RecordError as RecordError
from .errors import RecordRejected as RecordRejected
from .errors import ReplyTimeout as ReplyTimeout
from .errors import SagaAlreadyStarted as SagaAlreadyStarted
from .errors import SchemaError as SchemaError
from .errors import NondeterminismError as NondeterminismError
from .errors import OrchestrationFailed as OrchestrationFailed
from .errors import TidingsError as TidingsError
from .errors import WorkflowCancelled as WorkflowCancelled
from .errors import WorkflowEnded as WorkflowEnded
from .errors import WorkflowFaulted as WorkflowFaulted
from .errors import WorkflowNotFound as WorkflowNotFound
from .errors import WorkflowStepFailed as WorkflowStepFailed
from .errors import WorkflowQueryFailed as WorkflowQueryFailed
from .errors import WorkflowQueryRejected as WorkflowQueryRejected
from .errors import WorkflowUpdateFailed as WorkflowUpdateFailed
from .errors import WorkflowUpdateRejected as WorkflowUpdateRejected
from .shell.kinds.projection.agent import ProjectedEvent as ProjectedEvent
from .shell.app import AggregateHandle as AggregateHandle
from .shell.app import App as App
from .shell.app import ProjectionHandle as ProjectionHandle
from .shell.client.client import Client as Client
from .shell.kinds.saga.handle import SagaHandle as SagaHandle
from .shell.kinds.saga.handle import SagaStatus as SagaStatus
from .shell.kinds.flow.definition import WorkflowFlow as WorkflowFlow
from .shell.kinds.projection.views import View as View
from .shell.kinds.workflow.handle import WorkflowHandle as WorkflowHandle

__all__ = [
    "AggregateHandle",
    "AggregateVersionConflict",
    "App",
    "Attempt",
    "AttemptTimedOut",
    "Backoff",
    "BrokerError",
    "Cancelled",
    "CatchUp",
    "Client",
    "DecodeError",
    "Defer",
    "DefinitionError",
    "ErrorKind",
    "Expect",
    "ExpectationExhausted",
    "Faulted",
    "Finished",
    "ForeignAwaitError",
    "Goto",
    "HandlerFailed",
    "Ignore",
    "KeyOfFailed",
    "LimitError",
    "NondeterminismError",
    "OrchestrationFailed",
    "Persist",
    "PersistAll",
    "ProjectedEvent",
    "ProjectionHandle",
    "RecordError",
    "RecordRejected",
    "ReplyTimeout",
    "Retry",
    "RetryPolicy",
    "SagaAlreadyStarted",
    "SagaEvent",
    "SagaHandle",
    "SagaStatus",
    "ScheduleRule",
    "ScheduledRun",
    "SchemaError",
    "Send",
    "Stay",
    "StepCause",
    "StepError",
    "Stop",
    "TidingsError",
    "View",
    "Weekday",
    "WorkflowCancelled",
    "WorkflowContext",
    "WorkflowEnded",
    "WorkflowFaulted",
    "WorkflowFlow",
    "WorkflowHandle",
    "WorkflowNotFound",
    "WorkflowStatus",
    "WorkflowStepFailed",
    "WorkflowQueryFailed",
    "WorkflowQueryRejected",
    "WorkflowUpdateFailed",
    "WorkflowUpdateRejected",
    "subroutine",
]
