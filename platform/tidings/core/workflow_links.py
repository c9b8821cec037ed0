"""The inbox records that carry the child-workflow effects, as plain values.

Every effect of a child workflow (``StartChild``, ``CancelChild``, ``AckParent``,
``TellParent``) becomes one ``WorkflowInbox`` request to one instance of one workflow: the
child's start or cancel, or a report to the parent. The Faust agent
(``tidings.shell.kinds.workflow.children``) produces them to the inbox topics and the
in-memory ``WorkflowTestRuntime`` feeds them straight to the instances; both build them
here, so a report carries the same fields (the parent's token among them) in both.

Pure: no I/O.
"""

from __future__ import annotations

from tidings.core.workflow.child_records import AckParent, CancelChild, ChildEffect, ParentRef, StartChild, TellParent
from tidings.core.workflow.failures import StepError
from tidings.core.workflow_records import WorkflowInbox


def link_request(instance_id: str, effect: ChildEffect, now_ms: int) -> tuple[str, WorkflowInbox]:
    """The workflow whose inbox takes ``effect`` of instance ``instance_id``, and the request."""
    if isinstance(effect, StartChild):
        parent = effect.parent
        return effect.workflow, WorkflowInbox(
            f"start:{effect.child_id}", effect.child_id, "start", now_ms, payload=effect.input.encode(),
            parent_workflow=parent.workflow, parent_id=parent.instance_id, parent_path=parent.path,
            parent_token=parent.token,
        )
    if isinstance(effect, CancelChild):
        return effect.workflow, WorkflowInbox(f"cancel:{effect.child_id}", effect.child_id, "cancel", now_ms)
    if isinstance(effect, AckParent):
        return effect.parent.workflow, started_report(instance_id, effect.parent, effect.workflow, now_ms)
    if isinstance(effect, TellParent):
        return effect.parent.workflow, ended_report(
            instance_id, effect.parent, effect.workflow, now_ms, effect.outcome, effect.result, effect.error)
    raise TypeError(f"not a child effect: {effect!r}")


def started_report(instance_id: str, parent: ParentRef, workflow: str, now_ms: int) -> WorkflowInbox:
    """Child ``instance_id`` (of ``workflow``) tells ``parent`` it has stored its start."""
    return WorkflowInbox(
        f"child_started:{instance_id}", parent.instance_id, "child_started", now_ms,
        parent_path=parent.path, child_workflow=workflow, parent_token=parent.token,
    )


def ended_report(
    instance_id: str, parent: ParentRef, workflow: str, now_ms: int,
    outcome: str, result: str | None, error: StepError | None,
) -> WorkflowInbox:
    """Child ``instance_id`` (of ``workflow``) tells ``parent`` how it ended."""
    return WorkflowInbox(
        f"child_ended:{instance_id}", parent.instance_id, "child_ended", now_ms,
        payload=None if result is None else result.encode(),
        parent_path=parent.path, child_workflow=workflow, outcome=outcome, error=error, parent_token=parent.token,
    )
