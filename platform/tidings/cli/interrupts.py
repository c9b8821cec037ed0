"""Ctrl-C for the commands that follow a topic until interrupted (``--follow``)."""

from __future__ import annotations

import signal


def interruptible() -> None:
    """Make SIGINT raise ``KeyboardInterrupt`` here, even if this process was started with it
    ignored: a shell without job control starts background commands that way (``cmd &`` in a
    script), and ``kill -INT`` is how such a follower is stopped."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
