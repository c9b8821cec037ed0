"""The package root exports exactly the public API; changing it is a deliberate act."""

import tidings


def test_the_root_exports_are_locked() -> None:
    assert tidings.__all__ == [
        "AggregateHandle",
        "AggregateVersionConflict",
        "App",
        "Attempt",
        "BrokerError",
        "Cancelled",
        "Client",
        "DecodeError",
        "Defer",
        "DefinitionError",
        "ErrorKind",
        "Faulted",
        "Finished",
        "Ignore",
        "LimitError",
        "NondeterminismError",
        "Persist",
        "PersistAll",
        "ProjectedEvent",
        "ProjectionHandle",
        "RecordError",
        "RecordRejected",
        "ReplyTimeout",
        "Retry",
        "RetryPolicy",
        "SchemaError",
        "StepError",
        "TidingsError",
        "View",
        "WorkflowCancelled",
        "WorkflowContext",
        "WorkflowEnded",
        "WorkflowFaulted",
        "WorkflowHandle",
        "WorkflowNotFound",
        "WorkflowStatus",
        "WorkflowStepFailed",
        "subroutine",
    ]
    for name in tidings.__all__:
        assert getattr(tidings, name) is not None
