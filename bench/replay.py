"""The replay checker over 10,000 journals of ten steps (issue 21 item 8: under 30 s).

Part of ``python -m bench`` (skip with ``--no-replay``); also runs alone::

    .venv/bin/python -m bench.replay [--instances N]

No worker runs: the bench writes the journal topic a worker would have written (its
encoder, keys and partitions), each instance's journal the one the pure core journals for
``ten-steps`` (nine activities done, waiting for a signal at step ten: 20 records, running,
so every one is replayed). Measured, each once: ``tidings.testing.replay`` from the topic
(read it whole, decode, replay every journal) with the same code (none would park) and
with the signal of step ten renamed (every instance parks at its last step: the whole
journal replayed before the mismatch); the same from an export file, and the whole
``tidings replay --file`` command as a user runs it (a new Python process).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tidings import App
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.workflow import JournalRecord, Retry, WorkflowContext
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.inspection.journals import read_topic_journals, write_export
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.topics import apply_topics
from tidings.testing import replay
from tidings.testing.workflows import WorkflowTestRuntime

from .report import Progress, Row, alone, print_report

PARTITIONS = 8
DEFAULT_INSTANCES = 10_000
STEPS = 10
ROOT = Path(__file__).resolve().parent.parent
#: Where ``python -m tidings.cli.main`` finds the bench app (``BENCH_REPLAY_APP`` names it).
APP_SPEC = "bench.replay:app"


def build(name: str, *, edited: bool = False) -> App:
    """The bench's app: ``ten-steps``, nine activities then a wait; ``edited`` renames the wait's signal."""
    app = App(name, partitions=PARTITIONS)

    @app.workflow("ten-steps")
    async def ten_steps(ctx: WorkflowContext, _: None) -> int:
        total = 0
        for n in range(STEPS - 1):
            total += await ctx.activity(f"step-{n + 1}", Retry.none, lambda attempt: 1, type=int)
        await ctx.wait_signal("renamed" if edited else "go")
        return total

    return app


app = build(os.environ["BENCH_REPLAY_APP"]) if "BENCH_REPLAY_APP" in os.environ else None


@dataclass(frozen=True, slots=True)
class ReplayFigures:
    instances: int
    records: int
    write_s: float
    read_s: float
    same_s: float
    edited_s: float
    found: int
    file_same_s: float
    file_edited_s: float
    command_s: float


def _journal(bench_app: App) -> list[JournalRecord]:
    """The journal one instance of ``ten-steps`` has once it waits at step ten (the pure core's own)."""
    runtime = WorkflowTestRuntime()
    handle = runtime.register(bench_app.workflow_handle("ten-steps").definition)
    handle.start("template", None)
    runtime.run_until_idle()
    return list(handle.journal("template"))


def _fill(connection: KafkaConnection, bench_app: App, instances: int) -> int:
    """Write every instance's journal to the topic as a worker would; return the records written."""
    template = _journal(bench_app)
    topic = bench_app.workflow_handle("ten-steps").topics.journal
    producer = connection.producer(**{"linger.ms": 5, "acks": "all", "queue.buffering.max.messages": 500_000})
    written = 0
    for n in range(instances):
        instance_id = f"order-{n:06d}"
        partition = partition_for(instance_id, PARTITIONS)
        for record in template:
            value, key = avro.encode(WorkflowJournalEntry(instance_id, record)), f"{instance_id}/{record.seq}".encode()
            while True:
                try:
                    producer.produce(topic, value, key, partition=partition)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            written += 1
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("the bench's journal records were not all acknowledged within 120 s")
    return written


def _timed(call: object) -> tuple[float, object]:
    started = time.perf_counter()
    result = call()  # type: ignore[operator]
    return time.perf_counter() - started, result


def run(bootstrap: str, instances: int, *, workdir: Path, progress: Progress) -> ReplayFigures:
    name = f"benchreplay{os.getpid()}x{int(time.time())}"
    same, edited = build(name), build(name, edited=True)
    connection = KafkaConnection.of(bootstrap)
    apply_topics(connection, same.topic_specs(), out=lambda line: None)
    progress(f"replay: writing {instances:,} journals of {STEPS} steps")
    write_s, records = _timed(lambda: _fill(connection, same, instances))
    topic = same.workflow_handle("ten-steps").topics.journal
    progress("replay: reading the journal topic whole")
    read_s, journals = _timed(lambda: read_topic_journals(connection, topic, group_prefix=f"{name}."))
    progress("replay: the same code, from the topic")
    same_s, report = _timed(lambda: replay(same, "ten-steps", bootstrap=connection))
    assert report.ok and report.checked == instances, report.lines()  # type: ignore[attr-defined]
    progress("replay: the signal of step ten renamed, from the topic")
    edited_s, found = _timed(lambda: replay(edited, "ten-steps", bootstrap=connection))
    assert len(found.findings) == instances  # type: ignore[attr-defined]
    export = workdir / "ten-steps.jsonl"
    with open(export, "w", encoding="utf-8") as out:
        write_export(out, name, "ten-steps", journals, int(time.time() * 1000))  # type: ignore[arg-type]
    progress("replay: from an export file")
    file_same_s, _ = _timed(lambda: replay(same, "ten-steps", file=export))
    file_edited_s, _ = _timed(lambda: replay(edited, "ten-steps", file=export))
    progress("replay: the whole tidings replay --file command, once")
    env = {**os.environ, "BENCH_REPLAY_APP": name,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command_s, done = _timed(lambda: subprocess.run(
        [sys.executable, "-m", "tidings.cli.main", "replay", APP_SPEC, "ten-steps", "--file", str(export)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300))
    if done.returncode != 0:  # type: ignore[attr-defined]
        raise RuntimeError(f"tidings replay failed: {done.stderr.strip()}")  # type: ignore[attr-defined]
    return ReplayFigures(instances, records, write_s, read_s, same_s, edited_s,  # type: ignore[arg-type]
                         len(found.findings), file_same_s, file_edited_s, command_s)  # type: ignore[attr-defined]


def rows(f: ReplayFigures) -> list[Row]:
    what = f"{f.instances:,} journals of {STEPS} steps ({f.records:,} records)"
    return [
        Row(f"tidings replay --from-topic, {what}, none would park", f"{f.same_s:.1f} s", "< 30 s",
            f"reading the topic alone {f.read_s:.1f} s"),
        Row(f"tidings replay --from-topic, {what}, step 10 edited: {f.found:,} found", f"{f.edited_s:.1f} s", "< 30 s"),
        Row(f"tidings replay --file, {what}, none would park / step 10 edited",
            f"{f.file_same_s:.1f} s / {f.file_edited_s:.1f} s", "< 30 s"),
        Row("tidings replay --file, the whole command (new process)", f"{f.command_s:.1f} s", "< 30 s"),
    ]


def notes(f: ReplayFigures) -> list[str]:
    return [f"replay: one workflow, {PARTITIONS} partitions, no worker; the journals written in {f.write_s:.1f} s; "
            "each replay reads every journal and replays it with the pure core's interpreter. "
            f"Load average after: {os.getloadavg()[0]:.2f}."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=DEFAULT_INSTANCES, help="journals to check")
    args = parser.parse_args(argv)
    with alone("tidings-bench-replay-") as (bootstrap, workdir, _, progress):
        figures = run(bootstrap, args.instances, workdir=workdir, progress=progress)
    print_report(rows(figures), notes(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
