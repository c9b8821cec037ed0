"""An app whose one aggregate can be told to stall inside ``decide``, for the fencing tests.

A worker subprocess imports ``tests.integration.stall_apps:app`` (named by ``TEST_APP_ID``).
``Stall`` prints a marker line to the worker's log and then blocks the worker's event loop
(``time.sleep``), so a test knows when a worker is in the middle of deciding it and can
freeze it there (SIGSTOP) to make a zombie: a worker that still believes it owns the
partition after the group gave it to another.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from tidings import App, Persist

#: The line a worker prints when it starts deciding a ``Stall`` (then the tag).
MARKER = "STALL-DECIDING"


class Stall(BaseModel):
    tag: str
    seconds: float


class Note(BaseModel):
    tag: str


class Stalled(BaseModel):
    tag: str
    worker: int  # the pid of the worker that decided it


class Noted(BaseModel):
    tag: str


def decide(command: Stall | Note, state: int) -> Persist[Stalled] | Persist[Noted]:
    match command:
        case Stall(tag=tag, seconds=seconds):
            print(f"{MARKER} {tag} pid={os.getpid()}", flush=True)
            time.sleep(seconds)  # blocks the loop on purpose: the decide of a stalled worker
            return Persist(Stalled(tag=tag, worker=os.getpid()))
        case Note(tag=tag):
            return Persist(Noted(tag=tag))
    raise TypeError(command)


def fold(event: Stalled | Noted, state: int) -> int:
    return state + 1


def build(app_id: str) -> App:
    """Return the stall App named ``app_id``: one aggregate on one partition, exactly-once."""
    app = App(app_id, partitions=1, command_timeout=60, processing_guarantee="exactly_once")
    app.aggregate("staller", 0, decide, fold, command=Stall | Note, event=Stalled | Noted)
    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
