"""The console's JSON API against a real broker and a real worker, ``tidings console`` as a child.

One worker of the console App (tests/integration/console_apps.py) and two consoles: one
with ``--allow-actions``, one read-only. The API lists what the worker made with the right
counts, shows a workflow's timeline, a saga's transitions and an aggregate's events, and
its actions take effect: a signal ends a wait, a cancel cancels, a schedule pauses and
resumes, a dead letter sent back is decided. Then every kind of bad request is refused with
a clear 4xx and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tidings import App, Cancelled, Finished
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter
from tidings.core.schedule import ScheduleRule
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.console_support import ConsoleProcess, console_app, console_state, console_workers, consoles  # noqa: F401
from tests.integration.console_apps import Book
from tests.integration.saga_apps import Pay
from tests.kafka_clients import kafka
from tests.workers import Workers


def _kind(overview: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return next(k for k in overview["kinds"] if (k["kind"], k["name"]) == (kind, name))


def _letters(bootstrap: str, app: App) -> int:
    return len(read_topic(bootstrap, f"{app.name}.deadletter"))


def test_the_api_lists_shows_and_acts_on_what_a_worker_runs(
    console_app: App, console_workers: Workers, consoles: Any, console_state: Path, kafka_bootstrap: str,
) -> None:
    console_workers.start()
    acting: ConsoleProcess = consoles("--allow-actions")
    reading: ConsoleProcess = consoles()
    approval = console_app.workflow_handle("approval")
    client = console_app.client(kafka_bootstrap)
    schedules = console_app.schedule_handle()

    async def start() -> None:
        for instance_id in ("a-1", "a-2", "b-1"):
            await approval.start(instance_id, f"order-{instance_id}")
        await client.send("wallet", "alice", Pay(transfer="t-1", target="bob", amount=5), correlation_id="t-1")
        await schedules.create("nightly", "approval", "nightly", ScheduleRule.daily("03:00", "UTC"))

    asyncio.run(start())
    session = acting.session()
    assert session["app"] == console_app.name and session["allow_actions"] is True and len(session["csrf"]) >= 32
    assert reading.session()["allow_actions"] is False

    # -- the overview and the lists ---------------------------------------------------------
    def overview() -> dict[str, Any]:
        answer = acting.get("/api/overview")
        assert answer.status == 200, answer
        return answer.json()  # type: ignore[no-any-return]

    assert_eventually(lambda: _kind(overview(), "workflow", "approval")["counts"] == {"RUNNING": 3}
                      and _kind(overview(), "saga", "transfer")["counts"] == {"ENDED": 1},
                      timeout=60, interval=0.5, message="the overview to count 3 running workflows and an ended saga")
    seen = overview()
    assert _kind(seen, "aggregate", "wallet")["total"] == 1
    assert _kind(seen, "schedule", "schedule")["counts"] == {"active": 1}
    assert seen["deadletters"] == {"total": 0, "counts": {}}

    page = acting.get("/api/instances/workflow?name=approval&status=running&q=A-&per_page=1").json()
    assert (page["total"], page["counts"], page["pages"], len(page["rows"])) == (2, {"RUNNING": 2}, 2, 1)
    second = acting.get("/api/instances/workflow?name=approval&status=RUNNING&q=a-&per_page=1&page=2").json()
    assert {page["rows"][0]["id"], second["rows"][0]["id"]} == {"a-1", "a-2"}
    sagas = acting.get("/api/instances/saga").json()
    assert [(r["name"], r["id"], r["status"]) for r in sagas["rows"]] == [("transfer", "t-1", "ENDED")]

    # -- the instance pages -------------------------------------------------------------------
    def steps_of(instance_id: str) -> list[dict[str, Any]]:
        answer = acting.get(f"/api/workflows/approval/{instance_id}")
        assert answer.status == 200, answer
        return [e for e in answer.json()["timeline"] if e["type"] == "step"]

    assert_eventually(lambda: [(s["step"], s["kind"], s["name"], s["state"]) for s in steps_of("a-1")][-1:]
                      == [("2", "signal", "decision", "running")], timeout=30, interval=0.3,
                      message="a-1 to wait for its signal")
    score = steps_of("a-1")[0]
    assert (score["kind"], score["name"], score["state"], score["attempts"], score["result"]) == (
        "activity", "score", "completed", 1, "9")
    assert score["duration_ms"] >= 0 and score["started_at"].endswith("Z")
    saga = acting.get("/api/sagas/transfer/t-1").json()
    transitions = saga["transitions"]
    assert saga["describe"]["status"] == "ENDED"
    assert any(c["type"] == "Take" and c["aggregate"] == "vault" for t in transitions for c in t["commands"])
    events = acting.get("/api/aggregates/wallet/alice").json()
    assert [(e["version"], e["type"]) for e in events["events"]] == [(1, "Paid")]

    # -- the actions ---------------------------------------------------------------------------
    signalled = acting.post("/api/workflows/approval/a-1/signal", {"signal": "decision", "payload": "yes"})
    assert signalled.status == 200, signalled
    cancelled = acting.post("/api/workflows/approval/a-2/cancel", {})
    assert cancelled.status == 200, cancelled

    async def outcomes() -> tuple[Any, Any]:
        return (await approval.result("a-1", timeout=60), await approval.result("a-2", timeout=60))

    done, stopped = asyncio.run(outcomes())
    assert isinstance(done, Finished) and done.value == "order-a-1:yes:9"
    assert isinstance(stopped, Cancelled)
    timeline = acting.get("/api/workflows/approval/a-1").json()["timeline"]
    assert [e["name"] for e in timeline if e["type"] == "signal"] == ["decision"]
    assert timeline[-1]["type"] == "ended" and timeline[-1]["outcome"] == "finished"

    assert acting.post("/api/schedules/nightly/pause").json() == {"paused": "nightly", "status": "paused"}
    again = acting.post("/api/schedules/nightly/pause")
    assert again.status == 409 and "paused" in again.json()["error"]
    assert acting.post("/api/schedules/nightly/resume").json() == {"resumed": "nightly", "status": "active"}

    # A batch cancel names how many it expects: b-1 is the only running one left.
    wrong = acting.post("/api/cancel", {"workflow": "approval", "status": ["RUNNING"], "q": "", "expect": 5})
    assert wrong.status == 409 and "matches 1" in wrong.json()["error"]
    batch = acting.post("/api/cancel", {"workflow": "approval", "status": ["RUNNING"], "q": "b-", "expect": 1})
    assert batch.status == 200 and batch.json()["cancel_requested"] == [{"workflow": "approval", "id": "b-1"}], batch
    assert isinstance(asyncio.run(approval.result("b-1", timeout=60)), Cancelled)

    # -- a dead letter, sent back once its cause is fixed -------------------------------------
    (console_state / "closed").write_text("1")

    async def book() -> None:
        try:
            await client.send("ledger", "l-1", Book(entry="e-1", amount=7), 5)
        except Exception:  # noqa: BLE001 - the worker dead-letters it; what the sender hears is not the point
            pass

    asyncio.run(book())
    assert_eventually(lambda: acting.get("/api/instances/deadletters?name=ledger").json()["total"] == 1,
                      timeout=30, interval=0.5, message="the closed ledger's command to be dead-lettered")
    row = acting.get("/api/instances/deadletters?name=ledger").json()["rows"][0]
    assert row["status"] == "HandlerFailed", row
    letter = acting.get(f"/api/deadletters/{row['id']}").json()
    assert letter["replay"]["allowed"] is True and letter["replay"]["topic"] == f"{console_app.name}.aggregate.ledger.commands"
    unconfirmed = acting.post(f"/api/deadletters/{row['id']}/replay", {})
    assert unconfirmed.status == 400 and "confirm" in unconfirmed.json()["error"]
    (console_state / "closed").unlink()
    replayed = acting.post(f"/api/deadletters/{row['id']}/replay", {"confirm": True})
    assert replayed.status == 200, replayed
    assert_eventually(lambda: acting.get("/api/aggregates/ledger/l-1").status == 200, timeout=30, interval=0.5,
                      message="the letter sent back to be decided")
    assert [(e["version"], e["type"], e["payload"]) for e in acting.get("/api/aggregates/ledger/l-1").json()["events"]] == [
        (1, "Booked", {"entry": "e-1", "amount": 7})]
    _hostile(acting, reading, console_app, kafka_bootstrap, row["id"])
    assert console_workers.started[0].running, "the worker kept running"


def _hostile(acting: ConsoleProcess, reading: ConsoleProcess, app: App, bootstrap: str, letter: str) -> None:
    """Bad requests: each a clear 4xx, and nothing changes (no new records on any input topic)."""
    inputs = [f"{app.name}.workflow.approval.inbox", f"{app.name}.aggregate.ledger.commands",
              f"{app.name}.aggregate.schedule.commands"]
    # Anyone may write the dead-letter topic: forged letters naming a journal, a foreign topic, a
    # partition the key does not own, and a truncated one. None may be sent back.
    forged = {
        "journal": DeadLetter(f"{app.name}.aggregate.wallet.events", partition_for("alice", 4), 0, b"alice/1",
                              b"x", "forged", "DecodeError", 1),
        "foreign": DeadLetter("someone.elses.topic", 0, 0, b"k", b"x", "forged", "DecodeError", 1),
        "wrong partition": DeadLetter(f"{app.name}.aggregate.ledger.commands", (partition_for("l-9", 4) + 1) % 4, 0,
                                      b"l-9", b"x", "forged", "DecodeError", 1),
        "truncated": DeadLetter(f"{app.name}.aggregate.ledger.commands", partition_for("l-9", 4), 0, b"l-9",
                                b"x" * 10, "forged", "DecodeError", 1, original_size=99, truncated=True),
    }
    producer = kafka(bootstrap).producer()
    for letter_record in forged.values():
        producer.produce(f"{app.name}.deadletter", avro.encode(letter_record), b"forged", partition=0)
    producer.produce(f"{app.name}.deadletter", b"not a dead letter at all", b"forged", partition=0)
    assert producer.flush(10) == 0
    rows = acting.get("/api/instances/deadletters?per_page=500").json()["rows"]
    forged_ids = [r["id"] for r in rows if r.get("detail") == "forged" or r["status"] == "unreadable"]
    assert len(forged_ids) == 5, rows
    before = {topic: len(read_topic(bootstrap, topic)) for topic in inputs}
    letters = _letters(bootstrap, app)
    assert all(acting.get(f"/api/deadletters/{i}").json()["replay"]["allowed"] is False for i in forged_ids)
    for forged_id in forged_ids:
        answer = acting.post(f"/api/deadletters/{forged_id}/replay", {"confirm": True})
        assert answer.status == 422, answer
    reasons = " | ".join(acting.post(f"/api/deadletters/{i}/replay", {"confirm": True}).json()["error"] for i in forged_ids)
    for words in ("not one of the app's input topics", "belongs on partition", "truncated", "not a dead letter"):
        assert words in reasons, reasons

    def refused(answer: Any, status: int, words: str) -> None:
        assert answer.status == status, answer
        body = answer.json()
        assert words in body["error"], body
        assert "\n" not in body["error"] and "Traceback" not in body["error"]

    # Unknown ids and names.
    refused(acting.get("/api/workflows/approval/nobody"), 404, "was started")
    refused(acting.get("/api/workflows/nope/a-1"), 404, "declares no workflow")
    refused(acting.get("/api/sagas/transfer/nobody"), 404, "was started")
    refused(acting.get("/api/aggregates/ledger/nobody"), 404, "has stored")
    refused(acting.get("/api/deadletters/0:999999"), 404, "no dead letter")
    refused(acting.get("/api/deadletters/999:0"), 404, "no partition")
    refused(acting.get("/api/deadletters/zero"), 400, "PARTITION:OFFSET")
    refused(acting.get("/api/instances/rabbits"), 404, "no list")
    refused(acting.get("/api/instances/workflow?status=BORED"), 400, "unknown status")
    refused(acting.get("/api/instances/workflow?page=-1"), 400, "page")
    refused(acting.get("/api/instances/workflow?per_page=100000"), 400, "per_page")
    refused(acting.get("/api/instances/workflow?evil=1"), 400, "unknown parameter")
    refused(acting.get("/api/nowhere"), 404, "no such endpoint")
    refused(acting.post("/api/workflows/approval/nobody/signal", {"signal": "decision", "payload": 1}), 404, "was started")
    refused(acting.post("/api/workflows/approval/nobody/cancel"), 404, "was started")
    refused(acting.post("/api/workflows/approval/a-1/signal", {"signal": "decision"}), 409, "ended")
    refused(acting.post("/api/schedules/never/pause"), 404, "does not exist")
    refused(acting.post(f"/api/workflows/approval/{'x' * 300}/cancel"), 400, "bytes")
    # Malformed and oversized bodies.
    refused(acting.post("/api/workflows/approval/b-2/signal", raw=b"{not json"), 400, "not JSON")
    refused(acting.post("/api/workflows/approval/b-2/signal", raw=b"[1, 2]"), 400, "JSON object")
    refused(acting.post("/api/workflows/approval/b-2/signal", raw=b"[" * 100 + b"]" * 100), 400, "deeper")
    refused(acting.post("/api/workflows/approval/b-2/signal", {"signal": "", "payload": 1}), 400, "signal name")
    refused(acting.post("/api/workflows/approval/b-2/signal", {"signal": "decision", "payload": 1, "evil": 2}), 400,
            "nothing else")
    refused(acting.post("/api/workflows/approval/b-2/signal", raw=json.dumps({"signal": "decision", "payload": "x" * 600_000}).encode()),
            413, "bytes")
    refused(acting.post("/api/workflows/approval/b-2/signal", {"signal": "decision", "payload": "x" * 525_000}),
            413, "a signal's is at most")
    refused(acting.post("/api/workflows/approval/a-1/cancel", raw=b"{}", headers={"Content-Length": "99999999"}), 413, "at most")
    refused(acting.post("/api/cancel", {"workflow": "approval", "status": ["FINISHED"], "expect": 1}), 400, "can be cancelled")
    refused(acting.post("/api/cancel", {"workflow": "approval", "expect": True}), 400, "expect")
    # Read-only, and the web checks: no CSRF token, a wrong one, a foreign Origin, a foreign Host, a form post.
    refused(reading.post("/api/workflows/approval/b-2/cancel"), 403, "read-only")
    refused(reading.post(f"/api/deadletters/{letter}/replay", {"confirm": True}), 403, "read-only")
    refused(acting.post("/api/workflows/approval/b-2/cancel", csrf=False), 403, "X-CSRF-Token")
    refused(acting.post("/api/workflows/approval/b-2/cancel", headers={"X-CSRF-Token": "guess"}), 403, "X-CSRF-Token")
    refused(acting.post("/api/workflows/approval/b-2/cancel", headers={"Origin": "http://evil.example"}), 403, "origin")
    refused(acting.post("/api/workflows/approval/b-2/cancel", headers={"Sec-Fetch-Site": "cross-site"}), 403, "cross-site")
    refused(acting.post("/api/workflows/approval/b-2/cancel", headers={"Host": "evil.example"}), 403, "Host")
    refused(acting.get("/api/session", headers={"Host": "evil.example:80"}), 403, "Host")
    refused(acting.post("/api/workflows/approval/b-2/cancel", headers={"Content-Type": "text/plain"}), 415, "JSON")
    refused(acting.request("PUT", "/api/workflows/approval/b-2/cancel"), 405, "GET and POST")
    after = {topic: len(read_topic(bootstrap, topic)) for topic in inputs}
    assert after == before, "a refused request wrote to an input topic"
    assert _letters(bootstrap, app) == letters
    assert acting.get("/api/session").status == 200, "the console kept answering"


def test_beyond_loopback_the_console_needs_its_token(consoles: Any, console_app: App) -> None:
    token = "t0ken-for-the-console-test"
    guarded: ConsoleProcess = consoles("--token", token)
    assert guarded.get("/api/session").status == 401
    assert guarded.get("/api/session", headers={"Authorization": "Bearer wrong-wrong-wrong-wrong"}).status == 401
    assert guarded.get("/", headers={}).status == 401
    login = guarded.get(f"/login?token={token}")
    assert login.status == 303 and "HttpOnly" in login.headers["set-cookie"] and token not in login.headers["set-cookie"]
    cookie = login.headers["set-cookie"].split(";", 1)[0]
    assert guarded.get("/api/session", headers={"Cookie": cookie}).status == 200
    assert guarded.get("/api/session", headers={"Authorization": f"Bearer {token}"}).status == 200
    assert guarded.get("/login?token=nope").status == 401
    stderr = guarded.stop()
    assert token not in stderr, "the token reached the console's log"
