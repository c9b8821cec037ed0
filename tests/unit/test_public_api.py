"""The package root exports exactly the public API; changing it is a deliberate act."""

import importlib
import pkgutil
from types import ModuleType

import tidings
from tidings import errors


def test_the_root_exports_are_locked() -> None:
    assert tidings.__all__ == [
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
    for name in tidings.__all__:
        assert getattr(tidings, name) is not None


def _tidings_modules() -> list[ModuleType]:
    modules = [tidings]
    for info in pkgutil.walk_packages(tidings.__path__, "tidings."):
        modules.append(importlib.import_module(info.name))
    return modules


def test_every_exception_class_of_tidings_is_defined_in_the_errors_module() -> None:
    defined_elsewhere = sorted(
        f"{module.__name__}.{name}"
        for module in _tidings_modules()
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__
        and module is not errors
    )
    assert defined_elsewhere == []


def test_every_public_error_is_in_the_tree_exported_and_drawn() -> None:
    tree = errors.__doc__ or ""
    classes = {
        name: value for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    }
    # QueryTimeout is no Exception on purpose: a query handler's ``except Exception`` must not swallow it.
    # ContinueAsNew is control flow, a BaseException a body's ``except Exception`` must not catch.
    not_exceptions = {"QueryTimeout", "ContinueAsNew"}
    assert all(issubclass(cls, errors.TidingsError) for name, cls in classes.items() if name not in not_exceptions)
    assert tree.splitlines()[tree.splitlines().index("The tree::") + 2].strip() == "TidingsError"
    assert {name for name in classes if name != "TidingsError" and f"── {name} " not in tree} == set()
    # JournalMismatch never leaves the interpreter; the exactly-once errors never leave the worker;
    # KafkaUnreachable never leaves the CLI (exit 69) or the worker's wait for a broker.
    internal = {"JournalMismatch", "TransactionAborted", "Fenced", "KafkaUnreachable",
                "CommandRefused", "ReplyUndeliverable", "TokenProviderError", "UsageError",
                "ConsoleRefusal", "ReplayRefused", "QueryTimeout", "ContinueAsNew"}  # dead-lettered or said by the connection; never raised to callers
    assert {name for name in classes if name not in tidings.__all__} == internal


def test_a_failure_of_user_code_on_one_record_is_a_record_error() -> None:
    # Agents dead-letter every RecordError and go on; these must never stop a worker.
    for cls in (errors.HandlerFailed, errors.KeyOfFailed, errors.OrchestrationFailed):
        assert issubclass(cls, errors.RecordError)
    assert issubclass(errors.AttemptTimedOut, TimeoutError)
    assert issubclass(errors.JournalMismatch, errors.NondeterminismError)
