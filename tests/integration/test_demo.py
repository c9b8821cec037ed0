"""``tidings demo`` (the README's first command) on the session's broker: both acts, nothing left running."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.workflow_workers import ROOT


def test_the_demo_runs_both_acts_and_leaves_no_worker_running(kafka_bootstrap: str, tmp_path: Path) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tidings.cli.main", "demo", "--workdir", str(tmp_path)],
        capture_output=True, text=True, env={**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap},
        cwd=ROOT, timeout=180,
    )
    print(f"\n`tidings demo` on the session's broker took {time.monotonic() - began:.1f} s")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    lines = out.splitlines()
    # The bank act: no lost or doubled deposit across its SIGKILL, and the projection agrees.
    assert "no gaps: True" in out
    assert '{"reason":"Insufficient funds: 170 available"}' in out
    assert "{'owner': 'Alice', 'balance': '100', 'events': 104}" in out
    # The transfer saga: one transfer credited, one refunded, a reused correlation id refused.
    assert re.search(r'seq 3 stop   ended \{"step":"credited"', out), out
    assert re.search(r'seq 2 handle \{"step":"refunding".*"reason":"The account is not open"\}  '
                     r'sends RefundTransfer to alice-\w+', out), out
    assert re.search(r'seq 4 stop   ended \{"step":"refunded"', out), out
    assert re.search(r"bob-\w+ +v3 +TransferReceived", out), out
    assert re.search(r"alice-\w+ +v107 +TransferRefunded", out), out
    assert "SagaAlreadyStarted: account 'alice-" in out
    assert re.search(r"before and after: 107 and 107: nothing stored", out), out
    # The shop act: each enrich finished with its points after one call of its activity.
    points = re.findall(r"(order-1[789])-\w+  Finished \{\"points\":(\d+),", out)
    assert sorted(points) == [("order-17", "30"), ("order-18", "50"), ("order-19", "20")], out
    calls = [line.split() for line in lines if line.strip().startswith("enrich/order-")]
    assert [words[1:] for words in calls] == [["1", "call"]] * 3, out
    assert any("signal approval true  -> Finished true" in line for line in lines), out
    assert any("no signal             -> Finished false" in line for line in lines), out
    assert lines[-1] == "== Done."
    pids = {int(pid) for pid in re.findall(r"pid (\d+)", out)}
    assert len(pids) == 4, out  # two bank workers, two shop workers
    for pid in pids:
        cmdline = Path(f"/proc/{pid}/cmdline")
        assert not cmdline.exists() or b"worker" not in cmdline.read_bytes(), f"worker {pid} still runs"
