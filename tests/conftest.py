"""Fixtures every test directory shares: one Kafka broker per session, fresh app ids.

The broker comes from, in order: ``TIDINGS_BOOTSTRAP``; testcontainers' Kafka when a Docker
engine answers; a local Apache Kafka that tidings provisions and starts in a temp dir. Tests that
need it fail (never skip) when none of these works.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tidings.broker import LocalBroker
from tests.kafka_clients import kafka
from tests.kafka_cluster import kafka_cluster as kafka_cluster  # registers the fixture
from tests.secured_broker import secured_broker  # noqa: F401 - a fixture, for every test dir


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="also run the tests marked long (the ten-round chaos variants)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the ``long`` variants unless ``--long`` asks for them (CI runs the short ones)."""
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="a long variant: run with --long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kafka_bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Yield the bootstrap address of the session's Kafka broker, starting one if needed."""
    configured = os.environ.get("TIDINGS_BOOTSTRAP")
    if configured:
        yield configured
    elif _docker_answers():
        with _kafka_container() as bootstrap:
            yield bootstrap
    else:
        broker = LocalBroker(
            tmp_path_factory.mktemp("kafka"), on_progress=_terminal_writer(request.config)
        )
        bootstrap = broker.start()
        try:
            yield bootstrap
        finally:
            broker.stop()


@pytest.fixture
def guarantee(request: pytest.FixtureRequest) -> str:
    """The processing guarantee the test's workers run with (``TIDINGS_PROCESSING_GUARANTEE``).

    A test marked ``tests.workers.both_guarantees`` gets each in turn; any other gets the
    environment's (so a whole run with ``TIDINGS_PROCESSING_GUARANTEE=exactly_once`` runs every
    worker exactly once), else at least once.
    """
    param = getattr(request, "param", None)
    return str(param or os.environ.get("TIDINGS_PROCESSING_GUARANTEE") or "at_least_once")


@pytest.fixture
def app_id(request: pytest.FixtureRequest) -> Iterator[str]:
    """Return a fresh app id, so each test's topics and consumer groups are its own.

    A test that used the broker has its app's topics deleted when it ends (after its workers
    stopped: this fixture is set up first, so it is torn down last). A whole run creates
    thousands of partitions otherwise, and a broker holds files open for each.
    """
    app_id = f"t{uuid.uuid4().hex[:12]}"
    yield app_id
    if "kafka_bootstrap" in request.fixturenames:
        _delete_topics(request.getfixturevalue("kafka_bootstrap"), f"{app_id}.")
    if "kafka_cluster" in request.fixturenames:
        _delete_topics(request.getfixturevalue("kafka_cluster").bootstrap, f"{app_id}.")


def _delete_topics(bootstrap: str, prefix: str) -> None:
    # Best effort: a broker that does not answer fails the next test that needs it, not this one.

    admin = kafka(bootstrap).admin()
    try:
        names = [name for name in admin.list_topics(timeout=10).topics if name.startswith(prefix)]
        if names:
            for future in admin.delete_topics(names, operation_timeout=30).values():
                future.result(timeout=30)
    except Exception:  # noqa: BLE001 - cleanup must not fail a test that passed
        pass


def _docker_answers() -> bool:
    # No engine is the common case here; answer within a second or two and never raise.
    try:
        import docker

        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextmanager
def _kafka_container() -> Iterator[str]:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.10 keeps it at the old path
        from testcontainers.kafka import KafkaContainer
    with KafkaContainer().with_kraft() as kafka:
        yield kafka.get_bootstrap_server()


def _terminal_writer(config: pytest.Config) -> Callable[[str], None]:
    # Session fixtures run under output capture; suspend it around each line so a 40 s first
    # download shows its progress instead of looking like a hang.
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
