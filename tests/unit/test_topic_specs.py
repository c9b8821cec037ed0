"""Topic names and the role specifications of topics/roles.toml."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tidings.cli import topics as topics_cli
from tidings.errors import DefinitionError
from tidings.shell.runtime.topics import ROLES, TopicSpec, deadletter_topic, load_roles, spec_for, topic_name

ROLES_FILE = Path(__file__).resolve().parents[2] / "topics" / "roles.toml"


def test_topic_names_follow_app_kind_name_role() -> None:
    assert topic_name("bank", "aggregate", "account", "events") == "bank.aggregate.account.events"
    assert topic_name("bank", "workflow", "enrich", "inbox") == "bank.workflow.enrich.inbox"
    assert deadletter_topic("bank") == "bank.deadletter"


def test_the_shipped_file_specifies_every_role() -> None:
    assert {"commands", "events", "replies", "deadletter", "inbox", "journal", "outcomes", "actions"} <= set(ROLES)
    assert ROLES == load_roles(ROLES_FILE.read_text())


@pytest.mark.parametrize("role", ["events", "journal", "outcomes", "status"])
def test_journals_and_latest_wins_topics_are_compacted(role: str) -> None:
    assert spec_for(role, "t").config["cleanup.policy"] == "compact"


@pytest.mark.parametrize("role", ["commands", "inbox", "replies", "deadletter", "actions"])
def test_transient_topics_are_deleted_after_a_retention(role: str) -> None:
    config = spec_for(role, "t").config
    assert config["cleanup.policy"] == "delete"
    assert int(config["retention.ms"]) > 0


def test_outcomes_keep_a_replaced_value_for_a_minute() -> None:
    assert spec_for("outcomes", "t").config["min.compaction.lag.ms"] == "60000"


def test_spec_for_takes_the_apps_partition_count_over_the_default() -> None:
    assert spec_for("events", "bank.aggregate.account.events").partitions == 12
    spec = spec_for("events", "bank.aggregate.account.events", partitions=3)
    assert spec == TopicSpec("bank.aggregate.account.events", 3, -1, dict(ROLES["events"].config))


def test_a_spec_is_a_copy_callers_cannot_use_to_change_the_role() -> None:
    spec_for("events", "t").config["cleanup.policy"] = "delete"
    assert spec_for("events", "t").config["cleanup.policy"] == "compact"


def test_an_unknown_role_is_a_definition_error_naming_the_roles() -> None:
    with pytest.raises(DefinitionError, match="unknown role 'journals'; roles are actions, commands"):
        spec_for("journals", "t")


def test_a_non_positive_partition_count_is_a_definition_error() -> None:
    with pytest.raises(DefinitionError, match="partitions must be positive"):
        spec_for("events", "t", partitions=0)


def test_role_values_become_the_strings_kafka_reports() -> None:
    roles = load_roles("[defaults]\npartitions = 2\n[roles.x]\n'retention.ms' = 5\n'preallocate' = true\n")
    assert dict(roles["x"].config) == {"retention.ms": "5", "preallocate": "true"}
    assert (roles["x"].partitions, roles["x"].replication_factor) == (2, -1)


def test_a_malformed_roles_file_lists_every_problem() -> None:
    with pytest.raises(DefinitionError) as raised:
        load_roles("[roles.a]\npartitions = 0\n[roles.b]\npartitions = 1\nreplication_factor = 0\n")
    assert len(raised.value.reasons) == 2


class FakeApp:
    def topic_specs(self) -> list[TopicSpec]:
        return [spec_for("events", "demo.aggregate.a.events", partitions=2), spec_for("deadletter", "demo.deadletter")]


APP = FakeApp()


def test_topics_show_prints_each_spec_without_a_broker(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="tidings")
    topics_cli.register(parser.add_subparsers())
    args = parser.parse_args(["topics", "show", f"{__name__}:APP"])
    assert args.run(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("demo.aggregate.a.events partitions=2 replication=-1 cleanup.policy=compact")
    assert lines[1].startswith("demo.deadletter partitions=12")
