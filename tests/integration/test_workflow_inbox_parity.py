"""The hosted worker and ``WorkflowTestRuntime`` answer one inbox sequence alike.

Both follow ``tidings.core.workflow.inbox_rules``. The hosted half is a real worker fed raw
``WorkflowInbox`` records (as any producer may send them) whose answers are read back from
the replies topics; the in-memory half takes the same requests through ``handle.ask``.
Between the two phases the worker is replaced by one with an empty data directory, so in
phase 2 the hosted worker knows ended instances only by their stored end (restored from the
journal) and replays running ones, while the in-memory runtime restarts and holds them all
live again: the answers must not differ.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


from tidings import App
from tidings.codec import avro
from tidings.core.workflow.inbox_rules import InboxReply
from tidings.core.workflow_records import WorkflowInbox, WorkflowReply
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tidings.testing.workflows import PendingReply, WorkflowTestRuntime
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


@dataclass(frozen=True)
class Step:
    workflow: str
    instance_id: str
    kind: str
    payload: bytes | None = None
    signal: str | None = None
    wait: bool = False
    signal_id: str | None = None
    input: bytes | None = None
    update: str | None = None
    update_id: str | None = None
    wait_for: str | None = None
    query: str | None = None


def qh(instance_id: str, name: str | None, args: bytes | None = None) -> Step:
    """A query to handler ``name`` of ledger ``instance_id``."""
    return Step("ledger", instance_id, "query_handler", args, query=name)


def upd(instance_id: str, name: str | None, payload: bytes | None, update_id: str | None,
        wait_for: str | None = None) -> Step:
    """An update of cart ``instance_id``."""
    return Step("cart", instance_id, "update", payload, update=name, update_id=update_id, wait_for=wait_for)


def sws(instance_id: str, payload: bytes | None, signal_id: str | None, input: bytes | None = b"2",
        signal: str | None = "item") -> Step:
    """A signal-with-start of collector ``instance_id``."""
    return Step("collector", instance_id, "signal_with_start", payload, signal, signal_id=signal_id, input=input)


NOT_FOUND = InboxReply("not_found")
ACCEPTED = InboxReply("accepted")

# collector(count) collects `count` int signals named "item"; faulty(reason) raises at once.
PHASE_1 = [
    Step("collector", "c-1", "query"),
    Step("collector", "c-1", "signal", b"1", "item"),  # signal to an unknown id
    Step("collector", "c-1", "cancel"),
    Step("collector", "c-1", "query", wait=True),
    Step("collector", "c-1", "start", b"2"),
    Step("collector", "c-1", "start", b"9"),  # a second start stores nothing
    Step("collector", "c-1", "query"),
    Step("collector", "c-1", "signal", b"7", "item"),
    Step("collector", "c-1", "signal", b"{oops", "item"),  # bad payload
    Step("collector", "c-1", "query", wait=True),  # answered when c-1 ends
    Step("collector", "c-1", "signal", b"8", "item"),  # c-1 finishes [7, 8]
    Step("collector", "c-1", "query"),
    Step("collector", "c-1", "signal", b"9", "item"),  # signal after the end
    Step("collector", "c-1", "cancel"),  # cancel after the end
    Step("collector", "c-1", "start", b"2"),  # start of an ended id
    Step("collector", "c-2", "start", b"{oops"),  # bad payload: nothing is started
    Step("collector", "c-2", "query"),
    Step("collector", "c-3", "start", b'"many"'),  # not an int: the workflow refuses it
    Step("collector", "c-3", "signal", b"1", "item"),
    Step("collector", "c-4", "start", b"3"),  # stays running across the worker change
    Step("collector", "c-4", "signal", b"5", "item"),
    Step("collector", "k-1", "start", b"3"),
    Step("collector", "k-1", "query", wait=True),  # answered when k-1 is cancelled
    Step("collector", "k-1", "cancel"),
    Step("collector", "k-1", "cancel"),  # a second cancel changes nothing
    Step("collector", "k-1", "signal", b"1", "item"),
    Step("faulty", "f-1", "start", b'"boom"'),
    Step("faulty", "f-1", "query", wait=True),
    Step("faulty", "f-1", "signal", b"1", "item"),
    Step("faulty", "f-1", "cancel"),
    sws("s-1", b"1", "a"),  # started
    sws("s-1", b"1", "a", b"9"),  # a repeat of its signal id: signalled, nothing stored
    sws("s-1", b"{oops", "b"),  # bad payload: rejected
    sws("s-2", b"1", "a", b'"many"'),  # not an int: nothing is started
    Step("collector", "s-2", "query"),
    sws("s-3", b"1", "a", b"{oops"),  # bad input
    sws("c-1", b"1", "z"),  # ended
    sws("s-4", b"4", None, b"1"),  # starts and ends at once with its signal
    sws("s-4", b"5", None, b"1"),  # ended
    # cart(delay) takes "add_item" updates (an int, the validator refuses a negative one) until
    # "close"; each is answered once the body has answered it.
    upd("u-0", "add_item", b"1", "x"),  # never started
    Step("cart", "u-1", "start", b"0"),
    upd("u-1", "add_item", b"3", "a"),  # completed: 1
    upd("u-1", "add_item", b"7", "a"),  # a repeat of its id: the first answer, nothing stored
    upd("u-1", "add_item", b"-1", "n"),  # the validator refuses it: rejected, nothing stored
    upd("u-1", "remove", b"1", "r"),  # not declared: rejected
    upd("u-1", "add_item", b"{oops", "o"),  # not JSON: rejected (and dead-lettered)
    upd("u-1", "add_item", b"1", "w", "soon"),  # nonsense wait_for: rejected
    upd("u-1", "add_item", b"4", "b", "accepted"),  # accepted
    upd("u-1", "close", None, "z"),  # completed: [3, 4]
    Step("cart", "u-2", "start", b"0"),
    upd("u-2", "add_item", b"5", "c", "accepted"),  # its answer is asked for after the worker change
    # ledger(opening) registers query handlers over its balance and entries; "post" 0 ends it.
    qh("q-0", "balance"),  # never started
    Step("ledger", "q-1", "start", b"10"),
    qh("q-1", "balance"),  # answered 10, RUNNING
    qh("q-1", "entry", b"[0]"),  # the handler raises (no entry yet): failed
    qh("q-1", "broken"),  # failed: KeyError
    qh("q-1", "nope"),  # no such handler: rejected, names those registered
    qh("q-1", "entry", b'{"i": 0}'),  # args that are no array: rejected (and dead-lettered)
    Step("ledger", "q-2", "start", b"3"),
    Step("ledger", "q-2", "signal", b"0", "post"),  # q-2 ends with balance 3
    qh("q-2", "balance"),  # the final state
    # looper([n, limit, expect]) runs one activity and continues as new until run `limit`, then
    # takes `expect` "add" signals: signals sent during its runs are carried to the last one.
    Step("looper", "l-1", "start", b"[0,3,2]"),
    Step("looper", "l-1", "signal", b"1", "add"),  # while it loops
    Step("looper", "l-1", "query", wait=True),  # answered when the last run ends
    Step("looper", "l-1", "signal", b"2", "add"),
    Step("looper", "l-2", "start", b"[0,2,1]"),  # waits for its signal across the worker change
    Step("looper", "l-3", "start", b"[0,1,0]"),
    Step("looper", "l-3", "query", wait=True),
    Step("looper", "l-3", "start", b"[0,1,0]"),  # a second start of a continued instance: a repeat
]

PHASE_2 = [
    upd("u-1", "add_item", b"3", "a"),  # ended, known by its stored end: a repeat gets its first answer
    upd("u-1", "add_item", b"3", "new"),  # ended: a new id is answered "ended"
    upd("u-2", "add_item", b"9", "c"),  # its id came back from the journal: the first answer, 1
    upd("u-2", "close", None, "y"),  # completed: [5]
    sws("s-1", b"1", "a"),  # its id came back from the journal: nothing stored
    sws("s-1", b"3", "c"),  # s-1 finishes [1, 3]
    Step("collector", "s-1", "query"),
    sws("s-4", b"6", "d"),  # ended, known by its stored end
    Step("looper", "l-2", "query"),  # running: its last run came back from the journal, old runs tombstoned
    Step("looper", "l-2", "signal", b"5", "add"),
    Step("looper", "l-2", "query", wait=True),
    Step("looper", "l-1", "query"),
    *(
        step
        for instance_id, workflow in [("c-1", "collector"), ("k-1", "collector"), ("f-1", "faulty")]
        for step in [
            Step(workflow, instance_id, "query"),
            Step(workflow, instance_id, "query", wait=True),
            Step(workflow, instance_id, "signal", b"1", "item"),
            Step(workflow, instance_id, "signal", b"{oops", "item"),  # ended is said before the payload is read
            Step(workflow, instance_id, "cancel"),
            Step(workflow, instance_id, "start", b"1"),
        ]
    ),
    Step("collector", "c-2", "signal", b"1", "item"),
    Step("collector", "c-4", "start", b"1"),
    Step("collector", "c-4", "query"),
    Step("collector", "c-4", "query", wait=True),
    Step("collector", "c-4", "signal", b"{oops", "item"),
    Step("collector", "c-4", "signal", b"6", "item"),
    Step("collector", "c-4", "signal", b"7", "item"),  # c-4 finishes [5, 6, 7]
    Step("collector", "c-4", "query"),
    qh("q-1", "balance"),  # running, replayed by the new worker
    qh("q-2", "entries"),  # ended, known by its stored end: its journal replayed through the end
    qh("q-2", "nope"),
]


def hosted_replies(
    bootstrap: str, app: App, steps: list[Step], phase: str, log_tail: Any
) -> list[InboxReply]:
    """Produce ``steps`` to the inboxes in order; return the worker's answers, in step order."""
    producer = kafka(bootstrap).producer(**{"partitioner": "murmur2_random", "enable.idempotence": True})
    for n, step in enumerate(steps):
        topics = app.workflow_handle(step.workflow).topics
        request = WorkflowInbox(
            request_id=f"{phase}-{n}",
            instance_id=step.instance_id,
            kind=step.kind,
            timestamp_ms=int(time.time() * 1000),
            payload=step.payload,
            signal=step.signal,
            reply_to=topics.replies,
            wait=step.wait,
            signal_id=step.signal_id,
            input=step.input,
            update=step.update,
            update_id=step.update_id,
            wait_for=step.wait_for,
            query=step.query,
        )
        producer.produce(topics.inbox, avro.encode(request), step.instance_id.encode())
    assert producer.flush(30) == 0

    def answered() -> dict[str, WorkflowReply]:
        replies: dict[str, WorkflowReply] = {}
        for workflow in sorted({step.workflow for step in steps}):
            for record in read_topic(bootstrap, app.workflow_handle(workflow).topics.replies):
                reply = avro.decode(record.value or b"")
                assert isinstance(reply, WorkflowReply)
                replies.setdefault(reply.request_id, reply)  # the first answer, should one be repeated
        missing = [n for n in range(len(steps)) if f"{phase}-{n}" not in replies]
        assert not missing, f"no answer yet to {[steps[n] for n in missing]}\n{log_tail()}"
        return replies

    replies = assert_eventually(answered, timeout=90)
    return [
        InboxReply(r.answer, r.status, r.outcome, r.result, r.error, r.reason)
        for r in (replies[f"{phase}-{n}"] for n in range(len(steps)))
    ]


def in_memory_replies(runtime: WorkflowTestRuntime, steps: list[Step]) -> list[PendingReply]:
    """Send ``steps`` to the in-memory runtime through the raw inbox requests of its handles."""
    handles = {name: runtime.register(runtime.definition(name))
               for name in ("collector", "faulty", "cart", "ledger", "looper")}
    pending = [
        handles[step.workflow].ask(
            step.instance_id, step.kind, payload=step.payload, signal=step.signal, wait=step.wait,
            signal_id=step.signal_id, input=step.input, update=step.update, update_id=step.update_id,
            wait_for=step.wait_for, query=step.query,
        )
        for step in steps
    ]
    runtime.run_until_idle()  # cart's sleep(0), then its answers
    return pending


def test_the_hosted_worker_and_the_in_memory_runtime_answer_one_inbox_sequence_alike(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    runtime = WorkflowTestRuntime()
    for name in ("collector", "faulty", "cart", "ledger", "looper"):
        runtime.register(workflow_app.workflow_handle(name).definition)

    first = workflow_workers.start("w1")
    hosted_1 = hosted_replies(kafka_bootstrap, workflow_app, PHASE_1, "p1", workflow_workers.log_tail)
    memory_1 = in_memory_replies(runtime, PHASE_1)
    first.stop()
    workflow_workers.start("w2")  # an empty data directory: everything comes back from the journal
    runtime.restart()
    hosted_2 = hosted_replies(kafka_bootstrap, workflow_app, PHASE_2, "p2", workflow_workers.log_tail)
    # (cart's updates are answered with its body's answers: the worker decides the inbox and
    # its timers in its own order, so cart's requests do not depend on when its sleep fires.)
    memory_2 = in_memory_replies(runtime, PHASE_2)

    steps = PHASE_1 + PHASE_2
    hosted = hosted_1 + hosted_2
    memory = [pending.reply for pending in memory_1 + memory_2]
    differences = [(step, h, m) for step, h, m in zip(steps, hosted, memory) if h != m]
    assert differences == [], "\n".join(f"{s}\n  hosted:    {h}\n  in memory: {m}" for s, h, m in differences)

    # The sequence did reach every rule (the comparison alone would pass if both said nothing useful).
    answers = {(step.instance_id, step.kind, step.wait, reply.answer) for step, reply in zip(steps, hosted)}
    assert {("c-1", "query", False, "not_found"), ("c-1", "signal", False, "not_found"),
            ("c-1", "cancel", False, "not_found"), ("c-1", "query", True, "not_found"),
            ("c-1", "start", False, "accepted"), ("c-1", "signal", False, "rejected"),
            ("c-1", "signal", False, "ended"), ("c-2", "start", False, "rejected"),
            ("c-3", "start", False, "rejected"), ("c-3", "signal", False, "not_found"),
            ("k-1", "cancel", False, "accepted"), ("f-1", "signal", False, "ended")} <= answers
    assert {("s-1", "signal_with_start", False, "started"), ("s-1", "signal_with_start", False, "signalled"),
            ("s-1", "signal_with_start", False, "rejected"), ("s-2", "signal_with_start", False, "rejected"),
            ("s-2", "query", False, "not_found"), ("s-3", "signal_with_start", False, "rejected"),
            ("c-1", "signal_with_start", False, "ended"), ("s-4", "signal_with_start", False, "started"),
            ("s-4", "signal_with_start", False, "ended")} <= answers
    assert {("u-0", "update", False, "not_found"), ("u-1", "update", False, "completed"),
            ("u-1", "update", False, "rejected"), ("u-1", "update", False, "accepted"),
            ("u-1", "update", False, "ended"), ("u-2", "update", False, "completed")} <= answers
    by_update = {(s.instance_id, s.update_id, n >= len(PHASE_1)): r for n, (s, r) in enumerate(zip(steps, hosted))
                 if s.kind == "update"}
    assert by_update[("u-1", "a", False)] == InboxReply("completed", result="1")
    assert by_update[("u-1", "z", False)] == InboxReply("completed", result="[3,4]")
    assert by_update[("u-2", "c", True)] == InboxReply("completed", result="1")
    assert by_update[("u-2", "y", True)] == InboxReply("completed", result="[5]")
    assert by_update[("u-1", "a", True)] == InboxReply("completed", result="1")
    assert by_update[("u-1", "new", True)].answer == "ended"
    by_query = {(s.instance_id, s.query, s.payload, n >= len(PHASE_1)): r for n, (s, r) in enumerate(zip(steps, hosted))
                if s.kind == "query_handler"}
    assert by_query[("q-0", "balance", None, False)] == NOT_FOUND
    assert by_query[("q-1", "balance", None, False)] == InboxReply("answered", "RUNNING", result="10")
    assert by_query[("q-1", "entry", b"[0]", False)].answer == "failed"
    assert "KeyError" in (by_query[("q-1", "broken", None, False)].reason or "")
    assert by_query[("q-1", "nope", None, False)].answer == "rejected"
    assert by_query[("q-1", "entry", b'{"i": 0}', False)].answer == "rejected"
    assert by_query[("q-2", "balance", None, False)] == InboxReply("answered", "FINISHED", "finished", "3")
    assert by_query[("q-1", "balance", None, True)] == InboxReply("answered", "RUNNING", result="10")
    assert by_query[("q-2", "entries", None, True)] == InboxReply("answered", "FINISHED", "finished", "[]")
    assert hosted[len(PHASE_1) + 6] == InboxReply("status", "FINISHED", "finished", "[1,3]")
    by_step = dict(zip(range(len(steps)), hosted))
    assert by_step[9] == InboxReply("status", "FINISHED", "finished", "[7,8]")  # the waiting query
    assert by_step[22] == InboxReply("status", "CANCELLED", "cancelled")
    assert hosted[-4] == InboxReply("status", "FINISHED", "finished", "[5,6,7]")  # before the three queries
    looped = {(s.instance_id, n >= len(PHASE_1), s.kind, s.wait): r for n, (s, r) in enumerate(zip(steps, hosted))
              if s.workflow == "looper"}
    assert looped[("l-1", False, "query", True)] == InboxReply("status", "FINISHED", "finished", "[3,1,2]")
    assert looped[("l-3", False, "query", True)] == InboxReply("status", "FINISHED", "finished", "[1]")
    assert looped[("l-2", True, "query", False)].status == "RUNNING"
    assert looped[("l-2", True, "query", True)] == InboxReply("status", "FINISHED", "finished", "[2,5]")
    assert looped[("l-1", True, "query", False)] == InboxReply("status", "FINISHED", "finished", "[3,1,2]")
    faulted = hosted[PHASE_1.index(Step("faulty", "f-1", "query", wait=True))]
    assert faulted.outcome == "faulted" and faulted.error is not None and "boom" in faulted.error.message
