"""The three-node rows of the bench: aggregate commands and one-activity workflows on a local
three-node KRaft cluster (replication factor 3, ``min.insync.replicas`` 2), printed next to the
single-node figures of the same run.

The cluster (``tidings.broker.LocalCluster``) runs on the same machine as the single broker did,
so the rows say what replication costs here (every record written three times, on one disk and
two cores), not what three machines would give.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from tidings.broker import LocalCluster

from . import aggregates, workflows
from .report import Row, versus


@dataclass(frozen=True)
class ClusterFigures:
    """What the three-node run measured."""

    bootstrap: str
    aggregates: aggregates.AggregateFigures
    workflows: workflows.WorkflowFigures


def run(
    aggregate_workload: aggregates.Workload,
    workflow_workload: workflows.Workload,
    *,
    workdir: Path,
    progress: Callable[[str], None],
) -> ClusterFigures:
    """Start a three-node cluster, measure aggregate commands and one-activity workflows on it
    (at least once), stop it."""
    with ExitStack() as own:
        cluster = LocalCluster(workdir / "cluster", on_progress=progress)
        progress("cluster: starting three nodes (replication 3, min.insync.replicas 2)")
        bootstrap = cluster.start()
        own.callback(cluster.stop)
        agg = aggregates.run(bootstrap, aggregate_workload, workdir=workdir,
                             stack=own, progress=progress)
        wf = workflows.run(bootstrap, workflow_workload, workdir=workdir, stack=own,
                           progress=progress, flows=False, brief=True)
        progress("cluster: stopping what it started")
    return ClusterFigures(bootstrap, agg, wf)


def rows(c: ClusterFigures, one_node_agg: aggregates.AggregateFigures,
         one_node_wf: workflows.WorkflowFigures | None) -> list[Row]:
    """The three-node figures, each next to the single node's of the same run."""
    a, w = c.aggregates, c.workflows
    pairs = [
        ("aggregate commands e2e, tidings client",
         a.workload.commands / a.client_s, one_node_agg.workload.commands / one_node_agg.client_s),
        ("aggregate commands e2e, worker fed by a raw producer",
         a.workload.commands / a.fed_s, one_node_agg.workload.commands / one_node_agg.fed_s),
        (f"one-activity workflows ({w.workload.one_activity:,} at once)",
         w.workload.one_activity / w.one_activity_s,
         None if one_node_wf is None else one_node_wf.workload.one_activity / one_node_wf.one_activity_s),
    ]
    return [Row(f"three nodes, RF 3, min ISR 2: {name}",
                f"{three:,.0f} /s" + ("" if one is None else f" ({versus(three, one, than='one node')})"),
                "—", "—" if one is None else f"{one:,.0f} /s one node")
            for name, three, one in pairs]
