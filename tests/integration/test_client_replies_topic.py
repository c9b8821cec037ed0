"""A named client is answered on its own replies topic, ``{app}.replies.NAME``, not the shared one.

``tidings acls --client User:NAME`` lets only that principal read it; here (no authorizer)
the test shows where the worker writes the answer and that the client's readers use
consumer groups under ``{app}.client.``, which one prefixed Group ACL covers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.shell.runtime.acls import client_replies_topic
from tidings.shell.runtime.topics import apply_topics, spec_for
from tidings.testing import read_topic
from tests.integration.kcat_apps import PARTITIONS, Add, build, source_topic
from tests.kafka_clients import kafka
from tests.workers import Workers

pytestmark = pytest.mark.integration


@pytest.fixture
def named_app(kafka_bootstrap: str, app_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    app = build(app_id)
    # The flow's source is any producer's topic: the app does not declare it.
    source = spec_for("inbox", source_topic(app_id), partitions=PARTITIONS)
    own = spec_for("replies", client_replies_topic(app_id, "User:teller"), partitions=app.partitions)
    apply_topics(kafka(kafka_bootstrap), [*app.topic_specs(), own, source], out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


def test_a_named_client_s_verdict_comes_on_its_own_replies_topic(
    kafka_bootstrap: str, app_id: str, named_app: App, tmp_path: Path
) -> None:
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.kcat_apps:app")
    workers.start()
    client = named_app.client(name="teller")
    try:
        assert client.replies_topic == f"{app_id}.replies.teller"
        tally = named_app.aggregates[0]
        try:
            reply = asyncio.run(client.send(tally, "t-1", Add(amount=2), command_id="c-1", timeout=60))
        except TimeoutError as exc:
            raise AssertionError(workers.log_tail()) from exc
        assert reply is not None
        own = read_topic(kafka_bootstrap, f"{app_id}.replies.teller")
        shared = read_topic(kafka_bootstrap, f"{app_id}.replies")
        assert [r.key for r in own] == [b"c-1"] and shared == []
    finally:
        client.close()
        workers.kill_all()
