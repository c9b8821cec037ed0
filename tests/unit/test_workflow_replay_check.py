"""The replay checker over hand-made journals: what would park, where, and the ``ctx.version`` fix.

Journals are made by running the workflow in memory (``WorkflowTestRuntime``, the pure
core's interpreter), then checked against edited code with ``check_journals``,
``tidings.testing.replay`` and ``tidings replay --file``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from tidings.cli.main import main
from tidings.core.workflow import JournalRecord, Retry, WorkflowContext, WorkflowDefinition, define_workflow
from tidings.core.workflow.journal import StepStarted, record_to_json
from tidings.core.workflow.replay_check import check_journals
from tidings.inspection.journals import Journals, read_export, write_export
from tidings.testing import replay
from tidings.testing.workflows import WorkflowTestRuntime

from tests import replay_apps

NOW = 1_767_225_600_000


def _checkout(order: Sequence[str], *, versioned: bool = False, then: Sequence[str] = ("ship",)) -> WorkflowDefinition:
    async def body(ctx: WorkflowContext, _: None) -> list[str]:
        steps = list(order)
        if versioned and await ctx.version("charge-at-1", 2) == 1:
            steps = ["reserve", "charge"]
        done = [await ctx.activity(name, Retry.none, lambda a, n=name: n, type=str) for name in steps]
        await ctx.wait_signal("ship")
        for name in then:
            done.append(await ctx.activity(name, Retry.none, lambda a, n=name: n, type=str))
        return done

    return define_workflow("checkout", body)


def _journals(definition: WorkflowDefinition, ids: Sequence[str], *, finish: Sequence[str] = ()
              ) -> dict[str, list[JournalRecord]]:
    runtime = WorkflowTestRuntime()
    handle = runtime.register(definition)
    for instance_id in ids:
        handle.start(instance_id, instance_id if definition.input_type is str else None)
    runtime.run_until_idle()  # the activities run
    for instance_id in finish:
        handle.signal(instance_id, "ship")
    runtime.run_until_idle()
    return {instance_id: list(handle.journal(instance_id)) for instance_id in ids}


ORIGINAL = _checkout(["reserve", "charge"])
IDS = ["order-1", "order-2", "order-3"]


def test_the_same_code_finds_nothing() -> None:
    report = check_journals(ORIGINAL, _journals(ORIGINAL, IDS).items(), NOW)
    assert report.ok and report.checked == 3 and report.findings == ()
    assert report.lines() == ["checkout: 3 running instances replayed, 0 ended (not replayed); none would park."]


def test_a_reordered_step_is_found_in_each_instance_with_the_mismatch_and_a_version_fix() -> None:
    report = check_journals(_checkout(["charge", "reserve"]), _journals(ORIGINAL, IDS).items(), NOW)
    assert not report.ok
    assert [f.instance_id for f in report.findings] == IDS
    finding = report.findings[0]
    assert finding.verdict == "parks"
    assert (finding.mismatch.path, finding.mismatch.expected, finding.mismatch.found) == (
        "1", "activity 'reserve'", "activity 'charge'")
    assert "where the journal holds step 1 (activity 'reserve')" in finding.mismatch.reason
    assert "if await ctx.version('charge-at-1', 2) >= 2:" in finding.suggestion
    assert "before its first step" in finding.suggestion
    text = "\n".join(report.lines())
    assert "3 would park" in text and "order-1, order-2, order-3" in text
    as_json = report.to_json()
    assert as_json["would_park"] == 3 and as_json["findings"][1]["instance_id"] == "order-2"
    assert as_json["findings"][0]["expected"] == "activity 'reserve'"


def test_the_suggested_version_passes_and_new_instances_take_the_new_order() -> None:
    versioned = _checkout(["charge", "reserve"], versioned=True)
    assert check_journals(versioned, _journals(ORIGINAL, IDS).items(), NOW).ok
    fresh = _journals(versioned, ["new"])["new"]
    assert [r.name for r in fresh if isinstance(r, StepStarted)] == ["charge", "reserve", "ship"]


def test_a_step_changed_after_where_an_instance_waits_parks_only_those_past_it() -> None:
    journals = _journals(ORIGINAL, ["waiting", "shipped"], finish=[])
    runtime = WorkflowTestRuntime()
    handle = runtime.register(ORIGINAL)
    handle.start("shipping", None)
    runtime.run_until_idle()
    handle.signal("shipping", "ship")  # ended: not replayed
    runtime.run_until_idle()
    assert handle.outcome("shipping") is not None
    journals["shipping"] = list(handle.journal("shipping"))
    # "ship" renamed "send": no running instance reached step 4, so none would park.
    report = check_journals(_checkout(["reserve", "charge"], then=["send"]), journals.items(), NOW)
    assert report.ok and report.checked == 2 and report.ended == 1


def test_a_removed_step_is_found_as_the_body_ending_with_a_version_that_keeps_it() -> None:
    async def body(ctx: WorkflowContext, _: None) -> str:
        await ctx.activity("reserve", Retry.none, lambda a: "r", type=str)
        return "done"  # charge and the wait removed

    report = check_journals(define_workflow("checkout", body), _journals(ORIGINAL, IDS).items(), NOW)
    finding = report.findings[0]
    assert (finding.mismatch.path, finding.mismatch.expected) == ("2", "activity 'charge'")
    assert finding.mismatch.found == "the end of the body (finished)"
    assert "right after step 1" in finding.suggestion and "== 1:" in finding.suggestion


def test_a_mismatch_inside_a_parallel_branch_names_the_branch() -> None:
    def parallel(second: str) -> WorkflowDefinition:
        async def body(ctx: WorkflowContext, _: None) -> None:
            async def branch(ctx: WorkflowContext, name: str) -> str:
                value: str = await ctx.activity(name, Retry.none, lambda a: name, type=str)
                await ctx.wait_signal("go")
                return value

            await ctx.all([branch(ctx, "a"), branch(ctx, second)])

        return define_workflow("par", body)

    journals = _journals(parallel("b"), ["p"])
    report = check_journals(parallel("c"), journals.items(), NOW)
    (finding,) = report.findings
    assert finding.mismatch.path == "1.2.1"
    assert "in branch 2 of the parallel step 1" in finding.suggestion


def test_a_result_the_new_type_cannot_read_parks_with_no_step_found() -> None:
    async def body(ctx: WorkflowContext, _: None) -> None:
        await ctx.activity("reserve", Retry.none, lambda a: 1, type=int)  # was str
        await ctx.wait_signal("ship")

    (finding,) = check_journals(define_workflow("checkout", body), _journals(ORIGINAL, ["x"]).items(), NOW).findings
    assert finding.mismatch.found is None and finding.mismatch.path == "1"
    assert "cannot be read" in finding.mismatch.reason


def test_incomplete_journals_are_errors_and_not_checked() -> None:
    journals = _journals(ORIGINAL, ["whole", "holed", "headless"])
    journals["holed"] = [r for r in journals["holed"] if r.seq != 3]
    journals["headless"] = journals["headless"][1:]
    report = check_journals(ORIGINAL, journals.items(), NOW)
    assert report.checked == 1 and not report.ok
    assert report.errors == ("holed: not checked: seq 3 is missing (the next record has seq 4)",
                             "headless: not checked: it starts with seq 2 (StepStarted), not with its start (seq 1)")


def test_limit_and_progress() -> None:
    seen: list[tuple[int, int]] = []
    journals = _journals(ORIGINAL, [f"o{n}" for n in range(5)])
    report = check_journals(ORIGINAL, journals.items(), NOW, limit=2, progress=lambda d, t: seen.append((d, t)), total=5)
    assert report.checked == 2 and seen == [(2, 5)]


# ------------------------------------------------------------------------------ the export file

def _export(journals: dict[str, list[JournalRecord]], workflow: str = "checkout") -> str:
    read = Journals()
    for instance_id, records in journals.items():
        for record in records:
            read.keep(instance_id, record)
    out = io.StringIO()
    write_export(out, "shop", workflow, read, NOW)
    return out.getvalue()


def test_an_export_reads_back_to_the_same_journals_and_report() -> None:
    journals = _journals(ORIGINAL, IDS)
    text = _export(journals)
    header = json.loads(text.splitlines()[0])
    assert header["export"] == "tidings.workflow-journal" and header["instances"] == 3
    read = read_export(text.splitlines(keepends=True), "checkout")
    assert read.errors == [] and dict(read.items()) == journals
    assert not check_journals(_checkout(["charge", "reserve"]), read.items(), NOW).ok


HOSTILE = [
    ("{not json", "not JSON"),
    ("[1, 2]", "a JSON list, not an object"),
    ('{"record": {}}', 'no "instance_id" string'),
    ('{"instance_id": "order-1", "record": 7}', 'no "record" object'),
    ('{"instance_id": "order-1", "record": {"type": "nope", "seq": 9}}', "unknown record type 'nope'"),
    ('{"instance_id": "order-1", "record": {"type": "cancel_requested", "seq": "9", "at": 1}}',
     "field 'seq' is '9', of the wrong type"),
    ('{"instance_id": "order-1", "record": {"type": "cancel_requested", "seq": 9, "at": true}}',
     "field 'at' is True, of the wrong type"),
    ('{"instance_id": "order-1", "record": {"type": "cancel_requested", "seq": 9, "at": 1, "x": 1}}',
     "invalid 'cancel_requested' record"),
    ('{"instance_id": "order-1", "record": {"type": "step_failed", "seq": 9, "path": "1", "error": "boom"}}',
     "field 'error' is a str, not an object"),
    ('{"instance_id": "order-1", "record": {"type": "ended", "seq": 9, "outcome": "exploded", "at": 1}}',
     "field 'outcome' is 'exploded'"),
]


@pytest.mark.parametrize(("line", "said"), HOSTILE)
def test_a_bad_line_is_one_error_and_its_instance_is_not_checked(line: str, said: str) -> None:
    text = _export(_journals(ORIGINAL, IDS)) + line + "\n"
    read = read_export(text.splitlines(keepends=True), "checkout", source="f.jsonl")
    assert len(read.errors) == 1
    assert read.errors[0].startswith("f.jsonl:20: ") and said in read.errors[0], read.errors
    report = check_journals(ORIGINAL, read.items(), NOW, errors=[*read.errors, *read.skipped()])
    assert not report.ok
    assert report.checked == (3 if '"instance_id": "order-1"' not in line else 2)


def test_a_header_of_another_workflow_or_format_is_refused() -> None:
    text = _export(_journals(ORIGINAL, IDS), workflow="enrich")
    with pytest.raises(ValueError, match="holds the journals of workflow 'enrich', not 'checkout'"):
        read_export(text.splitlines(), "checkout")
    with pytest.raises(ValueError, match="export format 9"):
        read_export(['{"export": "tidings.workflow-journal", "version": 9}'], "checkout")


def test_a_record_written_twice_keeps_the_first() -> None:
    journals = _journals(ORIGINAL, ["a"])
    text = _export(journals)
    again = json.dumps({"instance_id": "a", "record": record_to_json(journals["a"][1]) | {"name": "other"}})
    read = read_export([*text.splitlines(), again], "checkout")
    assert dict(read.items()) == journals


# ------------------------------------------------------------------------------ tidings.testing.replay and the CLI

def test_testing_replay_takes_journals_or_a_file(tmp_path: Path) -> None:
    journals = _journals(replay_apps.app.workflow_handle("checkout").definition, IDS)
    assert replay(replay_apps.app, "checkout", journals=journals).ok
    report = replay(replay_apps.reordered, "checkout", journals=journals, limit=2)
    assert report.checked == 2 and len(report.findings) == 2
    path = tmp_path / "export.jsonl"
    path.write_text(_export(journals))
    assert len(replay(replay_apps.reordered, "checkout", file=path).findings) == 3
    assert replay(replay_apps.versioned, "checkout", file=path).ok
    with pytest.raises(LookupError, match="nope"):
        replay(replay_apps.app, "nope", journals=journals)
    with pytest.raises(ValueError, match="limit must be 1 or more"):
        replay(replay_apps.app, "checkout", journals=journals, limit=0)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_cli_checks_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text(_export(_journals(replay_apps.app.workflow_handle("checkout").definition, IDS)))
    code, out, err = _cli(capsys, "replay", "tests.replay_apps:app", "checkout", "--file", str(path))
    assert code == 0 and "none would park" in out and "read 18 records of 3 instances" in err
    code, out, _ = _cli(capsys, "replay", "tests.replay_apps:reordered", "checkout", "--file", str(path), "--json")
    report = json.loads(out)
    assert code == 1 and report["would_park"] == 3
    assert "ctx.version('charge-at-1', 2)" in report["findings"][0]["suggestion"]
    code, out, _ = _cli(capsys, "replay", "tests.replay_apps:versioned", "checkout", "--file", str(path))
    assert code == 0


def test_the_cli_refuses_hostile_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text(_export(_journals(replay_apps.app.workflow_handle("checkout").definition, IDS))
                    + "garbage\n" + '{"instance_id": "order-2", "record": {"type": "started"}}\n')
    code, out, err = _cli(capsys, "replay", "tests.replay_apps:app", "nope", "--file", str(path))
    assert code == 2 and "nope" in err
    for bad in ("0", "-3", "many"):
        with pytest.raises(SystemExit) as exited:
            main(["replay", "tests.replay_apps:app", "checkout", "--file", str(path), "--limit", bad])
        assert exited.value.code == 2
        assert "--limit" in capsys.readouterr().err
    code, out, err = _cli(capsys, "replay", "tests.replay_apps:app", "checkout", "--file", str(tmp_path / "none"))
    assert code == 2 and "cannot read" in err and len(err.strip().splitlines()) == 1
    code, out, err = _cli(capsys, "replay", "tests.replay_apps:app", "checkout", "--file", str(path))
    assert code == 1
    assert f"{path}:20: not JSON" in out and f"{path}:21: instance 'order-2'" in out
    assert "2 running instances replayed" in out and "order-2: not checked" in out
    (tmp_path / "long.jsonl").write_text("x" * (16 * 1024 * 1024 + 10) + "\n")
    code, out, err = _cli(capsys, "replay", "tests.replay_apps:app", "checkout", "--file", str(tmp_path / "long.jsonl"))
    assert code == 1 and "longer than any journal record" in out


def test_journal_wants_an_id_or_export(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "journal", "tests.replay_apps:app", "checkout")
    assert code == 2 and "either an instance ID or --export" in err
    code, _, err = _cli(capsys, "journal", "tests.replay_apps:app", "checkout", "x", "--export", "f")
    assert code == 2


def test_the_verdict_is_the_interpreters_own() -> None:
    from tidings.core.workflow import WorkflowStatus
    from tidings.core.workflow.interpreter import WorkflowInstance

    journals = _journals(ORIGINAL, IDS)
    for code, parks in ((ORIGINAL, False), (_checkout(["charge", "reserve"]), True),
                        (_checkout(["charge", "reserve"], versioned=True), False)):
        report = check_journals(code, journals.items(), NOW)
        for instance_id, records in journals.items():
            _, decision = WorkflowInstance.replay(code, instance_id, records, NOW)
            assert (decision.status is WorkflowStatus.PARKED) is parks
            assert (instance_id in {f.instance_id for f in report.findings}) is parks


def test_a_body_that_now_raises_after_the_journal_faults() -> None:
    journal = _journals(ORIGINAL, ["a"])["a"][:1]  # only the start: the body had not run yet

    async def body(ctx: WorkflowContext, _: None) -> None:
        raise RuntimeError("the new code breaks at once")

    (finding,) = check_journals(define_workflow("checkout", body), [("a", journal)], NOW).findings
    assert finding.verdict == "faults" and "the new code breaks at once" in finding.mismatch.reason
