"""The shop example: the seeds' first workflows, ``enrich`` and ``approve``, run by tidings."""
