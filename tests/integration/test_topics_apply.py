"""apply_topics against a real broker: creates, is idempotent, reports drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)

from tidings.cli.main import main
from tidings.errors import BrokerError
from tidings.shell.runtime.topics import (
    Replication,
    TopicDifference,
    apply_topics,
    deadletter_topic,
    spec_for,
    topic_name,
)
from tests.kafka_clients import kafka

pytestmark = pytest.mark.integration


def specs_of(app_id: str) -> list:
    return [
        spec_for("commands", topic_name(app_id, "aggregate", "account", "commands"), partitions=2),
        spec_for("events", topic_name(app_id, "aggregate", "account", "events"), partitions=2),
        spec_for("outcomes", topic_name(app_id, "workflow", "enrich", "outcomes"), partitions=2),
        spec_for("deadletter", deadletter_topic(app_id), partitions=2),
    ]


def test_a_second_apply_creates_nothing_and_reports_nothing(kafka_bootstrap: str, app_id: str) -> None:
    specs = specs_of(app_id)
    lines: list[str] = []
    first = apply_topics(kafka(kafka_bootstrap), specs + specs[:1], out=lines.append)
    assert first.created == tuple(sorted(spec.name for spec in specs))
    assert first.in_sync
    assert lines == [f"created {name}" for name in first.created]

    second = apply_topics(kafka(kafka_bootstrap), specs, out=lines.append)
    assert second.created == ()
    assert second.differences == ()
    assert len(lines) == len(specs)


def test_settings_changed_out_of_band_are_reported_not_reverted(kafka_bootstrap: str, app_id: str) -> None:
    specs = specs_of(app_id)
    apply_topics(kafka(kafka_bootstrap), specs, out=lambda _: None)
    commands, events = specs[0].name, specs[1].name
    admin = kafka(kafka_bootstrap).admin()
    altered = ConfigResource(
        ConfigResource.Type.TOPIC,
        commands,
        incremental_configs=[ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([altered]).values():
        future.result(timeout=30)
    for future in admin.create_partitions([NewPartitions(events, 3)]).values():
        future.result(timeout=30)

    lines: list[str] = []
    report = apply_topics(kafka(kafka_bootstrap), specs, out=lines.append)

    assert report.created == ()
    assert set(report.differences) == {
        TopicDifference(commands, "retention.ms", "604800000", "1000"),
        TopicDifference(events, "partitions", "2", "3"),
    }
    assert sorted(lines) == sorted(f"differs {d}" for d in report.differences)
    # Reported, never reverted: the next apply still sees the drift.
    assert set(apply_topics(kafka(kafka_bootstrap), specs, out=lambda _: None).differences) == set(report.differences)


def test_an_unreachable_broker_is_a_broker_error() -> None:
    # Port 9 (discard) on localhost: nothing listens, so metadata times out or is refused.
    with pytest.raises(BrokerError, match="applying topics on 127.0.0.1:9"):
        apply_topics(kafka("127.0.0.1:9"), [spec_for("events", "x.events")], out=lambda _: None, timeout=2)


def test_more_replicas_than_the_cluster_has_brokers_is_refused_in_one_line(kafka_bootstrap: str, app_id: str) -> None:
    (spec,) = Replication(3, 2).applied([spec_for("events", topic_name(app_id, "aggregate", "a", "events"))])
    with pytest.raises(BrokerError, match=r"replication factor 3 \(1 brokers answer\).*no more replicas than"):
        apply_topics(kafka(kafka_bootstrap), [spec], out=lambda _: None)


def test_an_existing_topic_with_fewer_replicas_than_asked_is_reported_with_what_to_do(
    kafka_bootstrap: str, app_id: str
) -> None:
    specs = Replication(1, 1).applied(specs_of(app_id))
    first = apply_topics(kafka(kafka_bootstrap), specs, out=lambda _: None)
    assert first.created and first.in_sync  # min.insync.replicas=1 was created as asked
    # The same topics, now asked with three replicas: none can be raised in place.
    lines: list[str] = []
    report = apply_topics(kafka(kafka_bootstrap), Replication(3, 2).applied(specs_of(app_id)), out=lines.append)
    assert report.created == ()
    assert {(d.topic, d.setting, d.expected, d.actual) for d in report.differences} == {
        *((s.name, "replication_factor", "3", "1") for s in specs),
        *((s.name, "min.insync.replicas", "2", "1") for s in specs),
    }
    assert all("kafka-reassign-partitions.sh" in line for line in lines if "replication_factor" in line)


def test_topics_apply_exits_2_when_an_existing_topic_has_fewer_replicas_than_asked(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / f"{app_id}_app.py").write_text(f"from tidings import App\napp = App({app_id!r}, partitions=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    target = f"{app_id}_app:app"
    assert main(["topics", "apply", target, "--bootstrap", kafka_bootstrap,
                 "--replication-factor", "1", "--min-insync-replicas", "1"]) == 0
    assert main(["topics", "apply", target, "--bootstrap", kafka_bootstrap,
                 "--replication-factor", "1", "--min-insync-replicas", "1"]) == 0
    capsys.readouterr()
    assert main(["topics", "apply", target, "--bootstrap", kafka_bootstrap, "--replication-factor", "3"]) == 2
    out = capsys.readouterr().out
    assert f"differs {app_id}.deadletter: replication_factor is '1', the spec says '3'" in out
    assert "Kafka cannot change an existing topic's replication factor" in out
