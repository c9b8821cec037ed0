"""The shell: everything that talks to Kafka, Faust and RocksDB around the pure core.

- ``app.py``: the ``App`` registry and its configuration.
- ``runtime/``: what every kind shares: the worker, its intake, the hosting protocol, the
  partition owner, transactions, Kafka clients, metrics, dead letters, topics.
- ``client/``: the ``Client`` that sends commands and drives workflows from outside a worker.
- ``kinds/``: one folder per kind (aggregate, projection, workflow, saga, orchestration,
  schedule, flow), each with its declaration and handle, its agent and its store.

docs/architecture.md tells where each concern lives and how a message flows.
"""
