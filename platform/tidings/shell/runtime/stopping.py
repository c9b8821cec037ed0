"""Stopping within a grace period: how long a stopping worker gives what it runs, and the hard stop.

On SIGTERM (or SIGINT) a worker has ``grace`` seconds, from the signal to its exit
(docs/operations.md, "Stopping"). It spends the first part, ``Grace.work_s``, letting the
activity attempts it runs end; the rest, at least ``RESERVE_S`` or half the grace, is kept
for leaving the group, committing and closing. A ``HardStop`` thread ends the process when
the whole grace has passed, whatever the stop is waiting for, so a supervisor's own kill
(Kubernetes' ``terminationGracePeriodSeconds``, the chart sets it above the grace) never has to.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Final

from .pipeline import EXIT_FAILED

log = logging.getLogger(__name__)

#: The grace unless told otherwise: under Kubernetes' default terminationGracePeriodSeconds (30).
DEFAULT_STOP_GRACE_S: Final = 25.0
#: Where ``tidings worker`` reads it when ``--stop-grace`` is not given.
STOP_GRACE_ENV: Final = "TIDINGS_STOP_GRACE"
#: The most of the grace kept for the stop itself (leave the group, commit, close): it
#: takes about 2.5 s, two of which Faust spends gathering its tasks.
RESERVE_S: Final = 5.0
_MIN_S, _MAX_S = 1.0, 3600.0


def check_stop_grace(seconds: float) -> float:
    """Return ``seconds`` if it is a stop grace, else raise ``ValueError`` saying what is."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or math.isnan(seconds) \
            or not _MIN_S <= seconds <= _MAX_S:
        raise ValueError(f"the stop grace must be a number of seconds from {_MIN_S:g} to {_MAX_S:g}, "
                         f"not {seconds!r}")
    return float(seconds)


def parse_stop_grace(text: str) -> float:
    """Return the stop grace ``text`` spells (``--stop-grace``, ``$TIDINGS_STOP_GRACE``).

    Raises:
        ValueError: it is no number, or out of range (one line, saying what is allowed).
    """
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"the stop grace must be a number of seconds from {_MIN_S:g} to {_MAX_S:g}, "
                         f"not {text!r}") from None
    return check_stop_grace(seconds)


@dataclass(frozen=True, slots=True)
class Grace:
    """One stop's budget, measured from when it began (``time.monotonic`` seconds)."""

    seconds: float
    began: float

    @property
    def work_s(self) -> float:
        """How long running attempts may go on: the grace less what the stop itself needs."""
        return self.seconds - min(RESERVE_S, self.seconds / 2)

    def work_left(self) -> float:
        return max(0.0, self.began + self.work_s - time.monotonic())

    def left(self) -> float:
        return max(0.0, self.began + self.seconds - time.monotonic())


class HardStop:
    """Ends the process with status 70 once a stop's grace has passed (a daemon thread).

    ``doing`` names what the stop is waiting for, for the line it logs. ``disarm`` once
    the stop is done (the process is about to exit on its own).
    """

    def __init__(self, grace: Grace) -> None:
        self.grace = grace
        self.doing = "stopping"
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tidings-hard-stop", daemon=True)
        self._thread.start()

    def disarm(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.grace.left()):
            return
        log.critical("the %g s stop grace ran out while %s; exiting with status %d: what was not "
                     "committed is delivered again after the restart", self.grace.seconds, self.doing,
                     EXIT_FAILED)
        logging.shutdown()
        os._exit(EXIT_FAILED)
