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
