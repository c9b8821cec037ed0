"""Kafka away: each client command fails fast in one line; a worker waits quietly (issue 17, item 5).

The unreachable bootstrap is a closed port on 127.0.0.1 (bound, noted, closed). Each client
command exits within its timeout + 5 s with at most three lines on stderr and status 69. A
worker started against it logs a few lines a minute, and starts working once a broker
appears on that port: a private broker started there (never the shared one), stopped by the
PID it recorded.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidings.broker import LocalBroker
from tidings.cli.kafka import UNREACHABLE_EXIT_CODE
from tidings.shell.client.client import Client
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tests.integration.apps import Add, build
from tests.workers import ROOT

#: How long the worker runs against the closed port before a broker appears there.
WAIT_S = 45.0


def closed_port() -> int:
    """A port nothing listens on: bound by the OS, noted, closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tidings(*args: str, timeout_s: float) -> tuple[int, list[str], float]:
    """Run ``tidings ARGS``; return its exit status, stderr lines and seconds taken."""
    env = {key: value for key, value in os.environ.items() if key != "TIDINGS_BOOTSTRAP"}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=timeout_s + 60)
    return done.returncode, done.stderr.splitlines(), time.monotonic() - began


SHOP = "examples.shop.app:app"
BANK = "examples.bank.app:app"

COMMANDS = {
    "start": (["start", SHOP, "enrich", "order-1", '"ABC"', "--timeout", "5"], 5.0),
    "send": (["send", BANK, "account", "alice", "Deposit", '{"amount": "10"}', "--timeout", "5"], 5.0),
    "result": (["result", SHOP, "enrich", "order-1", "--timeout", "5"], 5.0),
    "signal": (["signal", SHOP, "approve", "order-1", "approval", "true", "--timeout", "5"], 5.0),
    "outcomes": (["outcomes", SHOP, "enrich"], 10.0),  # no --timeout: the 10 s default
    "topics apply": (["topics", "apply", BANK, "--timeout", "5"], 5.0),
    "status (default timeout)": (["status", SHOP, "enrich", "order-1"], 10.0),
    "console": (["console", SHOP, "--port", "0", "--timeout", "5"], 5.0),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_against_an_unreachable_kafka_answers_in_time_in_one_line(command: str) -> None:
    args, timeout_s = COMMANDS[command]
    port = closed_port()
    code, stderr, took = tidings(*args, "--bootstrap", f"127.0.0.1:{port}", timeout_s=timeout_s)
    assert code == UNREACHABLE_EXIT_CODE, (code, stderr)
    assert took < timeout_s + 5, f"{command} took {took:.1f} s"
    assert 1 <= len(stderr) <= 3, stderr
    assert f"cannot reach Kafka at 127.0.0.1:{port}" in stderr[-1]
    assert "is the broker running" in stderr[-1]


def test_the_exit_status_of_an_unreachable_kafka_is_in_the_help() -> None:
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "send", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0
    assert f"Exit status {UNREACHABLE_EXIT_CODE}: no Kafka broker answered" in " ".join(done.stdout.split())


def test_a_worker_waits_quietly_for_kafka_and_works_once_a_broker_appears(
    app_id: str, tmp_path: Path
) -> None:
    port = closed_port()
    bootstrap = f"127.0.0.1:{port}"
    log_path = tmp_path / "w1.log"
    worker = WorkerProcess("tests.integration.apps:app", bootstrap=bootstrap,
                           data_dir=tmp_path / "w1", log_path=log_path,
                           env={"TEST_APP_ID": app_id}, cwd=ROOT).start()
    broker = LocalBroker(tmp_path / "broker", port=port, heap="512m")
    try:
        time.sleep(WAIT_S)
        assert worker.running, f"the worker exited while Kafka was away:\n{worker.log_tail()}"
        lines = log_path.read_text(errors="replace").splitlines()
        print(f"\nthe worker's log after {WAIT_S:.0f} s without Kafka:\n" + "\n".join(lines))
        assert 1 <= len(lines) <= 4, "\n".join(lines)
        assert any(bootstrap in line and "unreachable" in line for line in lines), lines

        pid = worker.pid
        assert broker.start() == bootstrap
        assert_eventually(lambda: "Worker ready" in log_path.read_text(errors="replace"),
                          timeout=120, interval=0.5, message=f"never ready:\n{worker.log_tail()}")
        text = log_path.read_text(errors="replace")
        assert f"Kafka broker {bootstrap} answers again" in text, text

        client = Client(bootstrap, app=build(app_id))
        try:
            reply = asyncio.run(client.send_envelope("tally", "t-1", Add(amount=2), 60))
        finally:
            client.close()
        assert reply.status == "accepted", reply
        assert worker.running and worker.pid == pid
    finally:
        worker.kill()
        broker.stop()  # by the PID it recorded
