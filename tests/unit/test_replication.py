"""Replication settings: the App's, the environment's and the CLI's, and what they refuse.

Every hostile value of ``--replication-factor`` / ``--min-insync-replicas`` (0, negative,
not an integer, more in-sync replicas than replicas) is a usage error naming the value, and
nothing contacts Kafka. The broker's defaults stay the default, so one node keeps working.
"""

from __future__ import annotations

import pytest

from tidings import App
from tidings.cli.main import main
from tidings.errors import DefinitionError
from tidings.shell.runtime.topics import Replication, spec_for

APP = "examples.bank.app:app"


def test_by_default_every_topic_gets_the_broker_s_replication(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDINGS_REPLICATION_FACTOR", raising=False)
    monkeypatch.delenv("TIDINGS_MIN_INSYNC_REPLICAS", raising=False)
    specs = App("one").topic_specs()
    assert specs and all(s.replication_factor == -1 and "min.insync.replicas" not in s.config for s in specs)


def test_the_app_s_replication_reaches_every_topic_it_declares() -> None:
    app = App("three", replication_factor=3, min_insync_replicas=2)

    async def w(ctx: object, x: object) -> object:
        return x

    app.workflow("w")(w)
    specs = app.topic_specs()
    assert {s.name for s in specs} >= {"three.workflow.w.inbox", "three.workflow.w.journal", "three.replies"}
    assert all(s.replication_factor == 3 and s.config["min.insync.replicas"] == "2" for s in specs)
    # Role configs stay: replication is added, not put in their place.
    assert all("cleanup.policy" in s.config for s in specs)


def test_the_environment_gives_the_replication_when_the_app_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDINGS_REPLICATION_FACTOR", "3")
    monkeypatch.setenv("TIDINGS_MIN_INSYNC_REPLICAS", "2")
    assert App("env").replication() == Replication(3, 2)
    assert App("explicit", replication_factor=5).replication() == Replication(5, 2)
    monkeypatch.setenv("TIDINGS_REPLICATION_FACTOR", "three")
    with pytest.raises(DefinitionError, match="TIDINGS_REPLICATION_FACTOR='three' is not an integer"):
        App("env").topic_specs()


@pytest.mark.parametrize(("factor", "min_insync", "reason"), [
    (0, None, "replication factor must be a positive integer or -1"),
    (-2, None, "replication factor must be a positive integer or -1"),
    (True, None, "replication factor must be a positive integer or -1"),
    (3, 0, "min.insync.replicas must be a positive integer"),
    (3, -1, "min.insync.replicas must be a positive integer"),
    (1, 2, "min.insync.replicas 2 is more than the replication factor 1"),
])
def test_an_unusable_replication_is_refused_when_declared(factor: object, min_insync: object, reason: str) -> None:
    with pytest.raises(DefinitionError, match=reason):
        App("bad", replication_factor=factor, min_insync_replicas=min_insync)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match=reason):
        Replication(factor, min_insync)  # type: ignore[arg-type]


def test_the_broker_default_keeps_a_spec_s_own_factor() -> None:
    spec = spec_for("events", "a.aggregate.b.events", partitions=2)
    assert Replication().applied([spec]) == [spec]
    assert Replication(3, 2).applied([spec])[0].replication_factor == 3


def test_topics_show_puts_the_flags_replication_on_every_topic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "show", APP, "--replication-factor", "3", "--min-insync-replicas", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(" replication=3 " in line and "min.insync.replicas=2" in line for line in lines)


@pytest.mark.parametrize(("flags", "says"), [
    (["--replication-factor", "0"], "0 replicas: give a positive count, or -1"),
    (["--replication-factor", "-3"], "-3 replicas: give a positive count, or -1"),
    (["--replication-factor", "2.5"], "'2.5' is not an integer"),
    (["--replication-factor", ""], "'' is not an integer"),
    (["--min-insync-replicas", "0"], "0: at least 1 replica must have a write"),
    (["--min-insync-replicas", "-1"], "-1: at least 1 replica must have a write"),
    (["--min-insync-replicas", "two"], "'two' is not an integer"),
])
def test_hostile_replication_flags_are_usage_errors(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for action in (["topics", "show", APP], ["topics", "apply", APP, "--bootstrap", "127.0.0.1:1"]):
        with pytest.raises(SystemExit) as exited:
            main([*action, *flags])
        assert exited.value.code == 2
        assert says in capsys.readouterr().err


def test_more_in_sync_replicas_than_replicas_is_refused_before_kafka_is_asked(capsys: pytest.CaptureFixture[str]) -> None:
    # 127.0.0.1:1 answers nothing: reaching it would exit 69, not 1.
    code = main(["topics", "apply", APP, "--bootstrap", "127.0.0.1:1",
                 "--replication-factor", "2", "--min-insync-replicas", "3"])
    assert code == 1
    assert "min.insync.replicas 3 is more than the replication factor 2" in capsys.readouterr().err
