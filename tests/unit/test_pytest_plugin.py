"""The tidings pytest plugin without a broker: its in-memory fixtures, its app factory and
what it answers to a factory spec that is not usable (hostile input: a clear message, nothing
built, no topic made)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tidings import App, WorkflowContext
from tidings.core.workflow import define_workflow
from tidings.testing import AppTestRuntime, FakeClock, WorkflowTestRuntime
from tidings.errors import DefinitionError
from tidings.testing.app_factory import APP_ENV, APP_ID_ENV, app_from_environment, build_app
from tidings.testing.brokers import delete_topics, docker_answers, session_broker
from tidings.testing.pytest_plugin import Workers

ROOT = Path(__file__).resolve().parents[2]


def fixed_name(name: str) -> App:
    """A factory that ignores the name it is given (tests would share its topics)."""
    return App("fixed")


def not_an_app(name: str) -> str:
    return name


async def month_long(ctx: WorkflowContext, order: str) -> str:
    await ctx.sleep(timedelta(days=30))
    return f"{order} reminded"


def test_the_runtime_fixture_runs_a_thirty_day_sleep_in_no_time(
    tidings_runtime: WorkflowTestRuntime, tidings_clock: FakeClock
) -> None:
    assert tidings_runtime.clock is tidings_clock
    remind = tidings_runtime.register(define_workflow("remind", month_long, input_type=str))
    began = time.perf_counter()
    start = tidings_clock.now()
    remind.start("order-17", "order-17")
    assert remind.value("order-17", timedelta(days=31)) == "order-17 reminded"
    assert time.perf_counter() - began < 0.1
    assert tidings_clock.now() - start >= timedelta(days=30)


def test_each_test_gets_a_fresh_runtime_and_clock(tidings_runtime: WorkflowTestRuntime, tidings_clock: FakeClock) -> None:
    assert tidings_runtime.journals == {} and tidings_clock.now() == FakeClock().now()


def test_a_factory_builds_the_app_under_the_name_it_is_given() -> None:
    app = build_app("examples.shop.app:build", "t-shop-1")
    assert app.name == "t-shop-1" and [h.name for h in app.workflows] == ["enrich", "approve", "cart"]
    assert all(spec.name.startswith("t-shop-1.") for spec in app.topic_specs())


@pytest.mark.parametrize(("spec", "message"), [
    ("", "must be MODULE:FUNCTION"),
    ("examples.shop.app", "must be MODULE:FUNCTION"),
    ("examples.shop.app:build:x", "must be MODULE:FUNCTION"),
    (":build", "must be MODULE:FUNCTION"),
    ("no_such_module_here:build", "cannot import 'no_such_module_here'"),
    ("examples.shop.app:nothing", "has no function 'nothing'"),
    ("examples.shop.app:ENRICH_NAP", "has no function 'ENRICH_NAP'"),
    ("examples.shop.app:app", "is an App with a fixed name"),
    (f"{__name__}:not_an_app", "returned str, not an App"),
    (f"{__name__}:fixed_name", "named its App 'fixed', not 't-1'"),
])
def test_an_unusable_factory_spec_says_what_to_change(spec: str, message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        build_app(spec, "t-1")


def test_a_worker_of_the_test_app_without_its_variables_exits_saying_which_to_set() -> None:
    with pytest.raises(DefinitionError, match=f"set {APP_ENV} .* and {APP_ID_ENV}"):
        app_from_environment({APP_ENV: "examples.shop.app:build"})
    env = {k: v for k, v in os.environ.items() if k not in (APP_ENV, APP_ID_ENV)}
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "worker", "tidings.testing.app_under_test:app"],
                          capture_output=True, text=True, env={**env, "TIDINGS_BOOTSTRAP": "127.0.0.1:9"},
                          cwd=ROOT, timeout=60)
    assert done.returncode != 0 and f"set {APP_ENV}" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_suite_that_names_no_factory_fails_at_once_with_what_to_set(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_needs_app.py").write_text("def test_it(tidings_app):\n    pass\n")
    began = time.monotonic()
    # Nothing listens on port 9: a fixture that reached for Kafka would hang, not fail at once.
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(suite), "-q",
                           "--rootdir", str(ROOT), f"--basetemp={tmp_path / 'inner'}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "TIDINGS_BOOTSTRAP": "127.0.0.1:9"})
    assert done.returncode == 1, done.stdout[-3000:]
    assert "tidings_app needs the suite's app factory: set `tidings_app = MODULE:FUNCTION`" in done.stdout
    assert time.monotonic() - began < 30


def test_the_session_broker_is_the_configured_one_and_is_never_stopped_here(tmp_path: Path) -> None:
    def no_docker() -> bool:
        raise AssertionError("a configured broker needs no Docker engine")

    with session_broker(tmp_path, environ={"TIDINGS_BOOTSTRAP": "kafka-1:9092"}, docker=no_docker) as broker:
        assert (broker.bootstrap, broker.source, broker.pid) == ("kafka-1:9092", "environment", None)
    assert list(tmp_path.iterdir()) == []  # no local broker was provisioned


def test_no_docker_engine_answers_quickly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    began = time.monotonic()
    assert docker_answers() is False
    assert time.monotonic() - began < 5


def test_topics_are_deleted_only_under_one_apps_prefix() -> None:
    for prefix in ("", "t123", "shop"):
        with pytest.raises(ValueError, match="must end with '.'"):
            delete_topics("127.0.0.1:9", prefix)


@pytest.mark.parametrize("name", ["", "../elsewhere", "a/b", "w 1", "w1;rm"])
def test_a_worker_name_that_is_no_plain_name_is_refused_before_anything_starts(tmp_path: Path, name: str) -> None:
    workers = Workers("127.0.0.1:9", "examples.shop.app:build", "t-1", tmp_path, ROOT, [])
    with pytest.raises(ValueError, match="letters, digits"):
        workers.start(name)
    assert workers.started == [] and list(tmp_path.iterdir()) == []


def test_the_plugin_is_a_pytest11_entry_point_named_as_its_module() -> None:
    # Named as the module, `-p tidings.testing.pytest_plugin` loads that entry point, not a second copy.
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert declared == {"tidings.testing.pytest_plugin": "tidings.testing.pytest_plugin"}
    from importlib.metadata import entry_points

    installed = {ep.name: ep.value for ep in entry_points(group="pytest11") if ep.value.startswith("tidings")}
    assert installed in ({}, declared)  # a venv installed before the entry point existed has none


@pytest.fixture
def tidings_app_spec() -> str:
    return "tests.parity_app:build"


def test_the_app_runtime_fixture_runs_the_suite_s_app_in_memory_on_the_test_s_clock(
    tidings_app_runtime: AppTestRuntime, tidings_clock: FakeClock
) -> None:
    from decimal import Decimal

    from examples.bank.account import Open

    assert tidings_app_runtime.clock is tidings_clock and tidings_app_runtime.app.name == "memory"
    assert tidings_app_runtime.send("account", "ann", Open(owner="ann")).owner == "ann"
    tidings_app_runtime.run_until_idle()
    assert tidings_app_runtime.view("balances").get("ann") == {"owner": "ann", "balance": "0", "events": 1}
    assert tidings_app_runtime.state("account", "ann").balance == Decimal(0)
