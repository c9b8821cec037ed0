"""Queries in the pure core and the in-memory runtime: read-only handlers, nothing journaled."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tidings import WorkflowContext
from tidings.codec.workflow import inbox_from_json
from tidings.core.limits import check_inbox
from tidings.core.workflow import Finished, Start, WorkflowInstance, WorkflowStatus, define_workflow
from tidings.core.workflow.failures import ErrorKind
from tidings.core.workflow.inbox import Signal
from tidings.core.workflow.inbox_rules import (
    NOT_FOUND,
    Refuse,
    Reply,
    RunQuery,
    StoredEnd,
    decide_request,
    queried_instance,
    query_reply,
)
from tidings.core.workflow.queries import bounded, run_query
from tidings.core.workflow_records import WorkflowInbox
from tidings.errors import (
    LimitError,
    QueryTimeout,
    SchemaError,
    WorkflowNotFound,
    WorkflowQueryFailed,
    WorkflowQueryRejected,
)
from tidings.testing import WorkflowTestRuntime


async def basket(ctx: WorkflowContext, wanted: int) -> list[str]:
    """Collects ``wanted`` items from signals "add"; its queries read what it holds."""
    items: list[str] = []
    await ctx.on_query("items", lambda: list(items))
    await ctx.on_query("nth", lambda i: items[i])
    await ctx.on_query("broken", lambda: 1 / 0)
    await ctx.on_query("opaque", lambda: object())

    def spin() -> None:
        while True:
            pass

    await ctx.on_query("spin", spin)
    while len(items) < wanted:
        items.append(await ctx.wait_signal("add", type=str))
        await ctx.on_query("count", lambda: len(items))  # registered again each time: the latest wins
    return items


def runtime() -> tuple[WorkflowTestRuntime, Any]:
    rt = WorkflowTestRuntime()
    return rt, rt.register(define_workflow("basket", basket))


def test_a_query_reads_the_live_state_and_journals_nothing() -> None:
    rt, handle = runtime()
    handle.start("b-1", 2)
    assert handle.query("b-1", "items") == []
    handle.signal("b-1", "add", "apple")
    journal = handle.journal("b-1")
    assert handle.query("b-1", "items") == ["apple"]
    assert handle.query("b-1", "nth", [0]) == "apple"
    assert handle.query("b-1", "count") == 1
    assert handle.journal("b-1") == journal  # nothing journaled
    assert handle.status("b-1") is WorkflowStatus.RUNNING


def test_an_ended_instance_answers_from_its_final_state_also_after_a_restart() -> None:
    rt, handle = runtime()
    handle.start("b-1", 2)
    handle.signal("b-1", "add", "apple")
    handle.signal("b-1", "add", "pear")
    assert handle.status("b-1") is WorkflowStatus.FINISHED
    assert handle.query("b-1", "items") == ["apple", "pear"]
    journal = handle.journal("b-1")
    rt.restart()  # an ended instance replays as its outcome alone: the query replays it through its end
    assert handle.query("b-1", "items") == ["apple", "pear"]
    assert handle.query("b-1", "count") == 2
    assert handle.journal("b-1") == journal


def test_a_replay_registers_the_handlers_again() -> None:
    rt, handle = runtime()
    handle.start("b-1", 3)
    handle.signal("b-1", "add", "apple")
    rt.restart()
    assert handle.query("b-1", "items") == ["apple"]
    assert handle.parked_reason("b-1") is None


def test_registering_takes_no_step_path() -> None:
    # Adding a handler to a deployed workflow changes no journal: the same records with and without.
    async def plain(ctx: WorkflowContext, _: None) -> int:
        return (await ctx.wait_signal("n", type=int)) + 1

    async def with_query(ctx: WorkflowContext, _: None) -> int:
        seen: list[int] = []
        await ctx.on_query("seen", lambda: seen)
        n = await ctx.wait_signal("n", type=int)
        seen.append(n)
        await ctx.on_query("seen", lambda: seen)
        return n + 1

    journals = []
    for body in (plain, with_query):
        instance = WorkflowInstance(define_workflow("w", body), "w-1")
        records = list(instance.advance(Start(None), 1).records) + list(instance.advance(Signal("n", 4), 2).records)
        journals.append([(type(r).__name__, getattr(r, "path", None)) for r in records])
    assert journals[0] == journals[1]


def test_a_handler_that_raises_answers_an_error_and_never_faults_the_instance() -> None:
    rt, handle = runtime()
    handle.start("b-1", 1)
    with pytest.raises(WorkflowQueryFailed, match="ZeroDivisionError") as raised:
        handle.query("b-1", "broken")
    assert raised.value.error is not None and raised.value.error.kind is ErrorKind.NOT_RETRYABLE
    with pytest.raises(WorkflowQueryFailed, match="list index out of range"):
        handle.query("b-1", "nth", [5])
    with pytest.raises(WorkflowQueryFailed, match="cannot be stored"):
        handle.query("b-1", "opaque")
    with pytest.raises(WorkflowQueryFailed, match="positional argument"):
        handle.query("b-1", "items", [1, 2])  # a handler called with the wrong args is its error
    assert handle.status("b-1") is WorkflowStatus.RUNNING
    handle.signal("b-1", "add", "fig")
    assert handle.result("b-1") == Finished(["fig"])


def test_a_handler_that_loops_is_stopped_at_its_bound() -> None:
    rt, handle = runtime()
    handle.start("b-1", 1)
    began = time.monotonic()
    with pytest.raises(WorkflowQueryFailed, match="ran longer than") as raised:
        handle.query("b-1", "spin")
    assert time.monotonic() - began < 3
    assert raised.value.error is not None and raised.value.error.kind is ErrorKind.DEADLINE_EXCEEDED
    assert handle.query("b-1", "items") == []  # the instance still answers, and runs on
    handle.signal("b-1", "add", "fig")
    assert handle.result("b-1") == Finished(["fig"])


def test_the_bound_cannot_be_swallowed_and_restores_the_trace_hook() -> None:
    def stubborn() -> None:
        while True:
            try:
                while True:
                    pass
            except Exception:  # noqa: BLE001 - what a careless handler does
                continue

    import sys

    before = sys.gettrace()
    with pytest.raises(QueryTimeout):
        bounded(stubborn, 0.05)
    assert sys.gettrace() is before
    assert bounded(lambda: 7, 0.05) == 7


def test_an_unknown_query_names_those_registered() -> None:
    rt, handle = runtime()
    handle.start("b-1", 1)
    with pytest.raises(WorkflowQueryRejected, match=r"has no query 'nope' \(registered: broken, items, nth"):
        handle.query("b-1", "nope")
    with pytest.raises(WorkflowNotFound):
        handle.query("b-9", "items")


def test_a_parked_instance_answers_from_the_state_it_reached() -> None:
    definition = define_workflow("basket", basket)
    instance = WorkflowInstance(definition, "b-1")
    records = list(instance.advance(Start(3), 1).records)
    records += instance.advance(Signal("add", "apple"), 2).records

    async def edited(ctx: WorkflowContext, wanted: int) -> list[str]:
        items: list[str] = []
        await ctx.on_query("items", lambda: list(items))
        items.append(await ctx.wait_signal("add", type=str))
        await ctx.sleep(__import__("datetime").timedelta(seconds=1))  # new: the journal says otherwise
        items.append(await ctx.wait_signal("add", type=str))
        return items

    replayed, _ = WorkflowInstance.replay(define_workflow("basket", edited), "b-1", records, 3)
    assert replayed.status is WorkflowStatus.PARKED
    target = queried_instance(replayed.definition, "b-1", replayed, lambda: records, 4)
    reply = query_reply(run_query(target, "items", []), replayed)
    assert (reply.answer, reply.result, reply.status) == ("answered", '["apple"]', "PARKED")


def test_the_inbox_rules_refuse_unusable_queries() -> None:
    def request(**fields: Any) -> WorkflowInbox:
        return WorkflowInbox("r-1", "b-1", "query_handler", 1, **fields)

    live = WorkflowInstance(define_workflow("basket", basket), "b-1")
    live.advance(Start(1), 1)
    assert isinstance(decide_request(request(), live), Refuse)  # no name
    assert "JSON array" in decide_request(request(query="items", payload=b'{"a": 1}'), live).reason  # type: ignore[union-attr]
    assert isinstance(decide_request(request(query="items", payload=b"[1,"), live), Refuse)
    assert isinstance(decide_request(request(query="items", payload=b"[" * 10_000), live), Refuse)
    assert decide_request(request(query="items"), None) == Reply(NOT_FOUND)
    assert decide_request(request(query="nth", payload=b"[0]"), live) == RunQuery("nth", [0])
    assert decide_request(request(query="items", payload=b"null"), StoredEnd("FINISHED")) == RunQuery("items", [])


def test_a_query_of_a_stored_end_replays_the_journal_and_stores_nothing() -> None:
    definition = define_workflow("basket", basket)
    instance = WorkflowInstance(definition, "b-1")
    records = list(instance.advance(Start(1), 1).records) + list(instance.advance(Signal("add", "kiwi"), 2).records)
    stored = StoredEnd("FINISHED", "finished", '["kiwi"]')
    target = queried_instance(definition, "b-1", stored, lambda: records, 9)
    reply = query_reply(run_query(target, "items", []), stored)
    assert (reply.answer, reply.result, reply.status, reply.outcome) == ("answered", '["kiwi"]', "FINISHED", "finished")


def test_a_bad_registration_raises_in_the_body() -> None:
    async def bad(ctx: WorkflowContext, _: None) -> None:
        await ctx.on_query("x", 42)  # type: ignore[arg-type]

    async def asynchronous(ctx: WorkflowContext, _: None) -> None:
        async def handler() -> int:
            return 1

        await ctx.on_query("", handler)

    for body, problem in ((bad, "not callable"), (asynchronous, "is async")):
        instance = WorkflowInstance(define_workflow("w", body), "w-1")
        instance.advance(Start(None), 1)
        assert instance.status is WorkflowStatus.FAULTED
        assert problem in str(instance.outcome)


def test_the_json_envelope_and_the_limits() -> None:
    envelope = {"kind": "query_handler", "instance_id": "b-1", "query": "nth", "payload": [0], "reply_to": "x.r"}
    request = inbox_from_json(json.dumps(envelope).encode(), timestamp_ms=5)
    assert (request.kind, request.query, request.payload) == ("query_handler", "nth", b"[0]")
    with pytest.raises(SchemaError, match="'query' is required"):
        inbox_from_json(b'{"kind": "query_handler", "instance_id": "b-1"}')
    with pytest.raises(SchemaError, match="not part of a signal"):
        inbox_from_json(b'{"kind": "signal", "instance_id": "b-1", "signal": "s", "query": "items"}')
    with pytest.raises(LimitError, match="needs the query's name"):
        check_inbox(WorkflowInbox("r-1", "b-1", "query_handler", 1))
    with pytest.raises(LimitError):
        check_inbox(WorkflowInbox("r-1", "b-1", "query_handler", 1, query="q" * 5000))
    with pytest.raises(LimitError):
        check_inbox(WorkflowInbox("r-1", "b-1", "query_handler", 1, query="q", payload=b"[" + b"1," * 400_000 + b"1]"))


async def ledger(ctx: WorkflowContext, opening: int) -> int:
    """docs/workflows.md, "Queries", as written there."""
    balance = opening
    entries: list[int] = []
    await ctx.on_query("balance", lambda: balance)
    await ctx.on_query("entries", lambda: list(entries))
    await ctx.on_query("entry", lambda i: entries[i])
    while True:
        amount = await ctx.wait_signal("post", type=int)
        if amount == 0:
            return balance
        entries.append(amount)
        balance += amount


def test_the_docs_example() -> None:
    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("ledger", ledger))
    handle.start("acct-7", 10)
    handle.signal("acct-7", "post", 5)
    assert handle.query("acct-7", "balance") == 15
    assert handle.query("acct-7", "entry", [0]) == 5
    assert handle.query("acct-7", "entries") == [5]
    with pytest.raises(WorkflowQueryRejected, match="registered: balance, entries, entry"):
        handle.query("acct-7", "nope")


def test_an_answer_over_the_limit_fails() -> None:
    async def big(ctx: WorkflowContext, _: None) -> None:
        await ctx.on_query("all", lambda: "x" * 600_000)
        await ctx.wait_signal("never")

    rt = WorkflowTestRuntime()
    handle = rt.register(define_workflow("big", big))
    handle.start("b-1", None)
    with pytest.raises(WorkflowQueryFailed, match="more than 524,288"):
        handle.query("b-1", "all")
    with pytest.raises(TypeError):
        handle.query("b-1", "all", "abc")  # type: ignore[arg-type]
