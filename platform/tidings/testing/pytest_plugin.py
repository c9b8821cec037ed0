"""tidings' pytest plugin: a Kafka broker per session, an App and workers per test, the
in-memory workflow runtime.

Load it with ``pytest -p tidings.testing.pytest_plugin`` (installing tidings also registers
it as a ``pytest11`` entry point of that name, so it loads by itself; ``-p
no:tidings.testing.pytest_plugin`` turns it off). Every fixture is named ``tidings_*``:

- ``tidings_broker`` / ``tidings_bootstrap`` (session): ``TIDINGS_BOOTSTRAP`` if set, else
  testcontainers' Kafka where a Docker engine answers, else a local Apache Kafka on
  127.0.0.1, stopped by its PID when the session ends (``tidings.testing.brokers``).
- ``tidings_app_id``: a fresh app name; every topic under it is deleted after the test.
- ``tidings_app``: the suite's App built under that name by its factory (ini option
  ``tidings_app = MODULE:FUNCTION``, or override ``tidings_app_spec``), its topics created,
  ``TIDINGS_BOOTSTRAP`` set to the session's broker for the test, its clients closed after.
- ``tidings_worker`` / ``tidings_workers``: ``tidings worker`` processes of that App
  (``tidings.testing.WorkerProcess``), stopped after the test; a failed test's report shows
  each worker's log tail.
- ``tidings_clock`` / ``tidings_runtime``: a ``FakeClock`` and a ``WorkflowTestRuntime`` on it.
- ``tidings_app_runtime``: the suite's App (its factory, as ``tidings_app``) in an
  ``AppTestRuntime`` on ``tidings_clock``: every kind in memory, no broker.

docs/testing.md shows a suite using them (examples/shop/tests).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tidings.errors import DefinitionError
from tidings.testing.app_factory import APP_ENV, APP_ID_ENV, build_app
from tidings.testing.brokers import SessionBroker, delete_topics, session_broker

if TYPE_CHECKING:
    from tidings.shell.app import App
    from tidings.testing.processes import WorkerProcess
    from tidings.testing.app_runtime import AppTestRuntime
    from tidings.testing.workflows import FakeClock, WorkflowTestRuntime

#: The ini option naming the suite's app factory.
APP_INI = "tidings_app"
#: The module every test worker runs; it builds the App from the factory (app_under_test.py).
WORKER_APP_SPEC = "tidings.testing.app_under_test:app"
#: Lines of a worker's log a failed test's report shows.
LOG_TAIL_LINES = 80

_WORKERS_KEY = pytest.StashKey["Workers"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(APP_INI, "tidings: MODULE:FUNCTION building the suite's App from a name, for tidings_app and "
                           "tidings_worker (e.g. examples.shop.app:build)", default="")


# ------------------------------------------------------------------------------ the broker


@pytest.fixture(scope="session")
def tidings_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionBroker]:
    """The session's Kafka broker: ``TIDINGS_BOOTSTRAP``, else a container, else a local one."""
    with session_broker(tmp_path_factory.mktemp("tidings-kafka"), on_progress=_progress(request.config)) as broker:
        yield broker


@pytest.fixture(scope="session")
def tidings_bootstrap(tidings_broker: SessionBroker) -> str:
    """The session's broker's bootstrap address."""
    return tidings_broker.bootstrap


# ----------------------------------------------------------------------------- the app


@pytest.fixture
def tidings_app_spec(request: pytest.FixtureRequest) -> str:
    """``MODULE:FUNCTION`` of the suite's app factory: the ini option ``tidings_app``.

    Override this fixture in a ``conftest.py`` to give a directory another App.
    """
    spec = str(request.config.getini(APP_INI) or "")
    if not spec:
        pytest.fail(f"tidings_app needs the suite's app factory: set `{APP_INI} = MODULE:FUNCTION` in the pytest "
                    f"ini options (a function that builds the App from a name), or override the tidings_app_spec "
                    f"fixture", pytrace=False)
    return spec


@pytest.fixture
def tidings_app_id(tidings_bootstrap: str) -> Iterator[str]:
    """A fresh app name, so the test's topics and consumer groups are its own.

    Every topic under it (``{app_id}.``) is deleted when the test ends: set up before the
    app and its workers, this fixture is torn down after them.
    """
    app_id = f"t{uuid.uuid4().hex[:12]}"
    yield app_id
    delete_topics(tidings_bootstrap, f"{app_id}.")


@pytest.fixture
def tidings_app(
    tidings_app_spec: str, tidings_app_id: str, tidings_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[App]:
    """The suite's App under the test's own name, its topics created on the session's broker.

    The factory is found first (``tidings_app_spec`` is set up before the app id), so a
    suite that names none fails at once, with what to set, before any topic is made.

    ``TIDINGS_BOOTSTRAP`` names the session's broker for the test, so the App's handles
    and ``app.client()`` reach it; the clients the test opened are closed after it.
    """
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", tidings_bootstrap)
    try:
        app = build_app(tidings_app_spec, tidings_app_id)
    except DefinitionError as exc:
        pytest.fail(f"tidings_app: {exc}", pytrace=False)
    app.apply_topics(tidings_bootstrap, out=lambda _line: None)
    yield app
    for handle in app.workflows:
        handle.close()
    for client in list(app._clients.values()):  # noqa: SLF001 - the App keeps no public list of them
        client.close()


# ---------------------------------------------------------------------------- workers


class Workers:
    """``tidings worker`` processes of the test's App; each is stopped when the test ends.

    Args:
        bootstrap: The broker.
        app_spec: The suite's app factory (``MODULE:FUNCTION``).
        app_id: The test's app name.
        directory: Where each worker keeps its RocksDB directory and log.
        cwd: Where workers run (the rootdir: the suite's modules import from it).
        pythonpath: More import paths for the workers (pytest's ``pythonpath`` ini option).
    """

    def __init__(
        self, bootstrap: str, app_spec: str, app_id: str, directory: Path, cwd: Path, pythonpath: list[str]
    ) -> None:
        self._bootstrap = bootstrap
        self._directory = directory
        self._cwd = cwd
        paths = [*pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])]
        self._env = {APP_ENV: app_spec, APP_ID_ENV: app_id, **({"PYTHONPATH": os.pathsep.join(paths)} if paths else {})}
        self.started: list[WorkerProcess] = []

    def start(
        self,
        name: str = "w1",
        *,
        env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
        instance_id: str | None = None,
    ) -> WorkerProcess:
        """Start a worker of the test's App.

        Args:
            name: Its name: its data directory and log are ``{name}`` and ``{name}.log``.
            env: More environment variables for it (what the suite's module reads).
            data_dir: Another worker's data directory, to restart that worker's state.
            instance_id: ``TIDINGS_INSTANCE_ID``: a static member takes its partitions back
                at once when restarted with the same id.

        Raises:
            ValueError: ``name`` is not a plain name, or a worker of that name is running.
        """
        from tidings.testing.processes import WorkerProcess

        if not isinstance(name, str) or not name or not all(ch.isalnum() or ch in "-_" for ch in name):
            raise ValueError(f"a worker's name must be letters, digits, '-' or '_' (it names its directory), "
                             f"not {name!r}")
        if any(worker.log_path.stem == name and worker.running for worker in self.started):
            raise ValueError(f"worker {name!r} is running: stop or kill it first, or give another name")
        extra = dict(env or {})
        if instance_id:
            extra["TIDINGS_INSTANCE_ID"] = instance_id
        worker = WorkerProcess(
            WORKER_APP_SPEC,
            bootstrap=self._bootstrap,
            data_dir=data_dir or self._directory / name,
            log_path=self._directory / f"{name}.log",
            env={**self._env, **extra},
            cwd=self._cwd,
        )
        self.started.append(worker)
        return worker.start()

    def stop_all(self, timeout: float = 20.0) -> None:
        """Stop every worker still running (SIGTERM; SIGKILL after ``timeout``)."""
        for worker in self.started:
            worker.stop(timeout)


@pytest.fixture
def tidings_workers(
    request: pytest.FixtureRequest, tidings_app: App, tidings_bootstrap: str, tidings_app_spec: str, tmp_path: Path
) -> Iterator[Workers]:
    """Start workers of the test's App with ``tidings_workers.start(name)``; all stop after the test."""
    config = request.config
    workers = Workers(tidings_bootstrap, tidings_app_spec, tidings_app.name, tmp_path / "tidings-workers",
                      config.rootpath, [str(path) for path in config.getini("pythonpath") or []])
    request.node.stash[_WORKERS_KEY] = workers
    try:
        yield workers
    finally:
        workers.stop_all()


@pytest.fixture
def tidings_worker(tidings_workers: Workers) -> WorkerProcess:
    """One started worker of the test's App (``tidings_workers.start()``), stopped after the test."""
    return tidings_workers.start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries each of its workers' log tails."""
    report = yield
    workers = item.stash.get(_WORKERS_KEY, None)
    if report.failed and workers is not None:
        for worker in workers.started:
            report.sections.append((f"tidings worker {worker.log_path.stem} (pid {worker.pid})",
                                    worker.log_tail(LOG_TAIL_LINES)))
    return report


# ------------------------------------------------------------------------ in memory


@pytest.fixture
def tidings_clock() -> FakeClock:
    """A fake clock at 2026-01-01T00:00Z that moves only when the test moves it."""
    from tidings.testing.workflows import FakeClock

    return FakeClock()


@pytest.fixture
def tidings_runtime(tidings_clock: FakeClock) -> WorkflowTestRuntime:
    """An in-memory workflow runtime on ``tidings_clock``: ``tidings_runtime.register(handle.definition)``."""
    from tidings.testing.workflows import WorkflowTestRuntime

    return WorkflowTestRuntime(clock=tidings_clock)


@pytest.fixture
def tidings_app_runtime(tidings_app_spec: str, tidings_clock: FakeClock) -> AppTestRuntime:
    """The suite's App, built by its factory under the name ``memory``, in an ``AppTestRuntime``
    on ``tidings_clock``: its workflows, aggregates, sagas, projections and schedules in memory.
    Needs no broker (docs/testing.md, "The in-memory runtime")."""
    from tidings.testing.app_runtime import AppTestRuntime

    return AppTestRuntime(build_app(tidings_app_spec, "memory"), clock=tidings_clock)


def _progress(config: pytest.Config) -> Callable[[str], None]:
    # Session fixtures run under output capture; suspend it around each line so a first
    # download of Kafka's jars (~40 s) shows its progress instead of looking like a hang.
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def write(line: str) -> None:
        if reporter is None:
            return
        if capture is None:
            reporter.write_line(f"[tidings broker] {line}")
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"[tidings broker] {line}")

    return write
