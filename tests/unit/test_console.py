"""The console's pure parts: the guard's checks, the replay's checks of a dead letter's
origin, the journal as a timeline, and the CLI's refusals before anything starts."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest

from tidings.console.replay import Input, input_topics, replay_of
from tidings.errors import ReplayRefused
from tidings.console.security import COOKIE, Guard, cookies, is_loopback
from tidings.console.timeline import timeline
from tidings.core.partitioning import partition_for
from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.journal import (
    Ended,
    SignalReceived,
    Started,
    StepCompleted,
    StepFailed,
    StepKind,
    StepStarted,
)
from tests.workers import ROOT

# -- the guard --------------------------------------------------------------------------------


def _guard(**kwargs: object) -> Guard:
    options: dict[str, object] = {"host": "127.0.0.1", "port": 8470, "token": None, "allow_actions": True}
    options.update(kwargs)
    return Guard(**options)  # type: ignore[arg-type]


def _post(guard: Guard, **headers: str) -> dict[str, str]:
    base = {"host": "127.0.0.1:8470", "origin": "http://127.0.0.1:8470", "x-csrf-token": guard.csrf,
            "content-type": "application/json"}
    base.update({name.replace("_", "-"): value for name, value in headers.items()})
    return base


def test_loopback_is_this_machine_only() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.com", ""]))


def test_beyond_loopback_a_token_is_required_and_must_be_long() -> None:
    with pytest.raises(ValueError, match="needs a token"):
        _guard(host="0.0.0.0")
    with pytest.raises(ValueError, match="at least 16"):
        _guard(host="0.0.0.0", token="short")
    assert _guard(host="0.0.0.0", token="x" * 16).token == "x" * 16


def test_only_the_consoles_own_host_names_are_answered() -> None:
    guard = _guard()
    for host in ("127.0.0.1:8470", "localhost:8470", "[::1]:8470", "LOCALHOST:8470"):
        assert guard.check_host({"host": host}) is None, host
    for host in ("evil.example:8470", "127.0.0.1:9999", "127.0.0.1", ""):
        refusal = guard.check_host({"host": host})
        assert refusal is not None and refusal.status == 403, host
    named = _guard(host="10.1.2.3", token="t" * 20, extra_hosts=("console.internal",))
    assert named.check_host({"host": "console.internal:8470"}) is None
    assert named.check_host({"host": "10.1.2.3:8470"}) is None
    assert named.check_host({"host": "localhost:8470"}) is not None


def test_a_token_comes_as_a_bearer_header_or_the_session_cookie_never_the_token_itself() -> None:
    guard = _guard(token="the-console-token-123")
    assert guard.check_auth({}) is not None and guard.check_auth({}).status == 401  # type: ignore[union-attr]
    assert guard.check_auth({"authorization": "Bearer the-console-token-123"}) is None
    assert guard.check_auth({"authorization": "Bearer the-console-token-12"}) is not None
    assert guard.check_auth({"authorization": "Basic the-console-token-123"}) is not None
    cookie = guard.session_cookie()
    assert "the-console-token-123" not in cookie
    assert guard.check_auth({"cookie": f"other=1; {COOKIE}={cookie}"}) is None
    assert guard.check_auth({"cookie": f"{COOKIE}=the-console-token-123"}) is not None
    # Another process (another secret) does not take this one's cookie.
    assert _guard(token="the-console-token-123").check_auth({"cookie": f"{COOKIE}={cookie}"}) is not None
    assert _guard().check_auth({}) is None  # no token on loopback: none asked


def test_a_state_change_needs_actions_the_origin_and_the_csrf_token() -> None:
    guard = _guard()
    assert guard.check_state_change(_post(guard)) is None
    without_origin = _post(guard)
    del without_origin["origin"]
    assert guard.check_state_change(without_origin) is None  # curl: the CSRF token still needed
    cases = {
        "read-only": (_guard(allow_actions=False), {}),
        "another origin": (guard, {"origin": "http://evil.example"}),
        "'null'": (guard, {"origin": "null"}),
        "'cross-site'": (guard, {"sec_fetch_site": "cross-site"}),
        "X-CSRF-Token": (guard, {"x_csrf_token": "guess"}),
        "JSON": (guard, {"content_type": "text/plain"}),
    }
    for words, (checker, headers) in cases.items():
        refusal = checker.check_state_change(_post(checker, **headers))
        assert refusal is not None and refusal.status in (403, 415), words
        assert words.strip("'") in refusal.message or words in refusal.message, (words, refusal.message)
    no_token = _post(guard)
    del no_token["x-csrf-token"]
    assert guard.check_state_change(no_token) is not None


def test_cookie_headers_are_read_as_hostile() -> None:
    assert cookies("a=1; b=2; a=3; junk; =x; c=") == {"a": "1", "b": "2", "c": ""}


# -- the replay's checks -----------------------------------------------------------------------

APP = "shop"
INPUTS = input_topics(APP, {"shop.aggregate.account.commands": 4, "shop.aggregate.account.events": 4,
                            "shop.workflow.enrich.inbox": 4, "shop.workflow.enrich.journal": 4, "shop.deadletter": 1},
                      {"orders": 3})


def _letter(**changes: object) -> dict[str, object]:
    key = "alice"
    line: dict[str, object] = {
        "reason": "boom", "error_type": "HandlerFailed",
        "origin": {"topic": "shop.aggregate.account.commands", "partition": partition_for(key, 4), "offset": 3},
        "key": key, "key_encoding": "utf-8", "value": base64.b64encode(b"\x00\x01avro").decode(),
        "value_encoding": "base64", "original_size": 6, "truncated": False, "headers": {"h": "v"},
        "letter": {"partition": 0, "offset": 9},
    }
    line.update(changes)
    return line


def test_the_input_topics_are_commands_inboxes_and_flow_sources_only() -> None:
    assert set(INPUTS) == {"shop.aggregate.account.commands", "shop.workflow.enrich.inbox", "orders"}
    assert INPUTS["orders"] == Input("orders", "a flow's source", 3, keyed=False)


def test_a_good_letter_goes_back_to_its_origin_as_it_was() -> None:
    replay = replay_of(_letter(), INPUTS)
    assert (replay.topic, replay.partition, replay.key, replay.value, replay.headers) == (
        "shop.aggregate.account.commands", partition_for("alice", 4), b"alice", b"\x00\x01avro", [("h", b"v")])


@pytest.mark.parametrize("changes, words", [
    ({"truncated": True}, "truncated"),
    ({"origin": {"topic": "shop.aggregate.account.events", "partition": 0, "offset": 1}}, "not one of the app's input"),
    ({"origin": {"topic": "shop.workflow.enrich.journal", "partition": 0, "offset": 1}}, "not one of the app's input"),
    ({"origin": {"topic": "other.aggregate.account.commands", "partition": 0, "offset": 1}}, "not one of the app's input"),
    ({"origin": {"topic": "shop.aggregate.account.commands", "partition": 9, "offset": 1}}, "not a partition"),
    ({"origin": {"topic": "shop.aggregate.account.commands", "partition": "1", "offset": 1}}, "not a partition"),
    ({"origin": {"topic": "shop.aggregate.account.commands",
                 "partition": (partition_for("alice", 4) + 1) % 4, "offset": 1}}, "belongs on partition"),
    ({"origin": None}, "not one of the app's input"),
    ({"value": None}, "no value"),
    ({"value": "!!!", "value_encoding": "base64"}, "not base64"),
    ({"value_encoding": "rot13"}, "no known encoding"),
    ({"headers": ["h"]}, "not a map"),
])
def test_a_letter_that_may_not_go_back_is_refused_saying_why(changes: dict[str, object], words: str) -> None:
    with pytest.raises(ReplayRefused, match=words):
        replay_of(_letter(**changes), INPUTS)


def test_an_unreadable_record_of_the_deadletter_topic_is_never_sent() -> None:
    with pytest.raises(ReplayRefused, match="not a dead letter"):
        replay_of({"unreadable": "not Avro", "letter": {"partition": 0, "offset": 1}, "value": "x"}, INPUTS)


def test_a_flow_source_keeps_its_own_partitioning() -> None:
    line = _letter(origin={"topic": "orders", "partition": 2, "offset": 5}, key="k")
    assert replay_of(line, INPUTS).partition == 2


# -- the timeline -------------------------------------------------------------------------------

MS = 1_767_225_600_000


def test_the_timeline_shows_each_step_with_its_kind_name_attempts_duration_and_result_or_error() -> None:
    records = [
        Started(1, '"ABC"', MS),
        StepStarted(2, "1", StepKind.ACTIVITY, "score", MS + 1),
        StepCompleted(3, "1", "42", at=MS + 6, attempt=2),
        StepStarted(4, "2", StepKind.SIGNAL, "decision", MS + 7),
        SignalReceived(5, "decision", '"yes"', MS + 100),
        StepCompleted(6, "2", '"yes"', signal=5, at=MS + 100),
        StepStarted(7, "3", StepKind.ACTIVITY, "charge", MS + 101),
        StepFailed(8, "3", StepError(ErrorKind.ATTEMPTS_EXHAUSTED, "card declined"), at=MS + 150, attempt=3),
        StepStarted(9, "4", StepKind.TIMER, "", MS + 151, due=MS + 60_151),
    ]
    entries = timeline(records, now_ms=MS + 1151)
    steps = [e for e in entries if e["type"] == "step"]
    assert [(s["step"], s["kind"], s["name"], s["state"], s["attempts"], s["duration_ms"]) for s in steps] == [
        ("1", "activity", "score", "completed", 2, 5),
        ("2", "signal", "decision", "completed", None, 93),
        ("3", "activity", "charge", "failed", 3, 49),
        ("4", "timer", None, "running", None, 1000),
    ]
    assert steps[0]["result"] == "42" and steps[2]["error"] == {"kind": "attempts_exhausted", "message": "card declined"}
    assert steps[3]["due_at"] == "2026-01-01T00:01:00.151Z" and steps[1]["signal_seq"] == 5
    assert [e["type"] for e in entries] == ["started", "step", "step", "signal", "step", "step"]
    assert all("_at" not in e for e in entries)
    ended = timeline([*records[:3], Ended(4, "finished", MS + 2000, result="42")], MS)[-1]
    assert (ended["type"], ended["outcome"], ended["duration_ms"], ended["result"]) == ("ended", "finished", 2000, "42")


def test_an_end_without_its_start_is_shown_not_dropped() -> None:
    (entry,) = timeline([StepCompleted(1, "7", "1", at=MS)], MS)
    assert (entry["step"], entry["state"], entry["kind"], entry["duration_ms"]) == ("7", "completed", None, None)


# -- the command ---------------------------------------------------------------------------------


def _console(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", "console", "examples.shop.app:app", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "TIDINGS_BOOTSTRAP": "127.0.0.1:1", **(env or {})})


def test_the_command_refuses_to_bind_beyond_loopback_without_a_token_in_one_line() -> None:
    done = _console("--host", "0.0.0.0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "needs a token" in done.stderr and "TIDINGS_CONSOLE_TOKEN" in done.stderr
    short = _console("--host", "0.0.0.0", env={"TIDINGS_CONSOLE_TOKEN": "short"})
    assert short.returncode == 2 and "at least 16" in short.stderr
    assert _console("--port", "70000").returncode == 2


def test_the_command_has_help() -> None:
    done = _console("--help")
    assert done.returncode == 0 and "--allow-actions" in done.stdout and "127.0.0.1" in done.stdout


def test_the_page_ships_as_package_data_and_loads_nothing_from_elsewhere() -> None:
    from tidings.console.server import STATIC, static_file

    for name, _ in STATIC.values():
        assert static_file(name), name
    page = static_file("index.html").decode()
    assert 'src="/console.js"' in page and 'href="/console.css"' in page
    assert "http" not in page and "<script>" not in page  # no inline script, nothing fetched from outside
    assert "innerHTML" not in static_file("console.js").decode()  # values are set as text
