"""Reading how an App's instances stand, straight from its topics: what ``tidings list``,
``tidings describe``, ``tidings journal`` and the web console (``tidings.console``) share.

Nothing here prints or parses a command line: the CLI's modules and the console's API turn
these values into lines and JSON. No worker needs to run.
"""
