"""``python -m bench --peers FILE``: the peers' results files read, the best peer's figures picked,
and hostile or truncated files turned into fewer rows or one clear error, never a wrong ratio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import peers
from bench.__main__ import main as bench_main

RESTATE = """date: 2026-12-01T22:03:49Z  host: 2 cores, 23 GiB, 6.18
restate: restate-server 1.7.12, single node
load: before the run:  22:03:48 up  1:21,  0 user,  load average: 0.40, 0.35, 0.30
| workload | Workflow, send + attach |
|---|---|
raw results:
{"scenario": "async1", "config": "wf-send", "n": 200, "inflight": 1, "wf_per_s": 119.5, "p50_ms": 8.2, "p99_ms": 12.2}
{"scenario": "async1", "config": "wf-send", "n": 2000, "inflight": 2000, "wf_per_s": 384.0, "p50_ms": 4643.2, "p99_ms": 5077.0}
{"scenario": "async10", "config": "wf-send", "n": 500, "inflight": 500, "steps_per_s": 1361.0}
{"scenario": "recovery", "config": "wf-send", "n": 2000, "inflight": 2000, "restart_to_all_done_s": 4.121, "steps_run_twice": 770}
{"scenario": "async1", "config": "svc-call", "n": 200, "inflight": 1, "wf_per_s": 106, "p50_ms": 9.4, "p99_ms": 13.8}
{"scenario": "async1", "config": "svc-call", "n": 2000, "inflight": 2000, "wf_per_s": 482.2, "p50_ms": 3543.3, "p99_ms": 3823.9}
{"scenario": "async1", "config": "svc-call", "n": 2000, "inflight": 2000, "wf_per_s": 470.0, "p50_ms": 3543.3, "p99_ms": 3823.9}
{"scenario": "async1", "config": "svc-call", "n": 2000, "inflight": 2000, "wf_per_s": 500.0, "p50_ms": 3543.3, "p99_ms": 3823.9}
{"scenario": "async10", "config": "svc-call", "n": 500, "inflight": 500, "steps_per_s": 1491.2}
"""


def _dbos(tmp_path: Path) -> Path:
    path = tmp_path / "results-20261130T101500.jsonl"
    lines = [
        {"scenario": "async1", "n": 2000, "inflight": 2000, "wf_per_s": 348.0, "p50_ms": 3000, "p99_ms": 5000},
        {"scenario": "async1", "n": 500, "inflight": 1, "wf_per_s": 200, "p50_ms": 4.7, "p99_ms": 11.2},
        {"scenario": "sync1", "n": 500, "inflight": 1, "wf_per_s": 150, "p50_ms": 3.0, "p99_ms": 1.0},
        {"scenario": "async10", "n": 500, "inflight": 500, "steps_per_s": 247.0},
        {"scenario": "recovery", "n": 2000, "inflight": 2000, "restart_to_all_done_s": 8.3, "steps_run_twice": 0},
        # Another workload (16 in flight): never the recovery figure.
        {"scenario": "recovery", "n": 2000, "inflight": 16, "restart_to_all_done_s": 1.75, "steps_run_twice": 2},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_restate_best_configuration_median_date_and_load(tmp_path: Path) -> None:
    path = tmp_path / "results-20261201T2204Z.txt"
    path.write_text(RESTATE)
    figures = peers.read(path)
    assert figures.name == "Restate"
    assert figures.date == "2026-12-01T22:03:49Z"
    assert figures.load == "load 0.40 / 0.35 / 0.30 before"
    # svc-call's three repetitions: median 482.2, which beats wf-send's 384.
    assert figures.one_activity_per_s == pytest.approx(482.2)
    assert figures.configs["one-activity"] == "svc-call"
    assert figures.ten_steps_per_s == pytest.approx(1491.2)
    assert figures.idle_p99_ms == pytest.approx(12.2) and figures.idle_p50_ms == pytest.approx(8.2)
    assert figures.recovery_s == pytest.approx(4.121) and figures.bodies_run_twice == 770


def test_dbos_date_from_the_file_name_and_only_async1_idle_rows(tmp_path: Path) -> None:
    figures = peers.read(_dbos(tmp_path))
    assert figures.name == "DBOS"
    assert figures.date == "20261130T101500"
    assert figures.load == "load not recorded in the file"
    # sync1 is another workload (sequential starts), not the idle one-activity row.
    assert figures.idle_p99_ms == pytest.approx(11.2)


def test_ratio_rows_take_the_best_peer_per_workload(tmp_path: Path) -> None:
    restate = tmp_path / "r.txt"
    restate.write_text(RESTATE)
    both = [peers.read(restate), peers.read(_dbos(tmp_path))]
    rows = {r.workload: r for r in peers.rows(
        both, one_activity_per_s=2411.0, ten_steps_per_s=7456.0,
        idle_latencies_s=[0.005] * 99 + [0.010], raw_round_trips_s=[0.0025] * 99 + [0.008],
        recovery_s=2.06, bodies_run_twice=3)}
    one = rows["vs best peer: one-activity workflows (2,000 at once), tidings ÷ best peer"]
    assert one.measured.startswith("5.00 ×") and "Restate (svc-call)" in one.reference
    ten = rows["vs best peer: ten-step workflows (500 at once), tidings ÷ best peer"]
    assert ten.measured.startswith("5.00 ×")
    idle = rows["vs best peer: one-activity idle latency p99, tidings ÷ best peer"]
    # DBOS's 11.2 ms p99 is the best (lowest) of the two peers.
    assert idle.measured.startswith("0.89 ×") and "DBOS" in idle.reference
    raw = rows["one-activity idle latency ÷ raw single-record round trip, p50 / p99"]
    assert raw.measured == "2.00 × / 1.25 ×"
    recovery = rows["vs peers: recovery after SIGKILL, 2,000 in flight, tidings ÷ fastest peer"]
    assert recovery.measured.startswith("0.50 ×") and "3 bodies ran twice" in recovery.measured
    assert "Restate 4.12 s (770 bodies twice)" in recovery.reference and "DBOS 8.30 s" in recovery.reference


def test_no_peers_no_rows() -> None:
    assert peers.rows([], one_activity_per_s=1.0, ten_steps_per_s=1.0, idle_latencies_s=[0.1],
                      raw_round_trips_s=[0.1], recovery_s=1.0, bodies_run_twice=0) == []


@pytest.mark.parametrize("junk", [
    '{"scenario": "async1", "n": 2000, "inflight": 2000, "wf_per_s": "fast"}',
    '{"scenario": "async1", "n": 2000, "inflight": 2000, "wf_per_s": -5}',
    '{"scenario": "async1", "n": 2000, "inflight": 2000, "wf_per_s": NaN}',
    '{"scenario": "async1", "n": 2000, "inflight": 2000, "wf_per_s": true}',
    '{"scenario": 7}',
    '[1, 2, 3]',
    '{"scenario": "async1", "n": 2000, "inflight": 2000, "wf_per_s": 9',
])
def test_hostile_lines_are_skipped_never_used(tmp_path: Path, junk: str) -> None:
    path = tmp_path / "results-x.jsonl"
    path.write_text(junk + "\n" + json.dumps(
        {"scenario": "async10", "n": 500, "inflight": 500, "steps_per_s": 100.0}) + "\n")
    figures = peers.read(path)
    assert figures.one_activity_per_s is None
    assert figures.ten_steps_per_s == 100.0


@pytest.mark.parametrize("content", ["", "no json here\n| a | b |\n", "\x00\xff garbage {\n"])
def test_a_file_without_results_is_a_usage_error(tmp_path: Path, content: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "results.txt"
    path.write_text(content, errors="surrogateescape")
    with pytest.raises(SystemExit) as exit:
        bench_main(["--peers", str(path)])
    assert exit.value.code == 2
    assert "no peer results in it" in capsys.readouterr().err


def test_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        bench_main(["--peers", str(tmp_path / "absent.txt")])
    assert exit.value.code == 2
    assert "absent.txt" in capsys.readouterr().err
