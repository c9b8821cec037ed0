"""What every hosted kind shares: the worker, its intake, hosting, owners, Kafka and metrics.

Nothing here knows a kind or the client: a kind plugs in through ``hosting.Hosted``.
"""
