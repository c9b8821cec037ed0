"""Adding a kind is one module and a pure core function: the counter of ``tests/counter_kind.py``.

The counter is declared by a test's App with ``app.host(CounterKind(app, "clicks"))``
(``counter_apps.py``); ``app.py`` and the runtime know nothing of it, and it knows nothing
of them but the narrow ``KindContext`` and the hosting protocol. A worker process runs it
on the real broker: each increment is counted once per id, in order, and a record that is
no increment is dead-lettered while counting goes on.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
import tidings.shell.app
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests import counter_kind
from tests.counter_kind import INCREMENT, CounterKind, count_increment, restore_count
from tests.integration.counter_apps import build
from tests.kafka_clients import kafka
from tests.workers import Workers

TIMEOUT = 45.0


def test_the_counter_core_counts_a_new_increment_and_skips_one_counted_already() -> None:
    counts = {"a": 2}
    assert count_increment(counts, counted_up_to=7, counter_id="a", offset=8) == 3
    assert count_increment(counts, counted_up_to=7, counter_id="b", offset=8) == 1
    assert count_increment(counts, counted_up_to=7, counter_id="a", offset=7) is None
    assert restore_count(counts, "a", 3)
    assert not restore_count(counts, "a", 2)  # a second record at a number already counted
    assert not restore_count(counts, "a", 4)


def test_the_counter_kind_imports_neither_the_app_nor_another_kind_nor_faust() -> None:
    tree = ast.parse(Path(counter_kind.__file__).read_text(encoding="utf-8"))
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    forbidden = ("tidings.shell.app", "tidings.shell.kinds", "tidings.shell.client", "faust", "mode")
    assert not [name for name in imported if name.startswith(forbidden)], imported
    # And the App has no code of it: the kind is hosted like any other (``app.host``).
    assert "CounterKind" not in inspect.getsource(tidings.shell.app)


@pytest.fixture
def counter_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.counter_apps:app")
    yield started
    started.kill_all()


def test_a_kind_declared_with_app_host_is_run_by_a_worker(
    kafka_bootstrap: str, app_id: str, counter_workers: Workers
) -> None:
    app = build(app_id)
    kind = next(h for h in app.hosted if isinstance(h, CounterKind))
    assert {spec.name for spec in kind.topic_specs()} <= {spec.name for spec in app.topic_specs()}
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    worker = counter_workers.start()

    producer = kafka(kafka_bootstrap).producer()
    increments = ["a", "b", "a", "c", "a", "b"]
    for counter_id in increments[:3]:
        producer.produce(kind.topics.inbox, INCREMENT, counter_id.encode(),
                         partition=partition_for(counter_id, app.partitions))
    producer.produce(kind.topics.inbox, b"+2", b"a", partition=partition_for("a", app.partitions))
    for counter_id in increments[3:]:
        producer.produce(kind.topics.inbox, INCREMENT, counter_id.encode(),
                         partition=partition_for(counter_id, app.partitions))
    assert producer.flush(30) == 0

    def outcomes() -> dict[str, list[int]]:
        counted: dict[str, list[int]] = {}
        for record in read_topic(kafka_bootstrap, kind.topics.outcomes):
            counted.setdefault((record.key or b"").decode(), []).append(int(record.value or b""))
        return counted

    assert_eventually(lambda: sum(map(len, outcomes().values())) >= len(increments), timeout=TIMEOUT,
                      interval=0.3, message=worker.log_tail())
    assert outcomes() == {"a": [1, 2, 3], "b": [1, 2], "c": [1]}, worker.log_tail()
    letters = [avro.decode_as(r.value or b"", DeadLetter) for r in read_topic(kafka_bootstrap, kind.topics.deadletter)]
    assert [(letter.source_topic, letter.key, letter.value) for letter in letters] == [
        (kind.topics.inbox, b"a", b"+2")
    ]
    assert worker.running
