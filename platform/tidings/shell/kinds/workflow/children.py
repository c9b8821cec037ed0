"""Child workflows in the workflow agent: the core's child effects as inbox records.

Every effect of a child workflow is one ``WorkflowInbox`` record on some workflow's inbox
topic, keyed (and partitioned, ``murmur2``) by the instance it is about, so it lands on
the partition that owns that instance, whichever worker owns it:

=============  =======================  ================  ==============================
effect         topic                    instance (key)    kind
=============  =======================  ================  ==============================
StartChild     the child's inbox        the child's id    ``start`` naming the parent
CancelChild    the child's inbox        the child's id    ``cancel``
AckParent      the parent's inbox       the parent's id   ``child_started``
TellParent     the parent's inbox       the parent's id   ``child_ended`` with the outcome
=============  =======================  ================  ==============================

The agent sends them with its dead letters: produced and acknowledged after the commit's
journal records and before RocksDB is written, so a crash before they are acknowledged
leaves the commit unstored in RocksDB and its records are caught up again from the
journal (a child's end is reported again from ``restored_end``; a running child is
replayed and acknowledges again). A repeat is harmless: the start of an existing child
changes nothing (``repeated_start`` acknowledges it again, which a restarted parent
waits for) and a parent ignores a report it already has.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Final

from ....codec import avro
from ....core.partitioning import partition_for
from ....core.workflow import Ended, Started, StepError, WorkflowInstance
from ....core.workflow.child_records import AckParent, CancelChild, ParentRef, StartChild, TellParent
from ....core.workflow.children import parent_of_request, parent_of_started
from ....core.workflow.inbox_rules import StoredEnd, outcome_fields_of
from ....core.workflow_links import ended_report, link_request, started_report
from ....core.workflow_records import WorkflowInbox
from ....errors import RecordRejected
from ...runtime.io import Outgoing, Publisher
from ...runtime.tracing import Carrier, headers_of
from .store import WorkflowStore

log = logging.getLogger(__name__)

CHILD_EFFECTS: Final = (StartChild, CancelChild, AckParent, TellParent)
"""The core's effects this module turns into records."""


class ChildLinks:
    """Builds the inbox records that link parents and children of one app's workflows."""

    def __init__(self, app: str, partitions: int) -> None:
        self.app = app
        self.partitions = partitions

    @classmethod
    def of_inbox(cls, inbox: str, workflow: str, partitions: int) -> ChildLinks:
        """The links of the app whose workflow ``workflow`` has the inbox topic ``inbox``."""
        suffix = f".workflow.{workflow}.inbox"
        if not inbox.endswith(suffix):
            raise ValueError(f"{inbox!r} is not the inbox topic of workflow {workflow!r}")
        return cls(inbox[: -len(suffix)], partitions)

    def inbox(self, workflow: str) -> str:
        """The inbox topic of ``workflow`` in this app (``topics.topic_name``'s format)."""
        return f"{self.app}.workflow.{workflow}.inbox"

    def outgoing(self, instance_id: str, effect: Any, now_ms: int, trace: Carrier | None = None) -> Outgoing:
        """The record that carries out ``effect`` of instance ``instance_id``.

        ``trace``: the parent run's trace context, which a child's start carries, so the
        child's run is a span of the parent's trace (docs/tracing.md)."""
        workflow, request = link_request(instance_id, effect, now_ms)
        if trace and isinstance(effect, StartChild):
            request = replace(request, metadata={**request.metadata, **trace})
            key = request.instance_id
            return Outgoing(self.inbox(workflow), key.encode(), avro.encode(request),
                            partition_for(key, self.partitions), headers_of(trace))
        return self._record(workflow, request)

    async def send(self, publisher: Publisher, records: list[Outgoing]) -> None:
        """Produce ``records`` and wait for their acks; a record Kafka refuses is dropped with a warning.

        The topics are named by what instances stored, which any producer may have
        written (a start naming a parent workflow that does not exist): such a record
        must not stop the worker. Any other Kafka failure raises (the worker restarts).
        """
        try:
            await publisher.send(records)
        except RecordRejected as exc:
            log.warning("a record linking parent and child workflows was refused, dropped: %s", exc)

    def repeated_start(
        self, request: WorkflowInbox, known: WorkflowInstance | StoredEnd, store: WorkflowStore, workflow: str,
        now_ms: int,
    ) -> list[Outgoing]:
        """A child's start for an instance that exists: acknowledge again, and report its end if it ended.

        A parent restarted before it stored the acknowledgement sends the start again and
        waits for it. Only the instance's own parent gets an answer: an instance started
        by someone else under the same id is no child of the asker (logged).
        """
        asker = parent_of_request(request)
        if not isinstance(asker, ParentRef):
            return []
        instance_id = request.instance_id
        if isinstance(known, WorkflowInstance):
            parent = known._parent  # noqa: SLF001 - the core keeps it; the shell only reads it
            outcome = None
            if known.outcome is not None:
                fields = outcome_fields_of(known.outcome, known.definition)
                error = fields["error"]
                outcome = (fields["outcome"], fields["result"], None if error is None else StepError.from_json(error))
        else:
            records = store.journal(instance_id)
            first = records[0] if records else None
            parent = (parent_of_started(first.parent_workflow, first.parent_id, first.parent_path, first.parent_token)
                      if isinstance(first, Started) else None)
            outcome = (known.outcome, known.result, known.error) if known.outcome is not None else None
        if parent != asker:
            log.warning("workflow %s: %r was started before, not as the child of %s %r at step %s with the "
                        "token that step drew (someone else started that id first); that step waits in vain",
                        workflow, instance_id, asker.workflow, asker.instance_id, asker.path)
            return []
        records_out = [self._ack(instance_id, asker, workflow, now_ms)]
        if outcome is not None:
            records_out.append(self._tell(instance_id, asker, workflow, now_ms, *outcome))
        return records_out

    def restored_end(
        self, instance_id: str, record: Ended, earlier: list[tuple[str, Any]], store: WorkflowStore, workflow: str,
    ) -> list[Outgoing]:
        """A child's end caught up from the journal: report it again (its report may have been lost).

        ``earlier`` are the records of the same catch-up not yet in ``store``.
        """
        first = next((r for i, r in earlier if i == instance_id and isinstance(r, Started)), None)
        if first is None:
            stored = store.journal(instance_id)
            first = stored[0] if stored and isinstance(stored[0], Started) else None
        if first is None or first.parent_workflow is None:
            return []
        parent = parent_of_started(first.parent_workflow, first.parent_id, first.parent_path, first.parent_token)
        if parent is None:
            return []
        return [self._tell(instance_id, parent, workflow, record.at, record.outcome, record.result, record.error)]

    def _ack(self, instance_id: str, parent: ParentRef, workflow: str, now_ms: int) -> Outgoing:
        return self._record(parent.workflow, started_report(instance_id, parent, workflow, now_ms))

    def _tell(
        self, instance_id: str, parent: ParentRef, workflow: str, now_ms: int,
        outcome: str, result: str | None, error: StepError | None,
    ) -> Outgoing:
        return self._record(parent.workflow, ended_report(instance_id, parent, workflow, now_ms, outcome, result, error))

    def _record(self, workflow: str, request: WorkflowInbox) -> Outgoing:
        key = request.instance_id
        return Outgoing(self.inbox(workflow), key.encode(), avro.encode(request), partition_for(key, self.partitions))
