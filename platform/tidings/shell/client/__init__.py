"""The ``Client``: commands to aggregates and calls to workflows from outside a worker."""
