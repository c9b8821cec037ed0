"""The peers' figures beside ours: ``python -m bench --peers FILE`` (issue 20's ratio rows).

The bench never runs a peer. ``../shared/peers/restate/run.sh`` and ``../shared/peers/dbos/run.sh``
each write a results file: one JSON object per measured scenario, one per line, among other lines
(Restate's ``results-*.txt`` also holds ``date:`` and ``load:`` lines and its summary tables;
DBOS's ``results-*.jsonl`` only the JSON lines, its date in the file name). This module reads
those lines, keeps, per workload, the peer's best configuration (highest throughput, lowest
idle p99, fastest recovery; the median over repetitions of one configuration), and makes the
rows ``tidings ÷ best peer`` that issue 20 sets its targets on.

A record is used only when it has the fields a workload needs with numbers in them; any other
line (a table, a log line, a malformed object) is skipped and counted, so a truncated file
gives fewer rows, never a wrong one.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .report import Row, percentile

#: Issue 20's ratio targets.
THROUGHPUT_TARGET = 5.0

_DATE_IN_NAME = re.compile(r"(\d{8}T\d{4,6}Z?)")


@dataclass(frozen=True, slots=True)
class PeerFigures:
    """One peer's best figure per workload (None: the file does not have it)."""

    name: str
    source: Path
    date: str
    load: str
    one_activity_per_s: float | None = None
    ten_steps_per_s: float | None = None
    idle_p50_ms: float | None = None
    idle_p99_ms: float | None = None
    recovery_s: float | None = None
    bodies_run_twice: float | None = None
    configs: dict[str, str] = field(default_factory=dict)
    skipped_lines: int = 0


def read(path: Path) -> PeerFigures:
    """Read one peer's results file.

    Raises:
        ValueError: The file has no usable record at all (say which file, and why).
        OSError: It cannot be read.
    """
    text = path.read_text(encoding="utf-8", errors="replace")
    records: list[dict[str, Any]] = []
    skipped = 0
    date = load = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("date:") and not date:
            date = stripped[5:].split()[0] if stripped[5:].split() else ""
        elif stripped.startswith("load: before the run:") and not load:
            load = _load_average(stripped)
        elif stripped.startswith("{"):
            try:
                record = json.loads(stripped)
            except ValueError:
                skipped += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("scenario"), str):
                records.append(record)
            else:
                skipped += 1
    if not records:
        raise ValueError(f"{path}: no peer results in it (expected the JSON lines a "
                         "../shared/peers/*/run.sh writes)")
    if not date:
        found = _DATE_IN_NAME.search(path.name)
        date = found.group(1) if found else "date not recorded"
    return _best(_name(path, text), path, date, load or "load not recorded in the file",
                 records, skipped)


def _name(path: Path, text: str) -> str:
    lowered = (path.parent.name + " " + text[:2000]).lower()
    if "restate" in lowered:
        return "Restate"
    if "dbos" in lowered or "sync1" in text or "queue1" in text:
        return "DBOS"
    return path.stem


def _load_average(line: str) -> str:
    found = re.search(r"load average:\s*([\d.]+),?\s*([\d.]+),?\s*([\d.]+)", line)
    return f"load {found.group(1)} / {found.group(2)} / {found.group(3)} before" if found else ""


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        return None
    return float(value)


def _median_by_config(records: Iterable[dict[str, Any]], key: str) -> dict[str, float]:
    by_config: dict[str, list[float]] = defaultdict(list)
    for record in records:
        value = _number(record, key)
        if value is not None:
            by_config[str(record.get("config", "default"))].append(value)
    return {config: statistics.median(values) for config, values in by_config.items()}


def _best(name: str, source: Path, date: str, load: str, records: list[dict[str, Any]],
          skipped: int) -> PeerFigures:
    def scenario(name: str, *, n: int | None = None, inflight: int | None = None) -> list[dict[str, Any]]:
        return [r for r in records if r.get("scenario") == name
                and (n is None or r.get("n") == n) and (inflight is None or r.get("inflight") == inflight)]

    configs: dict[str, str] = {}
    # The burst rows: every instance started at once (inflight == n).
    bursts = [r for r in scenario("async1") if r.get("inflight") == r.get("n") and (r.get("n") or 0) >= 1000]
    one = _median_by_config(bursts, "wf_per_s")
    ten = _median_by_config([r for r in scenario("async10") if r.get("inflight") == r.get("n")], "steps_per_s")
    idle = scenario("async1", inflight=1)
    p99 = _median_by_config(idle, "p99_ms")
    p50 = _median_by_config(idle, "p50_ms")
    # The 2,000-in-flight recovery (inflight == n), not DBOS's second one with 16 in flight.
    recoveries = [r for r in scenario("recovery") if r.get("inflight") == r.get("n")]
    recovery = _median_by_config(recoveries, "restart_to_all_done_s")
    twice = _median_by_config(recoveries, "steps_run_twice")
    figures: dict[str, float | None] = {}
    if one:
        configs["one-activity"] = max(one, key=one.__getitem__)
        figures["one_activity_per_s"] = one[configs["one-activity"]]
    if ten:
        configs["ten-steps"] = max(ten, key=ten.__getitem__)
        figures["ten_steps_per_s"] = ten[configs["ten-steps"]]
    if p99:
        configs["idle latency"] = min(p99, key=p99.__getitem__)
        figures["idle_p99_ms"] = p99[configs["idle latency"]]
        figures["idle_p50_ms"] = p50.get(configs["idle latency"])
    if recovery:
        configs["recovery"] = min(recovery, key=recovery.__getitem__)
        figures["recovery_s"] = recovery[configs["recovery"]]
        figures["bodies_run_twice"] = twice.get(configs["recovery"])
    return PeerFigures(name=name, source=source, date=date, load=load, configs=configs,
                       skipped_lines=skipped, **figures)


def _times(ours: float, theirs: float | None) -> str:
    return f"{ours / theirs:.2f} ×" if theirs else "n/a"


def rows(
    peers: Sequence[PeerFigures],
    *,
    one_activity_per_s: float | None,
    ten_steps_per_s: float | None,
    idle_latencies_s: Sequence[float],
    raw_round_trips_s: Sequence[float],
    recovery_s: float | None,
    bodies_run_twice: int | None,
) -> list[Row]:
    """The ratio rows: ours against the best peer of ``peers`` per workload, each naming it."""
    if not peers:
        return []

    def best(attr: str, highest: bool) -> tuple[float, PeerFigures] | None:
        found = [(getattr(p, attr), p) for p in peers if getattr(p, attr) is not None]
        if not found:
            return None
        return (max if highest else min)(found, key=lambda pair: pair[0])

    def who(peer: PeerFigures, workload: str) -> str:
        return f"{peer.name} ({peer.configs.get(workload, '?')}), {peer.date}"

    listed: list[Row] = []
    for label, ours, attr, workload, unit in (
        ("one-activity workflows (2,000 at once)", one_activity_per_s, "one_activity_per_s", "one-activity", "/s"),
        ("ten-step workflows (500 at once)", ten_steps_per_s, "ten_steps_per_s", "ten-steps", "steps/s"),
    ):
        top = best(attr, highest=True)
        if ours is not None and top is not None:
            listed.append(Row(f"vs best peer: {label}, tidings ÷ best peer",
                              f"{_times(ours, top[0])} ({ours:,.0f} vs {top[0]:,.0f} {unit})",
                              f"≥ {THROUGHPUT_TARGET:.0f} ×", who(top[1], workload)))
    top = best("idle_p99_ms", highest=False)
    if idle_latencies_s and top is not None:
        ours_p99 = percentile(idle_latencies_s, 0.99) * 1000
        ours_p50 = percentile(idle_latencies_s, 0.50) * 1000
        peer_p50 = top[1].idle_p50_ms
        listed.append(Row(
            "vs best peer: one-activity idle latency p99, tidings ÷ best peer",
            f"{_times(ours_p99, top[0])} ({ours_p99:.1f} vs {top[0]:.1f} ms; p50 {ours_p50:.1f} vs "
            f"{peer_p50:.1f} ms)" if peer_p50 is not None else f"{_times(ours_p99, top[0])}",
            "< 1 × (below theirs)", who(top[1], "idle latency")))
    if idle_latencies_s and raw_round_trips_s:
        raw_p99 = percentile(raw_round_trips_s, 0.99)
        raw_p50 = percentile(raw_round_trips_s, 0.50)
        listed.append(Row(
            "one-activity idle latency ÷ raw single-record round trip, p50 / p99",
            f"{percentile(idle_latencies_s, 0.50) / raw_p50:.2f} × / "
            f"{percentile(idle_latencies_s, 0.99) / raw_p99:.2f} ×",
            "p50 ≤ 2 ×, p99 ≤ 1.5 ×", f"raw {raw_p50 * 1000:.1f} / {raw_p99 * 1000:.1f} ms"))
    if recovery_s is not None:
        fastest = best("recovery_s", highest=False)
        theirs = "; ".join(
            f"{p.name} {p.recovery_s:.2f} s ({p.bodies_run_twice:,.0f} bodies twice)"
            if p.bodies_run_twice is not None else f"{p.name} {p.recovery_s:.2f} s"
            for p in peers if p.recovery_s is not None)
        twice = "" if bodies_run_twice is None else f", {bodies_run_twice:,} bodies ran twice"
        if fastest is not None:
            listed.append(Row("vs peers: recovery after SIGKILL, 2,000 in flight, tidings ÷ fastest peer",
                              f"{_times(recovery_s, fastest[0])} ({recovery_s:.2f} s{twice})",
                              "≤ 2 s and < 1 ×", theirs))
    return listed


def notes(peers: Sequence[PeerFigures]) -> list[str]:
    """Where each peer's figures come from: file, date, load, and what was skipped."""
    lines = []
    for peer in peers:
        skipped = f"; {peer.skipped_lines} unreadable line(s) skipped" if peer.skipped_lines else ""
        lines.append(f"peer figures: {peer.name} from {peer.source} ({peer.date}, {peer.load}){skipped}; "
                     "the best configuration per workload, median over its repetitions.")
    return lines
