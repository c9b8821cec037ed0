"""``WorkerProcess`` children never outlive the process that started them.

Each test runs a stand-in for a test process (``python -c PARENT``) that starts a real
worker through ``WorkerProcess``, waits until the worker is at work, prints its pid, and
then dies: SIGKILLed (nothing of it runs: the kernel's parent-death signal must do it) or
exiting normally with the kernel's signal switched off (the atexit cleanup must do it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.testing.eventually import assert_eventually
from tests.workers import ROOT, test_app  # noqa: F401

PARENT = """
import sys, time
from pathlib import Path
from tidings.testing import processes
from tidings.testing.processes import WorkerProcess

app_spec, bootstrap, data_dir, log_path, app_id, how = sys.argv[1:]
if how == "exit":
    processes.die_with_parent = lambda: None  # leave it to the atexit cleanup
worker = WorkerProcess(app_spec, bootstrap=bootstrap, data_dir=Path(data_dir), log_path=Path(log_path),
                       env={"TEST_APP_ID": app_id}, cwd=Path.cwd()).start()
deadline = time.monotonic() + 60
while "Worker ready" not in worker.log_tail(400):
    assert worker.running and time.monotonic() < deadline, worker.log_tail()
    time.sleep(0.1)
print(worker.pid, flush=True)
if how == "exit":
    sys.exit(0)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.fixture
def orphans() -> Iterator[list[int]]:
    """Worker pids to kill at the end should a test fail and leave one running."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


def start_parent(how: str, test_app: App, kafka_bootstrap: str, tmp_path: Path) -> tuple[subprocess.Popen[str], int, Path]:
    # The log's directory does not exist yet: WorkerProcess creates it.
    log_path = tmp_path / "logs" / "of" / "w1.log"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, "tests.integration.apps:app", kafka_bootstrap,
         str(tmp_path / "w1"), str(log_path), test_app.name, how],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip().isdigit(), log_path.read_text() if log_path.exists() else "no worker log"
    return parent, int(line), log_path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_when_the_process_that_started_it_is_sigkilled(
    test_app: App, kafka_bootstrap: str, tmp_path: Path, orphans: list[int]
) -> None:
    parent, worker, log_path = start_parent("sleep", test_app, kafka_bootstrap, tmp_path)
    orphans.append(worker)
    assert alive(worker) and log_path.exists()

    parent.send_signal(signal.SIGKILL)
    parent.wait(30)

    assert_eventually(lambda: not alive(worker), timeout=10, message=f"worker {worker} outlived its parent")


def test_a_worker_left_running_is_killed_when_the_process_that_started_it_exits(
    test_app: App, kafka_bootstrap: str, tmp_path: Path, orphans: list[int]
) -> None:
    parent, worker, _ = start_parent("exit", test_app, kafka_bootstrap, tmp_path)
    orphans.append(worker)

    assert parent.wait(30) == 0

    # The parent reaps it in its atexit cleanup, before it exits.
    assert not alive(worker)
