"""Fixtures every test directory shares: one Kafka broker per session, fresh app ids.

The broker is the tidings pytest plugin's (``tidings_bootstrap``, tidings/testing/brokers.py):
``TIDINGS_BOOTSTRAP``; testcontainers' Kafka when a Docker engine answers; a local Apache Kafka
that tidings provisions and starts in a temp dir, stopped by its PID at the end. Tests that need
it fail (never skip) when none of these works.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tidings.testing.brokers import delete_topics
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
def kafka_bootstrap(tidings_bootstrap: str) -> str:
    """The bootstrap address of the session's Kafka broker: the tidings pytest plugin's
    ``tidings_bootstrap`` (tidings.testing.pytest_plugin, loaded by the ini options'
    ``-p``), so the project's tests and the plugin's fixtures share one broker."""
    return tidings_bootstrap


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
    delete_topics(bootstrap, prefix)
