"""``tidings journal`` for people: one line per record, ISO-8601 UTC times, each step's duration and attempt."""

from __future__ import annotations

from tidings.inspection.journal_text import MAX_SHOWN, duration, instant, journal_lines, summary, value
from tidings.core.workflow import (
    CancelRequested,
    Ended,
    ErrorKind,
    SignalReceived,
    Started,
    StepCompleted,
    StepError,
    StepFailed,
    StepStarted,
    VersionMarker,
)
from tidings.core.workflow.child_records import ChildOutcome

T0 = 1_795_997_630_352  # 2026-11-30T00:13:50.352Z
BOOM = StepError(ErrorKind.ATTEMPTS_EXHAUSTED, "RuntimeError: boom", "RuntimeError")


def test_times_are_iso_8601_utc_with_milliseconds_and_durations_read_as_people_say_them() -> None:
    assert instant(T0) == "2026-11-30T00:13:50.352Z"
    assert instant(None).strip() == "" and len(instant(None)) == len(instant(T0))
    assert [duration(ms) for ms in (0, 999, 3_005, 252_000, 7_500_000)] == [
        "0 ms", "999 ms", "3.005 s", "4 min 12 s", "2 h 5 min"]


def test_every_record_is_one_line_with_its_time_seq_and_what_happened() -> None:
    records = [
        Started(1, '"ABC"', T0, "parent", "p-1", "3", parent_token="ab" * 16),
        StepStarted(2, "1", "activity", "score", T0 + 1),
        StepCompleted(3, "1", "30", at=T0 + 9, attempt=2),
        StepStarted(4, "2", "timer", "", T0 + 10, due=T0 + 3_010),
        StepCompleted(5, "2", "null"),  # before workflowjournal.v4: no time
        SignalReceived(6, "approval", "true", T0 + 20, signal_id="s-1"),
        StepStarted(7, "3", "signal", "approval", T0 + 21),
        StepCompleted(8, "3", "true", signal=6, at=T0 + 21),
        StepStarted(9, "4", "child_start", "kid", T0 + 30, token="cd" * 16),
        ChildOutcome(10, "4", "kid", "faulted", T0 + 40, error=BOOM),
        StepStarted(11, "5", "activity", "doomed", T0 + 50),
        StepFailed(12, "5", BOOM, at=T0 + 1_550, attempt=3),
        VersionMarker(13, "6", "fix-17", 2),
        CancelRequested(14, T0 + 2_000),
        Ended(15, "finished", T0 + 3_005, result='{"points":30}'),
    ]
    lines = journal_lines(records)
    assert len(lines) == len(records)
    assert lines[0] == "2026-11-30T00:13:50.352Z  #1   started with \"ABC\"  (child of parent p-1, step 3)"
    assert lines[1].endswith("#2   step 1 activity score")
    assert lines[2].endswith("#3   step 1 done: 30  (took 8 ms, attempt 2)")
    assert lines[3].endswith("#4   step 2 timer, due 2026-11-30T00:13:53.362Z")
    assert lines[4].startswith(" " * 24) and lines[4].endswith("#5   step 2 done: null")
    assert lines[5].endswith("#6   signal approval (id s-1): true")
    assert lines[7].endswith("#8   step 3 done (signal #6): true  (took 0 ms)")
    assert lines[9].endswith("#10  child of step 4 (kid) faulted: attempts_exhausted: RuntimeError: boom")
    assert lines[11].endswith("#12  step 5 failed, attempts_exhausted: RuntimeError: boom  (took 1.500 s, attempt 3)")
    assert lines[12].endswith("#13  version fix-17 = 2 (at step 6)")
    assert lines[13].endswith("#14  cancel requested")
    assert lines[14].endswith('#15  ended finished: {"points":30}  (after 3.005 s)')
    assert not any("ab" * 16 in line or "cd" * 16 in line for line in lines)  # tokens are never shown


def test_long_values_are_shortened_unless_full() -> None:
    long = '"' + "x" * 5_000 + '"'
    short = value(long)
    assert len(short) < MAX_SHOWN + 80 and short.endswith("(+4,802 characters; --full shows all)")
    assert value(long, full=True) == long
    [line] = journal_lines([Started(1, long, T0)], full=True)
    assert line.endswith(long)


def test_the_summary_says_how_the_instance_stands() -> None:
    assert summary("enrich", "o-1", []) == "enrich o-1: never started"
    running = [Started(1, '"x"', T0), StepStarted(2, "1", "activity", "score", T0 + 1),
               StepCompleted(3, "1", "1", at=T0 + 2), StepStarted(4, "2", "signal", "approval", T0 + 3)]
    assert summary("enrich", "o-1", running) == (
        "enrich o-1: running, waiting on step 2 signal approval since 2026-11-30T00:13:50.355Z; 4 records")
    ended = [*running, Ended(5, "cancelled", T0 + 60_000)]
    assert summary("enrich", "o-1", ended) == "enrich o-1: cancelled after 1 min 0 s, 5 records"


def test_a_failed_attempt_is_a_line_and_the_steps_end_counts_them() -> None:
    from tidings.core.workflow import StepAttemptFailed

    error = StepError(None, "ConnectionError: down", "ConnectionError")
    records = [
        Started(1, "null", T0),
        StepStarted(2, "1", "activity", "flaky", T0),
        StepAttemptFailed(3, "1", 1, error, T0 + 5, T0 + 1005),
        StepAttemptFailed(4, "1", 2, error, T0 + 1010, T0 + 2010),
        StepCompleted(5, "1", "3", at=T0 + 2020, attempt=3),
    ]
    lines = journal_lines(records)
    assert lines[2].endswith("#3  step 1 attempt 1 failed, ConnectionError: down; next attempt at "
                             "2026-11-30T00:13:51.357Z (in 1.000 s)"), lines[2]
    assert lines[4].endswith("step 1 done: 3  (took 2.020 s, attempt 3, 2 failed attempts journaled before)"), lines[4]


def test_a_failure_shows_the_causes_its_exception_carried() -> None:
    from tidings.core.workflow import StepCause

    caused = StepError(ErrorKind.NOT_RETRYABLE, "attempt 1: RuntimeError: charge failed", "RuntimeError",
                       (StepCause("ValueError", "card 4242 declined"), StepCause("ConnectionError", "")))
    lines = journal_lines([
        StepStarted(1, "1", "activity", "charge", T0),
        StepFailed(2, "1", caused, at=T0 + 5, attempt=1),
        Ended(3, "faulted", T0 + 6, error=caused),
    ])
    told = "not_retryable: attempt 1: RuntimeError: charge failed; caused by ValueError: card 4242 declined; " \
           "caused by ConnectionError"
    assert told in lines[1] and told in lines[2]


def test_updates_are_shown_with_their_id_and_answer() -> None:
    from tidings.core.workflow.journal import UpdateAnswered, UpdateReceived

    lines = journal_lines([
        Started(1, '"ann"', T0),
        UpdateReceived(2, "add_item", "3", T0 + 1, "u-1", "shop.replies", "r-1"),
        UpdateAnswered(3, "u-1", T0 + 2, result="1"),
        UpdateAnswered(4, "u-2", T0 + 3, error=StepError(ErrorKind.NOT_RETRYABLE, "out of stock")),
    ])
    assert "update add_item (id u-1, answer to shop.replies): 3" in lines[1]
    assert "update u-1 answered: 1" in lines[2]
    assert "update u-2 failed" in lines[3] and "out of stock" in lines[3]
