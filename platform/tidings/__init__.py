"""tidings: event-sourced aggregates, sagas and durable workflows on Apache Kafka.

Start here. The package is split into a pure core and a thin shell:

- ``tidings.core``: pure decisions (aggregate decide/fold, records, partitioning); no I/O.
- ``tidings.codec``: Avro/JSON bytes <-> records; pure.
- ``tidings.coordination``: the reactive coordination model; pure.
- ``tidings.shell``: the App, Faust agents, RocksDB state, Kafka topics, the Client.
- ``tidings.broker``: a local single-node Apache Kafka for development and tests.
- ``tidings.cli``: the ``tidings`` command.

See docs/architecture.md for how a message flows through them.
"""

from .core.aggregate import Defer as Defer
from .core.aggregate import Ignore as Ignore
from .core.aggregate import Persist as Persist
from .core.aggregate import PersistAll as PersistAll
from .errors import AggregateVersionConflict as AggregateVersionConflict
from .errors import BrokerError as BrokerError
from .errors import DecodeError as DecodeError
from .errors import DefinitionError as DefinitionError
from .errors import RecordError as RecordError
from .errors import ReplyTimeout as ReplyTimeout
from .errors import SchemaError as SchemaError
from .errors import TidingsError as TidingsError
from .shell.agents.projection import ProjectedEvent as ProjectedEvent
from .shell.app import AggregateHandle as AggregateHandle
from .shell.app import App as App
from .shell.app import ProjectionHandle as ProjectionHandle
from .shell.client import Client as Client
from .shell.views import View as View

__all__ = [
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
