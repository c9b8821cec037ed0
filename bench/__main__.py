"""``python -m bench`` (``make bench``): measure raw Kafka, then tidings, print one table.

The targets are issue 11's where it sets one, else SPEC §10's. The aggregate and workflow
rows are measured twice, at-least-once then exactly-once (``--no-exactly-once`` skips the
second), and every worker's own Prometheus metrics are scraped around each phase.

Starts its own local broker unless ``TIDINGS_BOOTSTRAP`` is set, and stops everything it
started, by PID, on the way out: normal exit, an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import gc
import os
import pstats
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from tidings.broker import KAFKA_VERSION, LocalBroker

from . import (aggregates, cluster, dedup, faust_stream, listing, peers, processes, raw_kafka, replay, sagas, schedules,
               workflows)
from .report import Progress, Row, latency, machine, rate, table

#: (raw confluent records, raw aiokafka records, aggregate workload) per mode.
DEFAULT = (300_000, 50_000, aggregates.Workload(
    accounts=1000, warm_up=5000, commands=30_000, in_flight=1000, pings=200))
QUICK = (100_000, 20_000, aggregates.Workload(
    accounts=500, warm_up=2000, commands=8000, in_flight=1000, pings=50))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="a ~2 min run with smaller counts (exactly-once rows included)")
    parser.add_argument("--commands", type=int, help="aggregate commands to measure")
    parser.add_argument("--in-flight", type=int, help="commands awaiting a reply at once")
    parser.add_argument("--no-aiokafka", action="store_true", help="skip the aiokafka reference")
    parser.add_argument("--no-workflows", action="store_true", help="skip the workflow rows")
    parser.add_argument("--no-exactly-once", action="store_true",
                        help="skip the exactly-once runs (aggregate and workflow rows measured again "
                        "with TIDINGS_PROCESSING_GUARANTEE=exactly_once)")
    parser.add_argument("--no-flows", action="store_true",
                        help="skip the flow throughput row (part of the workflow rows)")
    parser.add_argument("--no-cluster", action="store_true",
                        help="skip the three-node rows (a local three-node cluster, replication 3)")
    parser.add_argument("--no-processes", action="store_true",
                        help="skip the row of two worker processes against one (tidings worker --processes 2)")
    parser.add_argument("--no-sagas", action="store_true", help="skip the saga transfers row")
    parser.add_argument("--no-tracing", action="store_true",
                        help="skip the saga transfers row with traces on (OpenTelemetry)")
    parser.add_argument("--no-schedules", action="store_true",
                        help="skip the schedule dispatch lag and memory rows")
    parser.add_argument("--no-listing", action="store_true",
                        help="skip the tidings list rows (10,000 instances, no worker)")
    parser.add_argument("--no-replay", action="store_true",
                        help="skip the tidings replay rows (10,000 journals of ten steps, no worker)")
    parser.add_argument("--no-dedup", action="store_true",
                        help="skip the command-id rows (issue 16: 1,000,000 first verdicts held)")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="cProfile the worker; write its stats to FILE and print the top")
    parser.add_argument("--peers", type=Path, action="append", default=[], metavar="FILE",
                        help="a peer's results file, as ../shared/peers/*/run.sh writes it (repeat for "
                        "each peer): adds the rows 'tidings ÷ best peer' with that file's date and load")
    args = parser.parse_args(argv)
    try:
        peer_figures = [peers.read(path) for path in args.peers]
    except (OSError, ValueError) as exc:
        parser.error(f"--peers: {exc}")
    raw_records, aio_records, workload = QUICK if args.quick else DEFAULT
    if args.commands or args.in_flight:
        workload = aggregates.Workload(
            accounts=workload.accounts, warm_up=workload.warm_up,
            commands=args.commands or workload.commands,
            in_flight=args.in_flight or workload.in_flight, pings=workload.pings)

    # SIGTERM unwinds like Ctrl-C, so the finally blocks below stop what was started.
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    progress = Progress()
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    try:
        with ExitStack() as stack:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tidings-bench-")))
            bootstrap, started_broker = _broker(stack, workdir, progress)
            rows, notes = _measure(bootstrap, raw_records, aio_records, workload, args,
                                   workdir, stack, progress, peer_figures)
            progress("stopping what the bench started")
    except KeyboardInterrupt:
        print("\ninterrupted; everything the bench started was stopped", file=sys.stderr)
        return 130
    print()
    print(f"tidings bench ({'quick' if args.quick else 'default'} run, "
          f"{time.monotonic() - started:.0f} s)")
    for line in machine(KAFKA_VERSION if started_broker else "(external, not probed)",
                        bootstrap, started_broker, load_before):
        print(line)
    print()
    print(table(rows))
    for note in peers.notes(peer_figures):
        print(note)
    for note in notes:
        print(note)
    if args.profile is not None:
        print(f"\nworker profile (cProfile, main thread), top by own time; stats in {args.profile}")
        pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(25)
    return 0


def _broker(stack: ExitStack, workdir: Path, progress: Progress) -> tuple[str, bool]:
    configured = os.environ.get("TIDINGS_BOOTSTRAP")
    if configured:
        progress(f"using the broker at {configured} (TIDINGS_BOOTSTRAP)")
        return configured, False
    broker = LocalBroker(workdir / "kafka", on_progress=progress)
    bootstrap = broker.start()
    stack.callback(broker.stop)
    # Runs first: Kafka clients left in reference cycles (an App and its client) are freed
    # while the broker still answers, instead of logging refused connections at exit.
    stack.callback(gc.collect)
    progress(f"broker up at {bootstrap} (pid {broker.status().pid})")
    return bootstrap, True


def _measure(
    bootstrap: str,
    raw_records: int,
    aio_records: int,
    workload: aggregates.Workload,
    args: argparse.Namespace,
    workdir: Path,
    stack: ExitStack,
    progress: Progress,
    peer_figures: list[peers.PeerFigures],
) -> tuple[list[Row], list[str]]:
    raw = raw_kafka.confluent(bootstrap, raw_records, pings=workload.pings, progress=progress)
    aio = None if args.no_aiokafka else raw_kafka.aiokafka(bootstrap, aio_records, progress=progress)
    faust_records = max(workload.commands * 3, 20_000)
    faust_s = faust_stream.noop_agent_seconds(bootstrap, faust_records, workdir=workdir,
                                              progress=progress)
    # The measurement that chose the worker's intake over Faust's stream (docs/architecture.md).
    faust_take_s = faust_stream.noop_agent_seconds(bootstrap, faust_records, workdir=workdir,
                                                   progress=progress, take=True)
    intake_s = faust_stream.intake_noop_seconds(bootstrap, faust_records, progress=progress)
    agg = aggregates.run(bootstrap, workload, workdir=workdir, stack=stack, progress=progress,
                         profile=args.profile)
    agg_eos = None if args.no_exactly_once else aggregates.run(
        bootstrap, workload, workdir=workdir, stack=stack, progress=progress, exactly_once=True)
    wf_workload = workflows.QUICK if args.quick else workflows.DEFAULT
    wf = None if args.no_workflows else workflows.run(
        bootstrap, wf_workload, workdir=workdir, stack=stack, progress=progress,
        flows=not args.no_flows)
    wf_eos = None if args.no_workflows or args.no_exactly_once else workflows.run(
        bootstrap, wf_workload, workdir=workdir, stack=stack, progress=progress, exactly_once=True)
    procs = None if args.no_workflows or args.no_processes else processes.run(
        bootstrap, wf_workload.one_activity, workdir=workdir, stack=stack, progress=progress)
    saga = None if args.no_sagas else sagas.run(
        bootstrap, sagas.QUICK if args.quick else sagas.DEFAULT, workdir=workdir, stack=stack,
        progress=progress)
    traced = None if args.no_sagas or args.no_tracing else sagas.run(
        bootstrap, sagas.QUICK if args.quick else sagas.DEFAULT, workdir=workdir, stack=stack,
        progress=progress, tracing=True)
    sched = None if args.no_schedules else schedules.run(
        bootstrap, schedules.QUICK if args.quick else schedules.DEFAULT, workdir=workdir, stack=stack,
        progress=progress)
    dd = None if args.no_dedup else dedup.run(
        bootstrap, dedup.QUICK if args.quick else dedup.DEFAULT, workdir=workdir, stack=stack,
        progress=progress)
    listed = None if args.no_listing else listing.run(bootstrap, listing.DEFAULT_INSTANCES, progress=progress)
    replayed = None if args.no_replay else replay.run(
        bootstrap, 2_000 if args.quick else replay.DEFAULT_INSTANCES, workdir=workdir, progress=progress)
    # Last: its three JVMs would share the cores with every row above.
    three = None if args.no_cluster else cluster.run(
        workload, wf_workload, workdir=workdir, progress=progress)

    raw_e2e = rate(raw.records, raw.end_to_end_s or 0)
    faust_per_s = (faust_records - 2000) / faust_s
    rows = [
        Row("raw confluent-kafka produce (200 B, linger 5 ms, acks=all)",
            rate(raw.records, raw.produce_s)),
        Row("raw confluent-kafka consume", rate(raw.records, raw.consume_s)),
        Row("raw confluent-kafka produce → consume, end to end", raw_e2e),
        Row("raw confluent-kafka single record produce → consume, p50 / p99",
            latency(raw.round_trips_s)),
    ]
    if aio is not None:
        rows += [
            Row("raw aiokafka produce (Faust's transport)", rate(aio.records, aio.produce_s)),
            Row("raw aiokafka consume", rate(aio.records, aio.consume_s)),
        ]
    rows += [
        Row("Faust agent doing nothing (pipelined batches, manual acks)",
            rate(faust_records - 2000, faust_s), "—", raw_e2e),
        Row("Faust agent doing nothing, stream.take(2,000, within 5 ms)",
            rate(faust_records - 2000, faust_take_s), "—", raw_e2e),
        Row("tidings intake doing nothing (the worker's consumer, pipelined Feed)",
            rate(faust_records - 2000, intake_s), "—", raw_e2e),
        *aggregates.rows(agg, raw_e2e, rate(raw.records, raw.produce_s), raw.round_trips_s,
                         faust_per_s),
    ]
    if agg_eos is not None:
        rows += aggregates.exactly_once_rows(agg_eos, agg)
    if wf is not None:
        rows += workflows.rows(wf, raw_e2e, raw.round_trips_s)
    if wf is not None:
        rows += peers.rows(
            peer_figures, one_activity_per_s=wf.workload.one_activity / wf.one_activity_s,
            ten_steps_per_s=wf.workload.ten_steps * workflows.workflow_apps.STEPS / wf.ten_steps_s,
            idle_latencies_s=wf.latencies_s, raw_round_trips_s=raw.round_trips_s,
            recovery_s=wf.recovery_s, bodies_run_twice=wf.bodies_twice)
    if procs is not None:
        rows += processes.rows(procs)
    if wf is not None and wf_eos is not None:
        rows += workflows.exactly_once_rows(wf_eos, wf, raw.round_trips_s)
    if saga is not None:
        rows += sagas.rows(saga, raw_e2e)
    if saga is not None and traced is not None:
        rows += sagas.tracing_rows(traced, saga)
    if sched is not None:
        rows += schedules.rows(sched)
    if dd is not None:
        rows += dedup.rows(dd)
    if listed is not None:
        rows += listing.rows(listed)
    if replayed is not None:
        rows += replay.rows(replayed)
    if three is not None:
        rows += cluster.rows(three, agg, wf)
    notes = ["", *aggregates.notes(agg, raw.round_trips_s)]
    if agg_eos is not None:
        notes += aggregates.notes(agg_eos)
    notes.append(f"raw figures: {raw.records:,} records (confluent), "
                 f"{aio.records if aio else 0:,} (aiokafka), 8 partitions.")
    if wf is not None:
        notes += workflows.notes(wf, raw.round_trips_s)
    if wf_eos is not None:
        notes += workflows.notes(wf_eos)
    if agg_eos is not None or wf_eos is not None:
        notes.append("exactly-once rows: the same workloads on a fresh app whose worker runs with "
                     "TIDINGS_PROCESSING_GUARANTEE=exactly_once, measured right after the "
                     "at-least-once run; clients read read_committed.")
    if saga is not None:
        notes += sagas.notes(saga)
    if traced is not None:
        notes += sagas.tracing_notes(traced)
    if sched is not None:
        notes += schedules.notes(sched)
    if dd is not None:
        notes += dedup.notes(dd)
    if listed is not None:
        notes += listing.notes(listed)
    if replayed is not None:
        notes += replay.notes(replayed)
    if three is not None:
        notes.append("three-node rows: a local three-node KRaft cluster (three JVMs on this "
                     "machine) started after every other row, topics with replication 3 and "
                     "min.insync.replicas 2, the same workloads at least once; each next to the "
                     "single node's figure of this run.")
    return rows, notes


if __name__ == "__main__":
    sys.exit(main())
