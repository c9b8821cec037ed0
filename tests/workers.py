"""Fixtures for tests that run tidings workers as child processes against the real broker."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.shell.runtime.kafka import watermarks
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tidings.testing.topics import read_topic

from .integration.apps import build
from tests.kafka_clients import kafka

ROOT = Path(__file__).resolve().parent.parent

#: The processing guarantees a worker offers, as ``TIDINGS_PROCESSING_GUARANTEE`` spells them.
AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"

#: Run a test once per guarantee (ids ``alo`` / ``eos``): the worker fixtures take the
#: ``guarantee`` fixture (tests/conftest.py), which this parametrizes indirectly.
both_guarantees = pytest.mark.parametrize(
    "guarantee", [AT_LEAST_ONCE, EXACTLY_ONCE], ids=["alo", "eos"], indirect=True
)

#: For a test whose premise exactly-once removes: skipped when the environment asks for it.
only_at_least_once = pytest.mark.skipif(
    os.environ.get("TIDINGS_PROCESSING_GUARANTEE") == EXACTLY_ONCE,
    reason="at least once only: it plays a zombie by writing a journal record outside any "
    "transaction and expects the owner to notice the offset gap; under exactly-once commit "
    "markers take offsets, so foreign-writer detection is off and Kafka's fencing stops "
    "zombies instead (tests/chaos/test_exactly_once_fencing.py)",
)


def assert_each_key_once_when_committed(bootstrap: str, topic: str) -> None:
    """Exactly-once: a ``read_committed`` reader of a journal (keys ``{instance}/{seq}`` or
    ``{id}/{version}``) sees no key twice, and no transaction stays open on it.

    What ``read_uncommitted`` holds beyond that are aborted records (a killed worker's open
    transaction); whether there are any depends on where a kill fell, so it is printed, not
    required.
    """
    committed = read_topic(bootstrap, topic)
    keys = Counter(record.key for record in committed)
    assert [key for key, n in keys.items() if n > 1] == [], f"{topic}: a key is visible twice"
    written = read_topic(bootstrap, topic, isolation="read_uncommitted")
    print(f"\n{topic}: {len(committed)} records committed, {len(written) - len(committed)} more "
          f"read_uncommitted (aborted)")
    # Nothing is left open: the last stable offset is the end of every partition.
    assert_eventually(lambda: topic_ends(bootstrap, topic, "read_committed")
                      == topic_ends(bootstrap, topic, "read_uncommitted"),
                      timeout=15, message=f"a transaction stays open on {topic}")


def topic_ends(bootstrap: str, topic: str, isolation: str) -> list[int]:
    """Each partition's end as a reader of ``isolation`` sees it (read_committed: the LSO)."""
    consumer = kafka(bootstrap).consumer(**{"group.id": f"ends-{uuid.uuid4().hex}",
                         "isolation.level": isolation})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        return [watermarks(consumer, topic, p)[1] for p in partitions]
    finally:
        consumer.close()


def applied(bootstrap: str, app: App) -> Iterator[App]:
    """Apply ``app``'s topics, yield it, close the clients the test made of it: the body of
    every test-App fixture."""
    apply_topics(kafka(bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for client in list(app._clients.values()):
        client.close()


@pytest.fixture
def test_app(kafka_bootstrap: str, app_id: str) -> Iterator[App]:
    """The test App (account + tally) named for this test, its topics applied."""
    yield from applied(kafka_bootstrap, build(app_id))


class Workers:
    """Worker processes of one test's App; every one is killed when the test ends.

    Args:
        bootstrap: The broker.
        app_id: The App's name (``TEST_APP_ID`` in the worker).
        tmp_path: Where each worker keeps its data directory and log.
        app_spec: The ``MODULE:APP`` the workers run.
        env: More environment for the workers.
        guarantee: The processing guarantee (``TIDINGS_PROCESSING_GUARANTEE``); None leaves
            the environment's, else the App's.
    """

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        tmp_path: Path,
        *,
        app_spec: str = "tests.integration.apps:app",
        env: dict[str, str] | None = None,
        guarantee: str | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._tmp_path = tmp_path
        self._app_spec = app_spec
        self._env = {"TEST_APP_ID": app_id, **(env or {})}
        if guarantee is not None:
            self._env["TIDINGS_PROCESSING_GUARANTEE"] = guarantee
        self.guarantee = guarantee
        self.started: list[WorkerProcess] = []

    def start(
        self, name: str = "w1", *, data_dir: Path | None = None, instance_id: str | None = None,
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """Start a worker; ``data_dir`` reuses another's RocksDB (a restart); ``env``: more for this one."""
        env = {**self._env, **(env or {})}
        if instance_id:
            env["TIDINGS_INSTANCE_ID"] = instance_id
        worker = WorkerProcess(
            self._app_spec,
            bootstrap=self._bootstrap,
            data_dir=data_dir or self._tmp_path / name,
            log_path=self._tmp_path / f"{name}.log",
            env=env,
            cwd=ROOT,
        )
        self.started.append(worker)
        return worker.start()

    def stop_all(self) -> None:
        """Stop every worker cleanly (SIGTERM)."""
        for worker in self.started:
            worker.stop()

    def kill_all(self) -> None:
        """SIGKILL every worker."""
        for worker in self.started:
            worker.kill()

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of every worker's log, for assertion messages."""
        tails = []
        for worker in self.started:
            if worker.log_path.exists():
                text = worker.log_path.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"--- {worker.log_path.name}\n" + "\n".join(text))
        return "\n".join(tails)


@pytest.fixture
def workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, guarantee: str) -> Iterator[Workers]:
    """Start worker processes of the test App under ``guarantee``; all are killed at the end."""
    started = Workers(kafka_bootstrap, app_id, tmp_path, guarantee=guarantee)
    yield started
    started.kill_all()
