"""``replay(app, workflow, ...)``: would the code now park running instances? (a deploy check)

Every running instance's journal (from the workflow's journal topic, an export file written
by ``tidings journal --export``, or journals in memory) is replayed with the pure core's
interpreter against the workflow as ``app`` declares it now; no worker runs and nothing is
sent. The ``ReplayReport`` lists each instance that would park, with the first mismatch and
the ``ctx.version`` change that keeps it on the old steps. ``tidings replay`` is this
function on the command line. docs/testing.md, "Replay before a deploy".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ..core.workflow.journal import JournalRecord
from ..core.workflow.replay_check import Progress, ReplayReport, check_journals
from ..inspection.journals import MAX_LINE, Journals, read_export, read_topic_journals
from ..shell.kinds.workflow.handle import WorkflowHandle, workflow_named
from ..shell.runtime.connection import KafkaConnection

__all__ = ["ReplayReport", "replay", "export_lines"]


def replay(
    app: Any,
    workflow: str,
    *,
    file: str | Path | None = None,
    journals: Mapping[str, Sequence[JournalRecord]] | None = None,
    bootstrap: str | KafkaConnection | None = None,
    limit: int | None = None,
    timeout: float = 30.0,
    now: int | None = None,
    progress: Progress | None = None,
    on_read: Callable[[Journals], None] | None = None,
) -> ReplayReport:
    """Replay every running instance's journal of ``workflow`` against ``app``'s code now.

    The journals come from ``journals`` (instance id -> records, e.g. from
    ``WorkflowTestRuntime``), else from ``file`` (an export), else from the journal topic.

    Args:
        app: The App, with the code to deploy.
        workflow: The workflow's name.
        file: An export file (``tidings journal MODULE:APP WORKFLOW --export FILE``).
        journals: Journals in memory, by instance id.
        bootstrap: Where the journal topic is (default: the app's Kafka).
        limit: Check at most this many running instances (None: all).
        timeout: Seconds to wait for Kafka.
        now: The time the replays run at (ms since the epoch; default now).
        progress: Called with (instances done, instances read) every 1,000 instances.
        on_read: Called with what was read, before anything is replayed.

    Returns:
        The report: ``report.ok`` when no instance would park or fault and every record was read.

    Raises:
        LookupError: ``app`` declares no workflow ``workflow``.
        ValueError: ``limit`` is below 1, or ``file`` is not an export of ``workflow`` (its header names
            another workflow or format).
        OSError: ``file`` cannot be read.
        BrokerError: the journal topic is missing, or Kafka did not answer within ``timeout``.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be 1 or more, got {limit}")
    handle: WorkflowHandle = workflow_named(app, workflow)
    if journals is not None:
        read = Journals()
        for instance_id, records in journals.items():
            for record in records:
                read.keep(instance_id, record)
    elif file is not None:
        with open(file, encoding="utf-8", errors="replace", newline="\n") as opened:
            read = read_export(export_lines(opened), workflow, source=str(file))
    else:
        kafka = bootstrap if isinstance(bootstrap, KafkaConnection) else app.connection_for(bootstrap)
        read = read_topic_journals(kafka, handle.topics.journal, group_prefix=f"{app.name}.", timeout=timeout)
    if on_read is not None:
        on_read(read)
    at = int(time.time() * 1000) if now is None else now
    return check_journals(handle.definition, read.items(), at, limit=limit, errors=[*read.errors, *read.skipped()],
                          progress=progress, total=len(read))


def export_lines(file: IO[str]) -> Iterable[str]:
    """The lines of an export file, a line longer than ``MAX_LINE`` given as its first ``MAX_LINE + 1``
    characters (which the reader refuses) without reading the rest of it into memory."""
    while True:
        line = file.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith("\n"):
            while True:  # skip to the end of the over-long line
                rest = file.readline(MAX_LINE)
                if not rest or rest.endswith("\n"):
                    break
        yield line
