"""The pure part of ``tidings list``: filters, counts, order, the table and JSON lines, arguments,
and the indexes built from records (status topic, aggregate event keys)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from tidings.codec import avro
from tidings.cli.list import UsageError, parse
from tidings.inspection.indexes import AggregateIndex, origin_name
from tidings.inspection.listing import Filters, Row, counts_json, counts_line, parse_limit, parse_when, printable, row_json, select, table
from tidings.cli.main import main
from tidings.core.partitioning import partition_for
from tidings.core.workflow_records import WorkflowStatusRecord
from tidings.shell.kinds.workflow.index import STATUSES, StatusIndex
from tidings.shell.runtime.io import Incoming

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MS = int(NOW.timestamp() * 1000)


def rows() -> list[Row]:
    return [
        Row("workflow", "enrich", "a", "RUNNING", MS - 1000),
        Row("workflow", "enrich", "b", "FINISHED", MS - 5000),
        Row("workflow", "enrich", "c", "FINISHED", MS - 3000),
        Row("workflow", "approve", "d", "PARKED", MS - 2000, "a step's kind changed"),
    ]


def test_rows_are_filtered_by_status_and_time_and_counted_before_the_limit() -> None:
    everything = select(rows(), Filters())
    assert [r.id for r in everything.shown] == ["a", "d", "c", "b"]  # newest first
    assert everything.counts == {"RUNNING": 1, "FINISHED": 2, "PARKED": 1}

    finished = select(rows(), Filters(statuses=frozenset({"FINISHED"}), limit=1))
    assert [r.id for r in finished.shown] == ["c"]
    assert (finished.matched, dict(finished.counts)) == (2, {"FINISHED": 2})
    assert counts_line(finished, STATUSES, "instance") == "2 instances: FINISHED 2 (showing the 1 newest; --limit)"

    window = select(rows(), Filters(since=MS - 3000, until=MS - 1000))
    assert [r.id for r in window.shown] == ["d", "c"]  # since inclusive, until exclusive
    assert counts_line(select(rows(), Filters()), STATUSES, "instance") == \
        "4 instances: RUNNING 1, FINISHED 2, PARKED 1"
    assert counts_line(select([], Filters()), STATUSES, "instance") == "0 instances"
    assert counts_json(everything) == {"total": 4, "counts": {"FINISHED": 2, "PARKED": 1, "RUNNING": 1}}


def test_a_row_without_a_time_never_matches_a_time_filter() -> None:
    timeless = Row("aggregate", "tally", "t-1", None, None)
    assert select([timeless], Filters(since=0)).matched == 0
    assert select([timeless], Filters()).matched == 1


def test_the_table_aligns_columns_leaves_out_empty_ones_and_escapes_hostile_ids() -> None:
    lines = table(select(rows(), Filters()).shown)
    assert lines[0].split() == ["NAME", "ID", "STATUS", "SINCE", "DETAIL"]
    assert lines[1].split()[:4] == ["enrich", "a", "RUNNING", "2026-11-30T11:59:59.000Z"]
    assert len({line.index("STATUS") if i == 0 else None for i, line in enumerate(lines)}) == 2
    bare = table([Row("aggregate", "tally", "t-\x1b[31m1\n", None, MS, "")])
    assert bare[0].split() == ["NAME", "ID", "SINCE"]
    assert "\x1b" not in bare[1] and "\n" not in bare[1] and "\\x1b" in bare[1]
    assert printable("order-17") == "order-17"


def test_a_json_line_has_the_time_in_iso_and_ms_and_the_extras() -> None:
    line = row_json(Row("aggregate", "tally", "t-1", None, MS, "version 3", {"version": 3}))
    assert line == {"kind": "aggregate", "name": "tally", "id": "t-1", "status": None,
                    "at": "2026-11-30T12:00:00.000Z", "at_ms": MS, "detail": "version 3", "version": 3}


def test_when_is_a_duration_back_from_now_or_an_iso_time() -> None:
    assert parse_when("90s", now=NOW) == MS - 90_000
    assert parse_when("2h", now=NOW) == MS - 7_200_000
    assert parse_when("2026-11-30T12:00:00Z") == MS
    assert parse_when("2026-11-30T12:00:00") == MS  # UTC when no zone
    assert parse_when("2026-11-30T13:00:00+01:00") == MS
    for bad in ("yesterday", "-1h", "1w", "", "99999999999d"):
        with pytest.raises(ValueError):
            parse_when(bad, now=NOW)
    assert parse_limit("20") == 20
    for bad in ("0", "-3", "ten", "1.5"):
        with pytest.raises(ValueError, match="--limit"):
            parse_limit(bad)


def test_a_dead_letters_origin_names_its_definition() -> None:
    assert origin_name("bank", "bank.aggregate.account.commands") == "account"
    assert origin_name("bank", "bank.workflow.enrich.inbox") == "enrich"
    assert origin_name("bank", "other.aggregate.account.commands") is None
    assert origin_name("bank", "bank.deadletter") is None
    assert origin_name("bank", None) is None


def _status(key: str, value: bytes | None, partition: int | None = None) -> Incoming:
    return Incoming("s", partition_for(key, 4) if partition is None else partition, 0, key.encode(), value)


def test_the_status_index_keeps_the_latest_per_instance_and_skips_what_is_not_its_own() -> None:
    index = StatusIndex("enrich", 4)
    record = lambda i, s, at, w="enrich": avro.encode(WorkflowStatusRecord(i, w, s, at))  # noqa: E731
    index.take(_status("a", record("a", "RUNNING", 1)))
    index.take(_status("a", record("a", "FINISHED", 2)))
    index.take(_status("b", record("b", "RUNNING", 3)))
    index.take(_status("b", None))  # a tombstone removes it
    index.take(_status("c", record("x", "RUNNING", 4)))  # the value names another instance
    index.take(_status("d", record("d", "RUNNING", 4, "other")))  # another workflow's
    index.take(_status("e", record("e", "WEIRD", 4)))  # no such status
    index.take(_status("f", b"not avro"))
    index.take(_status("g", record("g", "RUNNING", 4), partition=(partition_for("g", 4) + 1) % 4))  # misplaced
    index.take(Incoming("s", 0, 0, b"\xff", record("h", "RUNNING", 4)))
    assert {i: (s.status, s.at) for i, s in index.latest.items()} == {"a": ("FINISHED", 2)}
    assert index.skipped == 6


def test_the_aggregate_index_reads_instances_and_versions_from_event_keys() -> None:
    index = AggregateIndex("tally", 4)

    def event(key: bytes, value: bytes | None = b"e", at: int = 10, partition: int | None = None) -> Incoming:
        home = partition_for(key.decode("utf-8", "replace").rpartition("/")[0], 4)
        return Incoming("e", home if partition is None else partition, 0, key, value, {}, at)

    for version in (1, 2, 3):
        index.take(event(f"t-1/{version}".encode(), at=version))
    index.take(event(b"t-1/2", None))  # an erased event
    index.take(event(b"a/b/7"))  # an id with a slash
    for bad in (b"no-version", b"t-2/x", b"/3", b"t-3/-1", b"\xff/1"):
        index.take(event(bad))
    index.take(event(b"t-4/1", partition=(partition_for("t-4", 4) + 1) % 4))
    assert {r.id: (r.extra["version"], r.extra["events"], r.at) for r in index.rows()} == \
        {"t-1": (3, 2, 3), "a/b": (7, 1, 10)}
    assert index.skipped == 6


class _App:
    name = "shop"

    def declared(self, kind: str) -> list[argparse.Namespace]:
        return [argparse.Namespace(name="enrich")] if kind == "workflow" else []

    hosted = [argparse.Namespace(name="enrich")]

    def schedule_handle(self) -> None:
        raise LookupError("no schedules")


def _args(*argv: str) -> argparse.Namespace:
    defaults = {"status": [], "since": None, "until": None, "limit": None, "timeout": None, "name": None,
                "type": [], "started_after": None, "started_before": None, "ended_after": None, "ended_before": None}
    namespace = argparse.Namespace(**defaults)
    namespace.kind = argv[0]
    if len(argv) > 1:
        namespace.name = argv[1]
    return namespace


def test_arguments_are_checked_before_kafka_is_asked() -> None:
    kind_name, _, names, filters = parse(_args("Workflows"), _App())
    assert (kind_name, names, filters) == ("workflow", ["enrich"], Filters())
    args = _args("workflow", "enrich")
    args.status, args.limit = ["running", "PARKED"], "5"
    assert parse(args, _App())[3] == Filters(frozenset({"RUNNING", "PARKED"}), None, None, 5)
    letters = _args("deadletters")
    letters.status = ["DecodeError"]
    assert parse(letters, _App())[3].statuses == {"DecodeError"}
    for kind, option, value, says in [
        ("bogus", None, None, "unknown kind"),
        ("schedule", None, None, "declares no schedules"),
        ("orchestration", "name", "nope", "declares no orchestration 'nope'"),
        ("flow", "status", ["DONE"], "unknown status"),
        ("workflow", "type", ["nope"], "declares no workflow 'nope'"),
        ("workflow", "started_after", "2026-13-01", "--started-after '2026-13-01' is neither"),
        ("workflow", "started_before", "tomorrow", "--started-before 'tomorrow' is neither"),
        ("workflow", "ended_after", "2026-11-30T25:00", "--ended-after"),
        ("workflow", "ended_before", "-5m", "--ended-before"),
        ("aggregate", "started_after", "1h", "no start or end time"),
        ("deadletters", "ended_before", "1h", "no start or end time"),
        ("saga", "status", ["PARKED"], "unknown status"),
        ("workflow", "name", "nope", "declares no workflow 'nope'"),
        ("workflow", "status", ["DONE"], "unknown status"),
        ("aggregate", "status", ["RUNNING"], "no status"),
        ("workflow", "since", "yesterday", "neither a duration"),
        ("workflow", "until", "1w", "neither a duration"),
        ("workflow", "limit", "-1", "--limit"),
        ("workflow", "timeout", -1.0, "--timeout"),
    ]:
        args = _args(kind)
        if option is not None:
            setattr(args, option, value)
        with pytest.raises(UsageError, match=says):
            parse(args, _App())


@pytest.mark.parametrize("argv, says", [
    (["bogus"], "unknown kind 'bogus'"),
    (["workflow", "nope"], "declares no workflow 'nope'"),
    (["workflow", "--since", "soon"], "neither a duration"),
    (["workflow", "--limit", "-3"], "--limit '-3'"),
    (["workflow", "--status", "done"], "unknown status 'done'"),
    (["aggregate", "--status", "x"], "no status"),
])
def test_a_bad_argument_is_one_line_and_exit_2_without_kafka(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", "127.0.0.1:1")  # never reached
    assert main(["list", "examples.shop.app:app", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


# -- describe ------------------------------------------------------------------------------

def test_describe_says_where_an_instance_waits_what_failed_and_who_its_parent_and_children_are() -> None:
    from tidings.inspection.describe_text import describe_lines, describe_workflow
    from tidings.core.workflow.failures import ErrorKind, StepError
    from tidings.core.workflow.journal import SignalReceived, Started, StepCompleted, StepFailed, StepStarted
    from tidings.shell.kinds.workflow.index import InstanceStatus

    records = [
        Started(1, '"ABC"', MS, parent_workflow="order", parent_id="o-1", parent_path="3", parent_token="secret"),
        StepStarted(2, "1", "activity", "charge", MS + 10),
        StepFailed(3, "1", StepError(ErrorKind.ATTEMPTS_EXHAUSTED, "card declined"), at=MS + 20, attempt=3),
        StepStarted(4, "2", "timer", "", MS + 30, due=MS + 60_030),
        StepStarted(5, "3", "signal", "approval", MS + 30, due=MS + 90_030),
        StepStarted(6, "4", "child_start", "ship", MS + 40, token="t0ken"),
        StepCompleted(7, "4", "null", at=MS + 50),
        StepStarted(8, "5", "activity", "score", MS + 60),
        SignalReceived(9, "other", '"x"', MS + 70),
    ]
    child = InstanceStatus("ship", "c-1:4", "RUNNING", MS + 45)
    described = describe_workflow("charge", "c-1", records, InstanceStatus("charge", "c-1", "RUNNING", MS),
                                  {"c-1:4": child}, MS + 1000)
    assert described["parent"] == {"workflow": "order", "id": "o-1", "step": "3"}
    assert [(w["step"], w["kind"], w.get("due_in_ms")) for w in described["waiting"]] == [
        ("2", "timer", 59_030), ("3", "signal", 89_030), ("5", "activity", None)]
    assert described["waiting"][2]["failed_attempts"] == 0 and described["waiting"][2]["for_ms"] == 940
    assert described["waiting"][2]["next_attempt"] is None
    assert described["last_failure"] == {"step": "1", "name": "charge", "at": "2026-11-30T12:00:00.020Z",
                                         "attempt": 3, "kind": "attempts_exhausted", "message": "card declined",
                                         "causes": []}
    assert described["children"] == [{"workflow": "ship", "id": "c-1:4", "step": "4", "reported": None,
                                      "status": {"status": "RUNNING", "since": "2026-11-30T12:00:00.045Z",
                                                 "reason": None}}]
    assert [s["name"] for s in described["pending_signals"]] == ["other"]
    text = "\n".join(describe_lines(described, records))
    assert "secret" not in text and "t0ken" not in text
    assert "waiting on      step 2 timer since" in text and "(in 59.030 s)" in text
    assert "step 5 activity score" in text and "no attempt has failed yet" in text
    assert "last failure    step 1 charge at 2026-11-30T12:00:00.020Z, attempt 3: attempts_exhausted: card declined" in text
    assert "parent          order o-1 (its step 3)" in text and "children        ship c-1:4: RUNNING" in text
    assert "journal (last 5 of 9 records; --journal shows all):" in text
    assert len(describe_lines(described, records, whole_journal=True)) > len(describe_lines(described, records))


def test_describe_shows_the_causes_of_the_last_failure_and_of_a_fault() -> None:
    from tidings.inspection.describe_text import describe_lines, describe_workflow
    from tidings.core.workflow.failures import ErrorKind, StepCause, StepError
    from tidings.core.workflow.journal import Ended, Started, StepFailed, StepStarted

    caused = StepError(ErrorKind.NOT_RETRYABLE, "attempt 1: RuntimeError: charge failed", "RuntimeError",
                       (StepCause("ValueError", "card declined"), StepCause("KeyError", "'pan'")))
    records = [Started(1, '"ABC"', MS), StepStarted(2, "1", "activity", "charge", MS + 10),
               StepFailed(3, "1", caused, at=MS + 20, attempt=1), Ended(4, "faulted", MS + 21, error=caused)]
    described = describe_workflow("charge", "c-1", records, None, {}, MS + 1000)
    assert described["last_failure"]["causes"] == ["ValueError: card declined", "KeyError: 'pan'"]
    assert described["ended"]["causes"] == ["ValueError: card declined", "KeyError: 'pan'"]
    lines = describe_lines(described, records)
    text = "\n".join(lines)
    assert "ended           2026-11-30T12:00:00.021Z faulted: attempt 1: RuntimeError: charge failed" in text
    assert lines.count("                    caused by ValueError: card declined") == 2
    assert lines.count("                    caused by KeyError: 'pan'") == 2


def test_a_describe_argument_that_is_wrong_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", "127.0.0.1:1")  # never reached
    for argv, says in [(["schedule", "x", "y"], "declares no schedules"), (["kitchen", "x", "y"], "not there"),
                       (["saga", "x", "y"], "declares no saga"), (["workflow", "enrich"], "needs NAME and ID"),
                       (["aggregate", "nope", "y"], "declares no aggregate 'nope'"),
                       (["workflow", "nope", "y"], "declares no workflow"),
                       (["workflow", "enrich", ""], "must not be empty"),
                       (["workflow", "enrich", "x" * 10_000], "the limit is")]:
        assert main(["describe", "examples.shop.app:app", *argv]) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err


def test_the_saga_index_decodes_only_each_sagas_last_record() -> None:
    from tidings.inspection.indexes import SagaIndex
    from tidings.core.saga_records import SagaJournalEntry

    def entry(saga_id: str, seq: int, transition: str = "handle", ended: bool = False, saga: str = "transfer",
              reason: str | None = None) -> Incoming:
        value = avro.encode(SagaJournalEntry(saga, saga_id, seq, MS + seq, transition, b'{"phase": "x"}', ended,
                                             reason=reason))
        return Incoming("j", partition_for(saga_id, 4), 0, f"{saga_id}/{seq}".encode(), value)

    index = SagaIndex("transfer", 4)
    for record in [entry("t-1", 1, "start"), entry("t-1", 2), entry("t-1", 3, "stop", ended=True),
                   entry("t-2", 1, "start"), entry("t-2", 1, "handle", ended=True),  # a zombie's second seq 1
                   entry("t-3", 1, "start"), entry("t-3", 2, "fault", ended=True, reason="endless Goto"),
                   entry("t-4", 1, saga="other"), Incoming("j", 0, 0, b"junk", b"x")]:
        index.take(record)
    rows = {row.id: row for row in index.rows()}
    assert {i: (r.status, r.at, r.extra["seq"]) for i, r in rows.items()} == {
        "t-1": ("ENDED", MS + 3, 3), "t-2": ("RUNNING", MS + 1, 1), "t-3": ("FAULTED", MS + 2, 2)}
    assert rows["t-3"].detail == "fault: endless Goto" and rows["t-1"].detail == 'stop {"phase": "x"}'
    assert index.skipped == 2


def test_describe_a_saga_shows_its_state_the_commands_sent_and_the_replies_it_expects() -> None:
    from tidings.inspection.describe_text import describe_saga, saga_lines
    from tidings.core.saga_records import SagaCommandRecord, SagaJournalEntry

    take = SagaCommandRecord("vault", "v-1", "c-1", "Take", b'{"amount": 30}', expect_within_ms=12_000,
                             resend_every_ms=500)
    note = SagaCommandRecord("ledger", "l-1", "c-2", "Note", b'{}')
    entries = [SagaJournalEntry("transfer", "t-1", 1, MS, "start", b'{"phase": "taking"}', cause="e-1",
                                commands=(take, note))]
    described = describe_saga("transfer", "t-1", entries, MS + 2000)
    assert (described["status"], described["since"], described["state"]) == (
        "RUNNING", "2026-11-30T12:00:00.000Z", '{"phase": "taking"}')
    assert described["expectations"] == [{"aggregate": "vault", "aggregate_id": "v-1", "command_id": "c-1",
                                          "type": "Take", "due": "2026-11-30T12:00:12.000Z", "due_in_ms": 10_000,
                                          "resend_every_ms": 500}]
    text = "\n".join(saga_lines(described, entries))
    assert "expecting       a reply from vault v-1 to Take by 2026-11-30T12:00:12.000Z (in 10.000 s), resent every 500 ms" in text
    assert "sent            Take to vault v-1 (command c-1)" in text
    assert "#1  start {\"phase\": \"taking\"}, sent Take to vault v-1, Note to ledger l-1" in text
    done = [*entries, SagaJournalEntry("transfer", "t-1", 2, MS + 5, "stop", b'{"phase": "done"}', True)]
    ended = describe_saga("transfer", "t-1", done, MS + 2000)
    assert (ended["status"], ended["expectations"], ended["transition"]) == ("ENDED", [], "stop")


def test_start_and_end_windows_keep_rows_that_know_those_times() -> None:
    listed = [
        Row("workflow", "enrich", "early", "FINISHED", MS - 100, started_at=MS - 5000, ended_at=MS - 100),
        Row("workflow", "enrich", "late", "RUNNING", MS - 1000, started_at=MS - 1000),
        Row("workflow", "approve", "old", "FINISHED", MS - 50, ended_at=MS - 50),  # a v1 record: no start
    ]
    ids = lambda **f: [r.id for r in select(listed, Filters(**f)).shown]  # noqa: E731
    assert ids(started_after=MS - 2000) == ["late"]
    assert ids(started_before=MS - 2000) == ["early"]
    assert ids(started_after=MS - 5000, started_before=MS - 1000) == ["early"]  # [after, before)
    assert ids(ended_after=MS - 200) == ["old", "early"]  # a running row never matches --ended-*
    assert ids(ended_before=MS - 60) == ["early"]
    assert ids(names=frozenset({"approve"})) == ["old"]
    line = row_json(listed[0])
    assert (line["started_at"], line["ended_at"]) == ("2026-11-30T11:59:55.000Z", "2026-11-30T11:59:59.900Z")
    assert "ended_at" not in row_json(listed[1])


def test_a_status_record_without_started_at_reads_its_start_from_a_running_record() -> None:
    index = StatusIndex("enrich", 4)
    index.take(_status("a", avro.encode(WorkflowStatusRecord("a", "enrich", "RUNNING", 7))))
    index.take(_status("b", avro.encode(WorkflowStatusRecord("b", "enrich", "FINISHED", 9))))
    index.take(_status("c", avro.encode(WorkflowStatusRecord("c", "enrich", "FAULTED", 9, started_at=3))))
    assert {i: (s.started_at, s.ended_at) for i, s in index.latest.items()} == {
        "a": (7, None), "b": (None, 9), "c": (3, 9)}


def test_the_orchestration_index_reads_journal_keys_and_outcomes_and_skips_the_rest() -> None:
    from tidings.inspection.kind_indexes import OrchestrationIndex
    from tidings.core.orchestration_records import OrchestrationOutcome

    index = OrchestrationIndex("fulfil", 4)

    def journal(key: str, at: int, partition: int | None = None) -> Incoming:
        owner = key.rpartition("/")[0] or key
        return Incoming("j", partition_for(owner, 4) if partition is None else partition, 0, key.encode(), b"x",
                        timestamp_ms=at)

    for key, at in (("o-1/1", 10), ("o-1/2", 20), ("o-1/3", 30), ("o-2/1", 15)):
        index.take_journal(journal(key, at))
    for bad in ("o-3", "o-3/0", "o-3/x", "/1"):
        index.take_journal(journal(bad, 1))
    index.take_journal(journal("o-4/1", 1, partition=(partition_for("o-4", 4) + 1) % 4))
    outcome = lambda o, name="fulfil": avro.encode(OrchestrationOutcome(name, o, 3, 40, "Shipped", b"{}"))  # noqa: E731
    index.take_outcome(Incoming("o", partition_for("o-1", 4), 0, b"o-1", outcome("o-1")))
    index.take_outcome(Incoming("o", partition_for("o-2", 4), 0, b"o-2", outcome("o-2", "other")))
    index.take_outcome(Incoming("o", partition_for("o-2", 4), 0, b"o-2", b"not avro"))
    rows = {r.id: r for r in index.rows()}
    assert (rows["o-1"].status, rows["o-1"].at, rows["o-1"].started_at, rows["o-1"].ended_at) == ("FINISHED", 40, 10, 40)
    assert rows["o-1"].extra["events"] == 3 and rows["o-1"].extra["outcome_type"] == "Shipped"
    assert (rows["o-2"].status, rows["o-2"].at, rows["o-2"].extra["events"]) == ("RUNNING", 15, 1)
    assert set(rows) == {"o-1", "o-2"} and index.skipped == 7


def test_describe_shows_failed_attempts_the_last_failure_and_the_next_attempt() -> None:
    from tidings.inspection.describe_text import describe_lines, describe_workflow
    from tidings.core.workflow import StepAttemptFailed, StepError
    from tidings.core.workflow.journal import Started, StepStarted

    boom = lambda n: StepError(None, f"ConnectionError: down ({n})", "ConnectionError")  # noqa: E731
    records = [
        Started(1, "null", MS), StepStarted(2, "1", "activity", "flaky", MS + 10),
        StepAttemptFailed(3, "1", 1, boom(1), MS + 20, MS + 1020),
        StepAttemptFailed(4, "1", 2, boom(2), MS + 1030, MS + 2030),
        # a restart: the worker began again at 1
        StepAttemptFailed(5, "1", 1, boom(3), MS + 9000, MS + 10_000),
    ]
    described = describe_workflow("retrier", "r-1", records, None, {}, MS + 9500)
    (wait,) = described["waiting"]
    assert (wait["failed_attempts"], wait["restarts"]) == (3, 1)
    assert wait["last_failure"] == {"attempt": 1, "at": "2026-11-30T12:00:09.000Z", "type": "ConnectionError",
                                    "message": "ConnectionError: down (3)", "causes": []}
    assert wait["next_attempt"] == {"attempt": 2, "due": "2026-11-30T12:00:10.000Z", "due_in_ms": 500}
    text = "\n".join(describe_lines(described, records))
    assert "3 failed attempts journaled (a worker began the step again from attempt 1: 1 restart)" in text
    assert "last failure: attempt 1 at 2026-11-30T12:00:09.000Z: ConnectionError: down (3)" in text
    assert "next attempt: 2 due 2026-11-30T12:00:10.000Z (in 500 ms)" in text
