"""The tidings pytest plugin (tidings.testing.pytest_plugin) on a real broker.

This module's tests use the plugin's fixtures themselves (``tidings_app`` built by
``tests.integration.apps:build``, ``tidings_worker``), run the shop's own suite
(examples/shop/tests, what docs/testing.md shows) in a pytest of its own against the
session's broker, and run a session with no broker configured to see it start a local one
and stop it by its PID at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from examples.bank.account import Deposit, Deposited, Open, Opened, Rejected, Withdraw
from tidings import App
from tidings.broker._process import is_kafka
from tidings.testing import WorkerProcess
from tidings.testing.topics import read_topic
from tests.kafka_clients import kafka
from tests.workers import ROOT


@pytest.fixture
def tidings_app_spec() -> str:
    """This module's App: the integration tests' account and tally aggregates."""
    return "tests.integration.apps:build"


def topics(bootstrap: str) -> set[str]:
    return set(kafka(bootstrap).admin().list_topics(timeout=10).topics)


def inner_pytest(*args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` from the repository root, as a user's CI would run it."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def test_the_app_fixture_names_the_app_for_the_test_and_its_worker_serves_it(
    tidings_app: App, tidings_app_id: str, tidings_worker: WorkerProcess, tidings_bootstrap: str
) -> None:
    assert tidings_app.name == tidings_app_id
    assert {spec.name for spec in tidings_app.topic_specs()} <= topics(tidings_bootstrap)
    assert os.environ["TIDINGS_BOOTSTRAP"] == tidings_bootstrap  # the App's handles reach it
    client = tidings_app.client()

    async def scenario() -> list[object]:
        return [
            await client.send("account", "alice", Open(owner="Alice")),
            await client.send("account", "alice", Deposit(amount=Decimal(30))),
            await client.send("account", "alice", Withdraw(amount=Decimal(50))),
        ]

    replies = asyncio.run(scenario())
    assert replies == [Opened(owner="Alice"), Deposited(amount=Decimal(30)),
                       Rejected(reason="Insufficient funds: 30 available")], tidings_worker.log_tail()
    assert len(read_topic(tidings_bootstrap, f"{tidings_app_id}.aggregate.account.events")) == 2


def test_the_shop_suite_of_docs_testing_passes_and_leaves_no_topic_behind(kafka_bootstrap: str) -> None:
    before = topics(kafka_bootstrap)
    env = {**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap}
    done = inner_pytest("-p", "tidings.testing.pytest_plugin", "examples/shop/tests", "-q", env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout, done.stdout[-2000:]
    left = {name for name in topics(kafka_bootstrap) - before if ".workflow.enrich." in name
            or ".workflow.approve." in name}
    assert left == set(), "the tests' app topics were not deleted"


def test_a_session_without_a_broker_starts_a_local_one_and_stops_it_by_its_pid(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_inner.py").write_text(
        "import json, os\n"
        "def test_it(tidings_broker, tidings_app):\n"
        "    os.kill(tidings_broker.pid, 0)  # the broker runs while the tests do\n"
        f"    open({str(seen)!r}, 'w').write(json.dumps(dict(source=tidings_broker.source, pid=tidings_broker.pid,\n"
        "        bootstrap=tidings_broker.bootstrap, app=tidings_app.name)))\n"
    )
    env = {name: value for name, value in os.environ.items() if name != "TIDINGS_BOOTSTRAP"}
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-docker.sock"  # no engine answers: the local broker
    done = inner_pytest(str(suite), "-q", "-o", "tidings_app=tests.integration.apps:build",
                        f"--basetemp={tmp_path / 'inner'}", "--rootdir", str(ROOT), env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    inner = json.loads(seen.read_text())
    assert inner["source"] == "local" and inner["bootstrap"].startswith("127.0.0.1:")
    assert inner["app"].startswith("t")
    # Stopped at the session's end, by its PID: no Kafka JVM runs under it any more.
    assert not is_kafka(inner["pid"]), f"the session's local broker (pid {inner['pid']}) is still running"
