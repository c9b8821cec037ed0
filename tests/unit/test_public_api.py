"""The package root exports exactly the public API; changing it is a deliberate act."""

import tidings


def test_the_root_exports_are_locked() -> None:
    assert tidings.__all__ == [
        "AggregateHandle",
        "AggregateVersionConflict",
        "App",
        "BrokerError",
        "Client",
        "DecodeError",
        "Defer",
        "DefinitionError",
        "Ignore",
        "Persist",
        "PersistAll",
        "ProjectedEvent",
        "ProjectionHandle",
        "RecordError",
        "ReplyTimeout",
        "SchemaError",
        "TidingsError",
        "View",
    ]
    for name in tidings.__all__:
        assert getattr(tidings, name) is not None
