"""Command ids kept by time (issue 16): what remembering first verdicts costs.

Part of ``python -m bench`` (skip with ``--no-dedup``); also runs alone::

    .venv/bin/python -m bench.dedup [--quick] [--no-e2e]

which uses ``TIDINGS_BOOTSTRAP`` when set, else starts a local broker (``--no-e2e`` needs
none).

**The store alone** (in this process, no broker): an ``AggregateStore`` of the bank's
``account`` definition is filled with N first verdicts across K aggregate ids, each a real
``ReplyEnvelope`` (accepted, one ``Deposited`` event) encoded with ``codec.avro``, written
in batches of 2,000 as the worker writes them. Measured: the time to fill; the store
directory's size after ``close`` (which flushes the memtable); this process's RSS growth
(``VmRSS``) after the fill and after reopening and looking ids up; the median cost of one
``reply()`` for an id it holds and for one it does not, over random ids; ``expire`` of the
oldest verdicts in calls of 10,000 as the agent makes them, and one more call with nothing
due right after (it has to step over what the deletes left behind). Then the same with
N' verdicts on ONE aggregate id. Command ids are derived from their index (md5 hex, the
shape of the uuid4 hex ids the client sends), so no list of a million ids sits in memory.

**End to end through a worker** (``bench.aggregates``' fed-by-raw-producer run: command
envelopes pre-encoded, produced raw, replies counted): (a) a fresh worker, (b) a worker whose
store already holds the store-alone phase's N verdicts over the bench's accounts (its
directory is copied to the worker's store path before the worker starts, opened with the
worker's definition name, state type and sagas, so the fingerprint matches), (c) a worker
whose store holds N' verdicts on ``account-0``, fed commands for that account only; its
baseline (a') is a fresh worker fed the same commands for one account. After (b) and (c)
the bench reopens the worker's store and checks that the seeded ids are still there.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

from examples.bank import account
from tidings.shell.runtime.connection import KafkaConnection
from tidings import App
from tidings.codec import avro
from tidings.codec.payloads import payload_of
from tidings.core.aggregate import event_id_for
from tidings.core.records import EventEnvelope, ReplyEnvelope
from tidings.shell.kinds.aggregate.store import AggregateStore
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.processes import WorkerProcess

from . import aggregates, apps
from .aggregates import TIMEOUT_S, Workload
from .report import Row, alone, print_report, rate

ROOT = Path(__file__).resolve().parent.parent
BATCH = 2000  # verdicts per write: the worker's batches are at most this many commands
EXPIRE_LIMIT = 10_000  # what AggregateAgent._expire removes per call (expire's default)
DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class DedupWorkload:
    """How many verdicts, lookups and commands."""

    verdicts: int  # held across the store
    aggregates: int  # over this many aggregate ids (the bench's accounts: account-0..)
    hot: int  # held on one aggregate id
    lookups: int  # per lookup figure (hit, miss)
    expired: int  # oldest verdicts removed by expire
    e2e: Workload  # the fed-by-raw-producer run (accounts, warm-up, commands)
    hot_commands: int  # commands for the one-account runs


DEFAULT = DedupWorkload(
    verdicts=1_000_000, aggregates=1000, hot=100_000, lookups=100_000, expired=100_000,
    e2e=Workload(accounts=1000, warm_up=5000, commands=30_000, in_flight=1000, pings=0),
    hot_commands=10_000)
QUICK = DedupWorkload(
    verdicts=200_000, aggregates=500, hot=20_000, lookups=100_000, expired=20_000,
    e2e=Workload(accounts=500, warm_up=2000, commands=8000, in_flight=1000, pings=0),
    hot_commands=4000)


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """One store-alone measurement (seconds, bytes)."""

    verdicts: int
    aggregates: int
    fill_s: float
    disk_bytes: int
    sst_bytes: int
    reply_bytes: float  # mean encoded reply size
    rss_fill: int  # VmRSS growth after the fill (before close)
    rss_lookups: int  # VmRSS growth, from before the store opened, after reopen + lookups
    hit_s: float  # median of one reply() that finds its verdict
    miss_s: float  # median of one reply() that finds none
    expired: int
    expire_s: float  # all the calls that removed ``expired``
    expire_idle_s: float  # one more call with nothing due, right after


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """One fed-by-raw-producer run (seconds, bytes)."""

    label: str
    commands: int
    accounts: int
    fed_s: float
    rss: int  # the worker's VmRSS after the run
    held_before: int  # verdicts in the store when the worker started
    held_after: int  # verdicts in the store after it stopped (-1: not checked)
    seeded_found: bool  # sampled seeded ids still answered after the run


@dataclass(frozen=True, slots=True)
class DedupFigures:
    workload: DedupWorkload
    spread: StoreFigures
    hot: StoreFigures
    runs: list[WorkerRun]
    load: tuple[float, float, float]


# -- the store alone ------------------------------------------------------------------


def command_id(n: int, salt: str = "") -> str:
    """The n-th seeded command id: 32 hex digits, like the client's uuid4 hex."""
    return hashlib.md5(f"{salt}{n}".encode()).hexdigest()


def _reply(aggregate_id: str, cid: str, version: int, at_ms: int, payload: bytes,
           event_type: str) -> bytes:
    event = EventEnvelope(event_id=event_id_for(cid, 0), command_id=cid, correlation_id=cid,
                          aggregate_id=aggregate_id, version=version, type=event_type,
                          payload=payload, timestamp_ms=at_ms)
    return avro.encode(ReplyEnvelope(command_id=cid, correlation_id=cid, aggregate_id=aggregate_id,
                                     status="accepted", version=version, timestamp_ms=at_ms,
                                     events=(event,)))


def _open(path: Path) -> AggregateStore[account.AccountState]:
    """The store as the bench worker opens it (``AggregateHandle.open``, bench.apps)."""
    (handle,) = apps.build("bench").aggregates
    return AggregateStore(path, type(handle.definition.initial), definition_name=handle.name,
                          sagas=[s.name for s in handle.app.sagas_of(handle.name)],
                          write_buffer_bytes=handle.write_buffer_bytes)


def _ids(count: int, aggregates_: int, hot: bool) -> Callable[[int], tuple[str, str]]:
    salt = "hot" if hot else ""

    def key(n: int) -> tuple[str, str]:
        return (f"account-{0 if hot else n % aggregates_}", command_id(n, salt))

    return key


def _fill(store: AggregateStore[account.AccountState], count: int, key: Callable[[int], tuple[str, str]],
          base_ms: int) -> None:
    """Write ``count`` verdicts, the n-th decided at ``base_ms + n``, in batches of 2,000."""
    event_type, payload = payload_of(account.Deposited(amount=Decimal(1)))
    for start in range(0, count, BATCH):
        verdicts = {}
        for n in range(start, min(start + BATCH, count)):
            aggregate_id, cid = key(n)
            at = base_ms + n
            verdicts[(aggregate_id, cid)] = (_reply(aggregate_id, cid, n + 2, at, payload,
                                                    event_type), at)
        store.write((), verdicts, {})


def _rss() -> int:
    """This process's resident set, bytes."""
    return _vmrss(Path("/proc/self/status"))


def _vmrss(status: Path) -> int:
    try:
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 if status.name == "self" else -1


def _du(path: Path) -> tuple[int, int]:
    """(apparent bytes of the directory, bytes of its SST files)."""
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    sst = sum(f.stat().st_size for f in path.iterdir() if f.suffix == ".sst")
    return int(out.stdout.split()[0]), sst


def _median_lookup(store: AggregateStore[account.AccountState], keys: list[tuple[str, str]],
                   expect: bool) -> float:
    """Median seconds of one ``reply()`` over ``keys`` (each timed on its own)."""
    clock = time.perf_counter_ns
    samples = []
    for aggregate_id, cid in keys:
        began = clock()
        found = store.reply(aggregate_id, cid)
        samples.append(clock() - began)
        if (found is not None) != expect:
            raise RuntimeError(f"lookup of {aggregate_id}/{cid}: expected "
                               f"{'a hit' if expect else 'a miss'}")
    # Subtract the cost of the two clock reads themselves.
    overhead = statistics.median(-(clock() - clock()) for _ in range(10_000))
    return max(statistics.median(samples) - overhead, 0) / 1e9


def measure_store(path: Path, w: DedupWorkload, *, hot: bool, progress: Callable[[str], None],
                  keep: Path | None = None) -> StoreFigures:
    """Fill a store at ``path``, close it, copy it to ``keep`` if given, then look up and expire."""
    count = w.hot if hot else w.verdicts
    aggregates_ = 1 if hot else w.aggregates
    key = _ids(count, aggregates_, hot)
    where = "on account-0" if hot else f"across {aggregates_:,} aggregate ids"
    base_ms = int(time.time() * 1000) - DAY_MS  # inside the retention: nothing expires by itself
    rss0 = _rss()
    store = _open(path)
    progress(f"dedup: filling a store with {count:,} verdicts {where}, {BATCH:,} per write")
    began = time.perf_counter()
    _fill(store, count, key, base_ms)
    fill_s = time.perf_counter() - began
    rss_fill = _rss() - rss0
    store.close()
    disk, sst = _du(path)
    sample = key(0)
    reply_bytes = len(_reply(sample[0], sample[1], 2, base_ms, *reversed(
        payload_of(account.Deposited(amount=Decimal(1))))))
    progress(f"dedup: filled in {fill_s:.1f} s; {disk / 1e6:,.1f} MB on disk "
             f"({disk / count:,.0f} B per verdict), RSS +{rss_fill / 1e6:,.1f} MB")
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(path, keep)

    store = _open(path)
    if store.verdict_count() != count:
        raise RuntimeError(f"the reopened store holds {store.verdict_count():,} verdicts, not {count:,}")
    rng = random.Random(16)
    hits = [key(rng.randrange(count)) for _ in range(w.lookups)]
    misses = [(f"account-{rng.randrange(aggregates_)}", uuid.UUID(int=rng.getrandbits(128)).hex)
              for _ in range(w.lookups)]
    progress(f"dedup: {w.lookups:,} random lookups that hit, {w.lookups:,} that miss")
    hit_s = _median_lookup(store, hits, expect=True)
    miss_s = _median_lookup(store, misses, expect=False)
    del hits, misses
    rss_lookups = _rss() - rss0

    expired = min(w.expired, count // 2)  # the newer half stays, to check what is left
    progress(f"dedup: expiring the oldest {expired:,} verdicts, {EXPIRE_LIMIT:,} per call")
    began = time.perf_counter()
    removed = 0
    while removed < expired:
        got = store.expire(base_ms + expired, limit=EXPIRE_LIMIT)
        if not got:
            break
        removed += got
    expire_s = time.perf_counter() - began
    if removed != expired:
        raise RuntimeError(f"expire removed {removed:,} verdicts, not {expired:,}")
    began = time.perf_counter()
    store.expire(base_ms + expired, limit=EXPIRE_LIMIT)
    expire_idle_s = time.perf_counter() - began
    if store.reply(*key(0)) is not None or store.reply(*key(expired)) is None:
        raise RuntimeError("expire removed the wrong verdicts")
    store.close()
    shutil.rmtree(path)
    progress(f"dedup: hit {hit_s * 1e6:.1f} µs, miss {miss_s * 1e6:.1f} µs, expire "
             f"{expire_s:.2f} s ({expire_s / expired * 1e6:.1f} µs per verdict), "
             f"then one call with nothing due {expire_idle_s * 1e3:.1f} ms")
    return StoreFigures(count, aggregates_, fill_s, disk, sst, reply_bytes, rss_fill, rss_lookups,
                        hit_s, miss_s, expired, expire_s, expire_idle_s)


# -- end to end ----------------------------------------------------------------------


def _worker_run(
    bootstrap: str, workdir: Path, stack: ExitStack, progress: Callable[[str], None], *,
    label: str, seed: Path | None, runs: list[tuple[str, Workload]],
    check: Callable[[AggregateStore[account.AccountState]], bool] | None = None,
) -> list[WorkerRun]:
    """Start a worker (its store seeded from ``seed``), run each fed workload, stop it."""
    app_id = f"benchdedup{uuid.uuid4().hex[:10]}"
    app = apps.build(app_id)
    (handle,) = app.aggregates
    apply_topics(KafkaConnection.of(bootstrap), app.topic_specs(), out=lambda _: None)
    data_dir = workdir / app_id
    # Runtime.store_path: {data dir}/stores/{kind}/{name}.
    store_path = data_dir / "stores" / handle.kind / handle.name
    held_before = 0
    if seed is not None:
        shutil.copytree(seed, store_path)
        probe = _open(store_path)
        held_before = probe.verdict_count()
        probe.close()
    worker = WorkerProcess("bench.apps:app", bootstrap=bootstrap, data_dir=data_dir,
                           log_path=workdir / f"{app_id}.log", env={"BENCH_APP_ID": app_id},
                           cwd=ROOT)
    stack.callback(worker.stop)
    progress(f"dedup ({label}): starting worker for app {app_id}, store holding "
             f"{held_before:,} verdicts (log: {worker.log_path})")
    worker.start()
    assert worker.pid is not None
    status = Path(f"/proc/{worker.pid}/status")
    measured: list[tuple[str, Workload, float, int]] = []
    try:
        for name, w in runs:
            _warm(app, bootstrap, w, progress)
            progress(f"dedup ({name}): {w.commands:,} pre-encoded deposits over {w.accounts:,} "
                     "accounts, raw producer, counting replies")
            _, fed_s = aggregates._fed_by_raw_producer(app, bootstrap, w)
            rss = _vmrss(status)
            progress(f"dedup ({name}): {w.commands / fed_s:,.0f} commands/s, worker RSS "
                     f"{rss / 1e6:,.0f} MB")
            measured.append((name, w, fed_s, rss))
    except BaseException:
        progress(f"the worker's log ends with:\n{worker.log_tail(30)}")
        raise
    finally:
        progress(f"dedup ({label}): stopping worker (pid {worker.pid})")
        worker.stop()
    held_after, found = -1, True
    if seed is not None:
        store = _open(store_path)
        held_after = store.verdict_count()
        found = check(store) if check is not None else True
        store.close()
        progress(f"dedup ({label}): the worker's store holds {held_after:,} verdicts after the "
                 f"run; seeded ids {'found' if found else 'MISSING'}")
    shutil.rmtree(data_dir, ignore_errors=True)
    return [WorkerRun(name, w.commands, w.accounts, fed_s, rss, held_before, held_after, found)
            for name, w, fed_s, rss in measured]


def _warm(app: App, bootstrap: str, w: Workload, progress: Callable[[str], None]) -> None:
    """Open ``w.accounts`` accounts through the client (idempotent) and warm the worker up."""
    ids = [f"account-{i}" for i in range(w.accounts)]

    async def go() -> None:
        client = app.client(bootstrap)
        await client.send_envelope("account", ids[0], account.Open(owner="bench"), TIMEOUT_S)
        await aggregates._drive(app, bootstrap, ((i, account.Open(owner="bench")) for i in ids[1:]),
                                w.in_flight)
        await aggregates._drive(app, bootstrap, aggregates._deposits(ids, w.warm_up), w.in_flight)

    progress(f"dedup: opening {w.accounts:,} accounts, {w.warm_up:,} warm-up deposits")
    asyncio.run(go())


def _sampled(key: Callable[[int], tuple[str, str]], count: int) -> Callable[[AggregateStore[account.AccountState]], bool]:
    def check(store: AggregateStore[account.AccountState]) -> bool:
        rng = random.Random(7)
        return all(store.reply(*key(n)) is not None
                   for n in [0, count - 1, *(rng.randrange(count) for _ in range(1000))])

    return check


def run(bootstrap: str | None, w: DedupWorkload, *, workdir: Path, stack: ExitStack,
        progress: Callable[[str], None]) -> DedupFigures:
    """The store-alone figures, then (with a broker) the three worker runs."""
    load = os.getloadavg()
    seeds = workdir / "dedup-seeds"
    spread = measure_store(workdir / "dedup-spread", w, hot=False, progress=progress,
                           keep=None if bootstrap is None else seeds / "spread")
    hot = measure_store(workdir / "dedup-hot", w, hot=True, progress=progress,
                        keep=None if bootstrap is None else seeds / "hot")
    worker_runs: list[WorkerRun] = []
    if bootstrap is not None:
        one = replace(w.e2e, accounts=1, commands=w.hot_commands, warm_up=min(w.e2e.warm_up, 500),
                      in_flight=100)
        try:
            # (a') gets a worker of its own: (c) runs on a worker warmed up only as much.
            worker_runs += _worker_run(bootstrap, workdir, stack, progress, label="fresh", seed=None,
                                       runs=[("a", w.e2e)])
            worker_runs += _worker_run(bootstrap, workdir, stack, progress, label="fresh, one",
                                       seed=None, runs=[("a'", one)])
            worker_runs += _worker_run(
                bootstrap, workdir, stack, progress, label="spread", seed=seeds / "spread",
                runs=[("b", w.e2e)], check=_sampled(_ids(w.verdicts, w.aggregates, False), w.verdicts))
            worker_runs += _worker_run(
                bootstrap, workdir, stack, progress, label="hot", seed=seeds / "hot",
                runs=[("c", one)], check=_sampled(_ids(w.hot, 1, True), w.hot))
        finally:
            shutil.rmtree(seeds, ignore_errors=True)
    return DedupFigures(w, spread, hot, worker_runs, load)


# -- the table ------------------------------------------------------------------------


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def _mb(count: int) -> str:
    return f"{count / 1e6:,.1f} MB"


def rows(f: DedupFigures) -> list[Row]:
    """The issue 16 rows: the store alone, then the worker runs."""
    out: list[Row] = []
    for s in (f.spread, f.hot):
        where = (f"{s.verdicts:,} ids across {s.aggregates:,} aggregates" if s.aggregates > 1
                 else f"{s.verdicts:,} ids on one aggregate")
        out += [
            Row(f"dedup store, {where}: fill ({BATCH:,} per write)",
                f"{s.fill_s:.1f} s ({rate(s.verdicts, s.fill_s)})"),
            Row(f"dedup store, {where}: on disk after close",
                f"{_mb(s.disk_bytes)} ({s.disk_bytes / s.verdicts:,.0f} B per id; replies "
                f"{s.reply_bytes:.0f} B)"),
            Row(f"dedup store, {where}: RSS growth after fill / after reopen + lookups",
                f"{_mb(s.rss_fill)} / {_mb(s.rss_lookups)} "
                f"({s.rss_lookups / s.verdicts:,.0f} B per id)"),
            Row(f"dedup store, {where}: reply() hit / miss, median",
                f"{_us(s.hit_s)} / {_us(s.miss_s)}"),
            Row(f"dedup store, {where}: expire {s.expired:,} oldest / then nothing due",
                f"{s.expire_s:.2f} s ({s.expire_s / s.expired * 1e6:.1f} µs per id) / "
                f"{s.expire_idle_s * 1e3:.1f} ms"),
        ]
    base = {r.label: r for r in f.runs}
    for r in f.runs:
        if r.label == "a":
            what = f"fresh worker, {r.accounts:,} accounts"
        elif r.label == "a'":
            what = "fresh worker, one account"
        elif r.label == "b":
            what = f"{r.held_before:,} ids held across {r.accounts:,} accounts"
        else:
            what = f"{r.held_before:,} ids held on the one account it is sent"
        per_s = r.commands / r.fed_s
        ref = {"b": "a", "c": "a'"}.get(r.label)
        versus = "—"
        if ref in base:
            ref_s = base[ref].commands / base[ref].fed_s
            versus = f"({r.label}) vs ({ref}) {ref_s:,.0f} /s: {(per_s - ref_s) / ref_s:+.0%}".replace("%", " %")
        held = "" if r.held_after < 0 else (
            f"; {r.held_after:,} held after{'' if r.seeded_found else ', SEEDED IDS MISSING'}")
        out.append(Row(f"dedup ({r.label}) aggregate commands, fed by a raw producer, {what}",
                       f"{per_s:,.0f} /s (worker RSS {r.rss / 1e6:,.0f} MB{held})", "—", versus))
    return out


def notes(f: DedupFigures) -> list[str]:
    w = f.workload
    return [
        f"dedup: store alone in this process ({w.lookups:,} random lookups per median; replies "
        f"are accepted ReplyEnvelopes with one Deposited event); worker runs: {w.e2e.commands:,} "
        f"commands over {w.e2e.accounts:,} accounts, {w.hot_commands:,} to one account, one "
        f"worker (8 partitions), at-least-once. Load average at the start: "
        f"{f.load[0]:.2f} {f.load[1]:.2f} {f.load[2]:.2f}.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dedup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--no-e2e", action="store_true",
                        help="the store alone: no broker, no worker")
    args = parser.parse_args(argv)
    workload = QUICK if args.quick else DEFAULT
    started = time.monotonic()
    if args.no_e2e:
        import tempfile

        from .report import Progress

        with tempfile.TemporaryDirectory(prefix="tidings-bench-dedup-") as tmp:
            figures = run(None, workload, workdir=Path(tmp), stack=ExitStack(), progress=Progress())
    else:
        with alone("tidings-bench-dedup-") as (bootstrap, workdir, stack, progress):
            figures = run(bootstrap, workload, workdir=workdir, stack=stack, progress=progress)
    print(f"\ndedup bench ({'quick' if args.quick else 'default'}, "
          f"{time.monotonic() - started:.0f} s; load average after {os.getloadavg()[0]:.2f})\n")
    print_report(rows(figures), notes(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
