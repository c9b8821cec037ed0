"""The bench's hop split and recovery phases: what the idle-latency and recovery notes print."""

from __future__ import annotations

import datetime as dt

from bench.hops import HOPS, Run, summary
from bench.processes import ProcessFigures, rows
from bench.workflows import recovery_phases


def test_a_run_splits_into_its_seven_hops_and_the_tail_names_the_slow_one() -> None:
    runs = [Run(f"lat-{n}", 100.0, 100.010, (100.001, 100.003, 100.003, 100.004, 100.004, 100.006))
            for n in range(98)]
    # Two slow runs whose extra 40 ms sit between Ended and the outcome.
    runs += [Run(f"slow-{n}", 200.0, 200.050, (200.001, 200.003, 200.003, 200.004, 200.004, 200.046))
             for n in range(2)]
    assert runs[0].hops() is not None and len(runs[0].hops() or []) == len(HOPS)
    lines = summary(runs)
    assert "100 runs" in lines[0] and "slowest 2 runs (total 50.0 ms)" in lines[0]
    ended_to_outcome = next(line for line in lines if "Ended → outcome" in line)
    assert ended_to_outcome.endswith("slowest: 42.00 ms")
    outcome_to_client = next(line for line in lines if "outcome → client" in line)
    assert outcome_to_client.endswith("slowest: 4.00 ms")


def test_runs_with_a_missing_record_are_left_out_and_counted_when_none_is_left() -> None:
    missing = [Run("a", 1.0, 2.0, (1.1, None, 1.2, 1.3, 1.4, 1.5)), Run("b", 1.0, 2.0, ())]
    assert missing[0].hops() is None and missing[1].hops() is None
    (line,) = summary(missing)
    assert line.startswith("hops: no run could be split (2 runs;") and "[1, 2, 1, 1, 1, 1]" in line


def test_recovery_phases_are_read_from_the_restarted_workers_log() -> None:
    restart = dt.datetime(2026, 12, 3, 11, 0, 0).timestamp()
    log = "\n".join([
        "[2026-12-03 11:00:00,700] [1] [INFO] [^Worker]: Starting... ",
        "[2026-12-03 11:00:00,900] [1] [INFO] Worker ready: joined group app ",
        "[2026-12-03 11:00:01,000] [1] [INFO] restoring workflow w partition 0 from the journal: offsets 1..9 ",
        "[2026-12-03 11:00:01,500] [1] [INFO] restoring workflow w partition 1 from the journal: offsets 1..9 ",
        "garbage [^Worker]: Starting... without a time",
    ])
    assert recovery_phases(log, restart) == "imports done 0.70 s, joined 0.90 s, last catch-up began 1.50 s"
    assert recovery_phases("", restart) == ""


def test_the_processes_row_is_the_ratio_with_the_cpu_left_free() -> None:
    (row,) = rows(ProcessFigures(2000, {1: 2.0, 2: 1.6}, {1: 0.06, 2: 0.01}))
    assert row.measured == "1.25 × (1,250 /s vs 1,000 /s; CPU left free 1% vs 6%)"
    assert rows(ProcessFigures(2000, {1: 2.0}, {1: 0.1})) == []
