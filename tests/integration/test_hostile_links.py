"""No record stops a worker, on the inputs issue 9 added (SPEC §11; ``test_hostile_input.py``'s sibling).

A worker runs ``tests.integration.hostile_links_apps``. First the test starts instances
that wait on each new input: ``relay`` instances whose send waits for a reply (from an
aggregate no worker runs), one whose ``send_with_filter`` waits for an event on ``till``'s
events topic, ``parent`` instances awaiting a ``kid``, ``kid`` instances waiting for a
signal. Then a plain confluent-kafka producer writes hostile records (the generic
catalogue of ``hostile_records`` and the cases of each input) to:

- ``relay``'s replies topic: forged replies, replies for no pending step, for an instance
  never started, for a command the step did not send, with events that do not decode,
  valid ones under a wrong key or on a wrong partition;
- ``parent``'s inbox: forged ``child_started``/``child_ended`` for steps that are not child
  steps, unknown outcomes, results that are not JSON, huge results and errors, ids over
  the limits, and reports for the real child with a made-up result carrying no token, a
  made-up one or another parent's (valid reports carry the token the parent journaled);
  ``kid``'s inbox: starts naming a parent with fields over the limits, only
  part of a parent, a parent workflow that does not exist, and signals whose
  ``signal_id`` is over the limits or holds a lone surrogate (and a valid one, twice);
- ``till``'s events topic while the filter step waits on it (read by the step's events
  tail and by the ``tally`` saga's router);
- the saga's inbox and replies.

After them, on every partition of every topic, a canary whose effect comes after the
records: a valid reply that finishes the ``relay`` instance the hostile replies were aimed
at, a kid's real end that finishes its parent, a ``go`` signal, a command whose event starts
a saga, and the command whose event the filter step waits for. Then:

- the worker never exited and never logged "failed; stopping the worker";
- each record that is no valid input is dead-lettered exactly once, with a reason;
- each valid one had its effect, and the records a valid one causes elsewhere (a kid's
  acknowledgement to a parent that was never started, an undecodable event routed to the
  saga) are dead-lettered where they land, with a reason, and nothing else is.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from tidings import App, RecordError
from tidings.codec import avro
from tidings.codec.answers import decode_outcome_record, decode_reply
from tidings.core.limits import MAX_VALUE_BYTES
from tidings.core.partitioning import partition_for
from tidings.core.records import CommandEnvelope, DeadLetter, EventEnvelope, ReplyEnvelope
from tidings.core.saga_records import SagaRouted
from tidings.core.workflow.journal import SignalReceived, Started, StepStarted
from tidings.core.workflow_records import WorkflowJournalEntry, WorkflowOutcomeRecord
from tidings.shell.runtime.topics import apply_topics
from tidings.testing import WorkerProcess, assert_eventually, read_topic
from tests.integration.hostile_links_apps import PARTITIONS, STARTS, WANTED, build
from tests.integration.hostile_records import (
    DEEP_JSON,
    JSON,
    LONG_ID,
    NEAR_LIMIT,
    SURROGATE,
    AvroWriter,
    Expect,
    Sent,
    Table,
    Target,
    Topics,
    as_json,
    event_fields,
    now_ms,
    partition_of,
)
from tests.workers import ROOT, Workers
from tests.kafka_clients import kafka

MAX_DEAD_LETTER = 256 * 1024
SETTLE_S = 60.0
CRASHED = "failed; stopping the worker"
SHOWN = 80
#: A result or error a child may report: large, within ``MAX_VALUE_BYTES``.
HUGE = 700 * 1024


@dataclass
class Seen:
    """What the worker wrote, read back from its topics."""

    dead: dict[tuple[str, int, int], list[tuple[str, int]]]
    letters: list[DeadLetter]
    undecodable_dead: list[int]
    outcomes: dict[tuple[str, str], list[tuple[str, str]]]  # (workflow, instance) -> [(outcome, result|error)]
    started: Counter[tuple[str, str]]  # (workflow, instance) -> Started records
    signals: dict[str, Counter[str | None]]  # kid instance -> signal_id -> SignalReceived records
    sagas: Counter[str]  # saga id -> journal records
    commands: Counter[str]  # bell commands by correlation id (the relay sends)
    till_events: Counter[str]  # till events by correlation id


Check = Callable[[Seen], list[str]]
Explains = Callable[[DeadLetter], bool]


@dataclass
class Link(Sent):
    """A record of this test; ``explains`` matches the dead letters its effect causes elsewhere."""

    explains: Explains | None = None


def nothing(_: Seen) -> list[str]:
    return []


def ended(workflow: str, instance: str, outcome: str, result: str | None = None) -> Check:
    def check(seen: Seen) -> list[str]:
        got = seen.outcomes.get((workflow, instance), [])
        if [o for o, _ in got] != [outcome]:
            return [f"{workflow} {instance[:60]!r}: outcomes {[o for o, _ in got]}, not [{outcome!r}]"]
        if result is not None and result not in got[0][1]:
            return [f"{workflow} {instance[:60]!r}: ended with {got[0][1][:120]!r}, not {result!r}"]
        return []

    return check


def not_started(workflow: str, instance: str) -> Check:
    def check(seen: Seen) -> list[str]:
        n = seen.started[(workflow, instance)]
        return [f"dead-lettered, yet {workflow} {instance[:60]!r} started {n} times"] if n else []

    return check


def started_once(workflow: str, instance: str) -> Check:
    def check(seen: Seen) -> list[str]:
        n = seen.started[(workflow, instance)]
        return [] if n == 1 else [f"{workflow} {instance[:60]!r} started {n} times, not once"]

    return check


def signal_stored_once(instance: str, signal_id: str) -> Check:
    def check(seen: Seen) -> list[str]:
        n = seen.signals.get(instance, Counter())[signal_id]
        return [] if n == 1 else [f"signal {signal_id!r} stored {n} times, not once"]

    return check


def saga_started(saga_id: str) -> Check:
    def check(seen: Seen) -> list[str]:
        return [] if seen.sagas[saga_id] else [f"no saga {saga_id!r} journaled"]

    return check


def dead_at(topic: str, key: bytes, reason: str) -> Explains:
    return lambda letter: letter.source_topic == topic and letter.key == key and reason in letter.reason


def routed_dead(inbox: str, event_id: str) -> Explains:
    def explains(letter: DeadLetter) -> bool:
        if letter.source_topic != inbox or letter.truncated:
            return False
        try:
            routed = avro.decode_as(letter.value or b"", SagaRouted)
        except RecordError:
            return False
        return routed.event.event_id == event_id

    return explains


def explained_once(explains: Explains) -> Check:
    def check(seen: Seen) -> list[str]:
        n = sum(1 for letter in seen.letters if explains(letter))
        return [] if n == 1 else [f"its effect was dead-lettered {n} times where it landed, not once"]

    return check


def all_of(*checks: Check) -> Check:
    return lambda seen: [problem for check in checks for problem in check(seen)]


class Ids:
    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:6]
        self.n = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.run}-{self.n}"

    def on(self, partition: int, prefix: str) -> str:
        while True:
            candidate = self.fresh(prefix)
            if partition_for(candidate, PARTITIONS) == partition:
                return candidate

    def off(self, partition: int, prefix: str) -> str:
        while True:
            candidate = self.fresh(prefix)
            if partition_for(candidate, PARTITIONS) != partition:
                return candidate


@dataclass
class Waiting:
    """The instances the test starts before the hostile records, and what each waits on."""

    relays: dict[int, str]  # partition -> relay waiting for a reply (hostile replies aimed at it)
    relay_targets: dict[str, str]  # relay -> bell id
    extra_relays: dict[str, str]  # case -> relay, for the valid forged replies
    filter_relay: str
    filter_target: str  # the till id its filter step watches
    parents: dict[int, str]  # partition -> parent awaiting its kid
    huge_parents: dict[str, str]  # case -> parent that a forged huge report ends
    kids: dict[int, str]  # partition -> kid waiting for "go"

    def all_starts(self) -> list[tuple[str, str, Any]]:
        starts: list[tuple[str, str, Any]] = []
        for relay in [*self.relays.values(), *self.extra_relays.values()]:
            starts.append(("relay", relay, {"target": self.relay_targets[relay]}))
        starts.append(("relay", self.filter_relay, {"target": self.filter_target, "mode": "filter"}))
        for parent in [*self.parents.values(), *self.huge_parents.values()]:
            starts.append(("parent", parent, parent))
        for kid in self.kids.values():
            starts.append(("kid", kid, kid))
        return starts


def step_key(workflow: str, instance: str, path: str = "1") -> str:
    return f"{workflow}/{instance}/{path}"


class LinkTable:
    """The hostile records of every new input, and the canaries after them."""

    def __init__(self, app: App, writer: AvroWriter) -> None:
        self.app = app.name
        self.avro = writer
        self.ids = Ids()
        self.generic = Table(Topics(app.name), writer)
        self.relay_replies = f"{app.name}.workflow.relay.replies"
        self.parent_inbox = f"{app.name}.workflow.parent.inbox"
        self.kid_inbox = f"{app.name}.workflow.kid.inbox"
        self.till_events = f"{app.name}.aggregate.till.events"
        self.till_commands = f"{app.name}.aggregate.till.commands"
        self.saga_inbox = f"{app.name}.saga.tally.inbox"
        self.saga_replies = f"{app.name}.saga.tally.replies"
        self.waiting = self._waiting()
        self.tokens: dict[str, str] = {}  # parent -> the token of its step 1's child, once started

    def _waiting(self) -> Waiting:
        ids = self.ids
        relays = {p: ids.on(p, "relay") for p in range(PARTITIONS)}
        extra = {case: ids.fresh("relay") for case in ("wrong key", "wrong partition", "rejected")}
        targets = {relay: ids.fresh("bell") for relay in [*relays.values(), *extra.values()]}
        return Waiting(
            relays=relays, relay_targets=targets, extra_relays=extra,
            filter_relay=ids.fresh("relay-filter"), filter_target=ids.on(0, "till"),
            parents={p: ids.on(p, "parent") for p in range(PARTITIONS)},
            huge_parents={case: ids.fresh("parent") for case in ("result", "error")},
            kids={p: ids.on(p, "kid") for p in range(PARTITIONS)},
        )

    # -- building blocks ---------------------------------------------------------------

    def record(self, target: str, case: str, topic: str, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes | None]] | None = None, *, expect: Expect = Expect.DEAD,
               check: Check = nothing, partition: int | None = None, explains: Explains | None = None) -> Link:
        explicit = partition is not None
        if partition is None:
            assert key is not None
            partition = partition_of(key)
        return Link(target, case, topic, key, value, list(headers or []), partition, explicit, expect,
                    check, explains=explains)

    def generic_cases(self, name: str, topic: str, kind: str) -> list[Link]:
        target = Target(name, topic, kind)
        return [Link(r.target, r.case, r.topic, r.key, r.value, r.headers, r.partition, r.explicit, r.expect, r.check)
                for r in self.generic.generic_cases(target)]

    def reply(self, correlation_id: str, *, command_id: str | None = None, status: str = "accepted",
              events: list[dict[str, Any]] | None = None, reason: str | None = None) -> bytes:
        return self.avro.encode("reply", {
            "command_id": correlation_id if command_id is None else command_id,
            "correlation_id": correlation_id, "aggregate_id": "bell-x", "status": status, "version": 1,
            "timestamp_ms": now_ms(), "events": [] if events is None else events,
            "expected_version": None, "reason": reason,
        })

    def rung(self, correlation_id: str, word: str = "forged", *, type_: str = "Rung",
             payload: bytes | None = None) -> dict[str, Any]:
        data = json.dumps({"word": word}).encode() if payload is None else payload
        return {**event_fields("bell-x", type_, data), "command_id": correlation_id, "correlation_id": correlation_id}

    def inbox(self, instance: str, kind: str, **fields: Any) -> bytes:
        return self.avro.encode("workflowinbox", {
            "request_id": uuid.uuid4().hex, "instance_id": instance, "kind": kind, "timestamp_ms": now_ms(),
            "payload": None, "signal": None, "reply_to": None, "wait": False, "metadata": {},
            "signal_id": None, "parent_workflow": None, "parent_id": None, "parent_path": None,
            "child_workflow": None, "outcome": None, "error": None, "parent_token": None, **fields,
        })

    # -- relay's replies -----------------------------------------------------------------

    def reply_cases(self) -> list[Link]:
        topic, w = self.relay_replies, self.waiting
        records = self.generic_cases("relay replies", topic, "replies")

        def add(case: str, instance: str, value: bytes, headers: list[tuple[str, bytes | None]] | None = None,
                *, expect: Expect = Expect.DEAD, check: Check = nothing, key: str | None = None,
                partition: int | None = None) -> None:
            raw_key = (instance if key is None else key).encode("utf-8", "surrogatepass")
            records.append(self.record("relay replies", case, topic, raw_key, value, headers, expect=expect,
                                       check=check, partition=partition))

        for p, relay in w.relays.items():
            key = step_key("relay", relay)
            add(f"p{p}: a reply to a step of another workflow", relay, self.reply(step_key("other", relay)))
            add(f"p{p}: a reply whose correlation id names no step", relay, self.reply(f"relay/{relay}/not-a-path"))
            add(f"p{p}: a reply to a command the step did not send", relay,
                self.reply(key, command_id=self.ids.fresh("cmd"), events=[self.rung(key)]))
            ghost = self.ids.on(p, "ghost")  # keyed by itself: a forwarded copy would be dead-lettered instead
            add(f"p{p}: a reply to an instance never started", ghost, self.reply(step_key("relay", ghost)))
            add(f"p{p}: an accepted reply without events", relay, self.reply(key))
            add(f"p{p}: an event of an unknown type", relay, self.reply(key, events=[self.rung(key, type_="Exploded")]))
            add(f"p{p}: an event whose payload is schema-invalid", relay,
                self.reply(key, events=[self.rung(key, payload=b'{"word": 3}')]))
            add(f"p{p}: an event of type json nested 10,000 deep", relay,
                self.reply(key, events=[self.rung(key, type_="json", payload=DEEP_JSON)]))
            add(f"p{p}: an event near 1 MB", relay,
                self.reply(key, events=[self.rung(key, payload=json.dumps({"word": "x" * NEAR_LIMIT}).encode())]))
            add(f"p{p}: a status no aggregate sends", relay, self.reply(key, status="exploded"))
            add(f"p{p}: JSON, a lone surrogate in the correlation id", relay, as_json({
                "command_id": "c", "correlation_id": step_key("relay", SURROGATE), "aggregate_id": "b",
                "status": "accepted", "version": 1}), JSON)
            add(f"p{p}: JSON, a 300 KB correlation id", relay, as_json({
                "command_id": "c", "correlation_id": step_key("relay", LONG_ID), "aggregate_id": "b",
                "status": "rejected", "version": 1}), JSON)
            add(f"p{p}: an Avro command on the replies topic", relay, self.avro.encode("command", {
                "command_id": key, "correlation_id": key, "aggregate_id": "b", "type": "Ring", "payload": b"{}",
                "timestamp_ms": now_ms(), "expected_version": None, "reply_to": None, "causation_id": None,
                "metadata": {}, "reply_key": None}))
            # A step that is not pending (a later path): a late repeat looks the same; dropped.
            add(f"p{p}: a reply to a step that is not pending", relay,
                self.reply(step_key("relay", relay, "2"), events=[self.rung(step_key("relay", relay, "2"))]),
                expect=Expect.TOLERATED)
        wrong = w.extra_relays["wrong key"]
        add("valid, under another instance's key", wrong,
            self.reply(step_key("relay", wrong), events=[self.rung(step_key("relay", wrong), "wrong-key")]),
            expect=Expect.VALID, check=ended("relay", wrong, "finished", "rung wrong-key"),
            key=self.ids.off(partition_for(wrong, PARTITIONS), "relay"))
        moved = w.extra_relays["wrong partition"]
        add("valid, its key, a wrong partition", moved,
            self.reply(step_key("relay", moved), events=[self.rung(step_key("relay", moved), "moved")]),
            expect=Expect.VALID, check=ended("relay", moved, "finished", "rung moved"),
            partition=(partition_for(moved, PARTITIONS) + 1) % PARTITIONS)
        refused = w.extra_relays["rejected"]
        add("valid: rejected, the step fails", refused,
            self.reply(step_key("relay", refused), status="rejected", reason="no bell here"),
            expect=Expect.VALID, check=ended("relay", refused, "faulted", "no bell here"))
        return records

    def reply_canary(self, partition: int) -> Link:
        relay = self.waiting.relays[partition]
        key = step_key("relay", relay)
        return self.record("relay replies", f"canary on p{partition}", self.relay_replies, relay.encode(),
                           self.reply(key, events=[self.rung(key, "canary")]), expect=Expect.CANARY,
                           check=ended("relay", relay, "finished", "rung canary"))

    # -- parent's and kid's inboxes ------------------------------------------------------

    def parent_cases(self) -> list[Link]:
        topic, w = self.parent_inbox, self.waiting
        records = self.generic_cases("parent inbox", topic, "inbox")

        def add(case: str, instance: str, value: bytes, **kw: Any) -> None:
            records.append(self.record("parent inbox", case, topic, instance.encode("utf-8", "surrogatepass"),
                                       value, **kw))

        for p, parent in w.parents.items():
            add(f"p{p}: child_started for a step that is no child step", parent,
                self.inbox(parent, "child_started", parent_path="9", child_workflow="kid"))
            add(f"p{p}: child_started naming another child workflow", parent,
                self.inbox(parent, "child_started", parent_path="1", child_workflow="relay"))
            add(f"p{p}: child_ended for the await step (no child step)", parent,
                self.inbox(parent, "child_ended", parent_path="2", child_workflow="kid", outcome="finished",
                           payload=b'"x"'))
            add(f"p{p}: child_ended with an unknown outcome", parent,
                self.inbox(parent, "child_ended", parent_path="1", child_workflow="kid", outcome="exploded"))
            add(f"p{p}: child_ended finished without a result", parent,
                self.inbox(parent, "child_ended", parent_path="1", child_workflow="kid", outcome="finished"))
            add(f"p{p}: child_ended whose result is not JSON", parent,
                self.inbox(parent, "child_ended", parent_path="1", child_workflow="kid", outcome="finished",
                           payload=b"{not json"))
            add(f"p{p}: child_ended whose result nests 10,000 deep", parent,
                self.inbox(parent, "child_ended", parent_path="1", child_workflow="kid", outcome="finished",
                           payload=DEEP_JSON))
            add(f"p{p}: child_ended with a result over MAX_VALUE_BYTES", parent,
                self.inbox(parent, "child_ended", parent_path="1", child_workflow="kid", outcome="finished",
                           payload=b'"' + b"x" * (MAX_VALUE_BYTES + 10) + b'"'))
            add(f"p{p}: child_ended with a 300 KB parent_path", parent,
                self.inbox(parent, "child_ended", parent_path=LONG_ID, child_workflow="kid", outcome="cancelled"))
            add(f"p{p}: child_started with a 300 KB child_workflow", parent,
                self.inbox(parent, "child_started", parent_path="1", child_workflow=LONG_ID))
            add(f"p{p}: JSON child_ended, a lone surrogate in child_workflow", parent, as_json({
                "kind": "child_ended", "instance_id": parent, "parent_path": "1", "child_workflow": SURROGATE,
                "outcome": "cancelled"}), headers=JSON)
            add(f"p{p}: JSON child_started, a lone surrogate in parent_path", parent, as_json({
                "kind": "child_started", "instance_id": parent, "parent_path": SURROGATE, "child_workflow": "kid"}),
                headers=JSON)
        for p, parent in w.parents.items():
            # The real child at the real step, with a made-up outcome: only its token, which
            # no client can read, tells it from the kid's own report (the canary checks the
            # parent ends with the kid's real result).
            for case, token in (("no token", None), ("a made-up token", "f" * 32),
                                ("another instance's token", self.tokens.get(w.huge_parents["result"]))):
                add(f"p{p}: child_ended for its real child, a forged result and {case}", parent,
                    self.inbox(parent, "child_ended", parent_path="1", child_workflow="kid", outcome="finished",
                               payload=b'"forged"', parent_token=token))
            add(f"p{p}: child_started for its real child without the token", parent,
                self.inbox(parent, "child_started", parent_path="1", child_workflow="kid"))
        ghost = self.ids.fresh("ghost-parent")
        add("child_ended to a parent never started", ghost,
            self.inbox(ghost, "child_ended", parent_path="1", child_workflow="kid", outcome="cancelled"),
            check=not_started("parent", ghost))
        for case, payload, outcome, expected in (
            ("result", b'"' + b"r" * HUGE + b'"', "finished", "finished"),
            ("error", None, "faulted", "faulted"),
        ):
            parent = w.huge_parents[case]
            error = None if payload is not None else {"kind": None, "message": "e" * HUGE, "type": "Boom"}
            # Valid: it carries the token the parent drew for its kid (read from its journal,
            # as only a worker can).
            add(f"valid: child_ended with a {HUGE // 1024} KB {case}", parent,
                self.inbox(parent, "child_ended", parent_path="1", child_workflow="kid", outcome=outcome,
                           payload=payload, error=error, parent_token=self.tokens[parent]),
                expect=Expect.VALID, check=ended("parent", parent, expected))
        return records

    def kid_cases(self) -> list[Link]:
        topic, w = self.kid_inbox, self.waiting
        records = self.generic_cases("kid inbox", topic, "inbox")

        def add(case: str, instance: str, value: bytes, **kw: Any) -> None:
            records.append(self.record("kid inbox", case, topic, instance.encode("utf-8", "surrogatepass"),
                                       value, **kw))

        def start(case: str, *, expect: Expect = Expect.DEAD, explains: Explains | None = None, **parent: Any) -> None:
            kid = self.ids.fresh("kid")
            check = not_started("kid", kid) if expect is Expect.DEAD else started_once("kid", kid)
            if explains is not None:
                check = all_of(check, explained_once(explains))
            add(case, kid, self.inbox(kid, "start", payload=b'"k"', **parent), expect=expect, check=check,
                explains=explains)

        start("a start naming a parent by a 300 KB parent_id",
              parent_workflow="parent", parent_id=LONG_ID, parent_path="1")
        start("a start naming a parent by a 300 KB parent_workflow",
              parent_workflow=LONG_ID, parent_id="p", parent_path="1")
        start("a start naming a parent by a 300 KB parent_path",
              parent_workflow="parent", parent_id="p", parent_path=LONG_ID)
        start("a start naming only part of a parent", parent_workflow="parent", parent_id="p")
        start("a start naming a parent workflow that does not exist",
              parent_workflow="nope", parent_id="p", parent_path="1")
        start("a start naming a parent workflow that is no topic name",
              parent_workflow="no such/workflow", parent_id="p", parent_path="1")
        ghost = self.ids.fresh("ghost-parent")
        # Valid as far as the kid can tell; its acknowledgement is refused where it lands.
        start("valid: a start naming a parent never started", expect=Expect.VALID,
              explains=dead_at(self.parent_inbox, ghost.encode(), "never started"),
              parent_workflow="parent", parent_id=ghost, parent_path="1")
        kid = self.ids.fresh("kid")
        # The JSON form has no parent fields (only Avro starts name a parent): a plain start.
        add("JSON start with a lone surrogate in parent_id (not a JSON field: ignored)", kid, as_json({
            "kind": "start", "instance_id": kid, "payload": "k", "parent_workflow": "parent",
            "parent_id": SURROGATE, "parent_path": "1"}), headers=JSON, expect=Expect.VALID,
            check=started_once("kid", kid))

        for p, kid in w.kids.items():
            def signal(case: str, signal_id: Any, **kw: Any) -> None:
                add(f"p{p}: {case}", kid, as_json({"kind": "signal", "instance_id": kid, "signal": "other",
                                                   "payload": 1, "signal_id": signal_id}), headers=JSON, **kw)

            signal("a signal_id with a lone surrogate", self.ids.fresh(SURROGATE))
            signal("a 300 KB signal_id", LONG_ID)
            signal("an empty signal_id", "")
            signal("a signal_id that is a number", 12)
            once = self.ids.fresh("signal")
            signal("valid: a signal with a signal_id", once, expect=Expect.VALID, check=signal_stored_once(kid, once))
            signal("valid: the same signal_id again (stores nothing)", once, expect=Expect.VALID)
        return records

    def parent_canary(self, partition: int) -> Link:
        # The kid's real end, reported to the parent's partition after the hostile reports.
        parent = self.waiting.parents[partition]
        child = f"{parent}:1"
        return self.record("parent inbox", f"canary on p{partition} (its kid's end)", self.kid_inbox,
                           child.encode(), as_json({"kind": "signal", "instance_id": child, "signal": "go"}),
                           JSON, expect=Expect.CANARY,
                           check=all_of(ended("kid", child, "finished"), ended("parent", parent, "finished",
                                                                               f"parent got kid {parent}")))

    def kid_canary(self, partition: int) -> Link:
        kid = self.waiting.kids[partition]
        return self.record("kid inbox", f"canary on p{partition}", self.kid_inbox, kid.encode(),
                           as_json({"kind": "signal", "instance_id": kid, "signal": "go",
                                    "signal_id": self.ids.fresh("go")}), JSON,
                           expect=Expect.CANARY, check=ended("kid", kid, "finished", f"kid {kid}"))

    # -- till's events (the filter wait and the saga router) -----------------------------

    def event_cases(self) -> list[Link]:
        topic, w = self.till_events, self.waiting
        records = self.generic_cases("till events", topic, "events")
        key = step_key("relay", w.filter_relay)
        target = w.filter_target

        def event(case: str, type_: str, payload: bytes, *, aggregate_id: str = target,
                  expect: Expect = Expect.VALID, routed_dead_letter: bool = True) -> None:
            fields = {**event_fields(aggregate_id, type_, payload), "command_id": key, "correlation_id": key}
            explains = routed_dead(self.saga_inbox, fields["event_id"]) if routed_dead_letter else None
            check = explained_once(explains) if explains is not None else nothing
            records.append(self.record("till events", case, topic, f"{aggregate_id}/1".encode(),
                                       self.avro.encode("event", fields), expect=expect, check=check,
                                       explains=explains))

        # Under the waiting step's correlation id, on the partition its tail reads: the tail
        # skips them; the router routes them, and the saga dead-letters what does not decode.
        event("the step's correlation id, an unknown event type", "Exploded", b"{}")
        event("the step's correlation id, a schema-invalid payload", "Added", b'{"n": "lots"}')
        event("the step's correlation id, user code raises reading it (n=13)", "Added", b'{"n": 13}')
        event("the step's correlation id, type json nested 10,000 deep", "json", DEEP_JSON)
        event("the step's correlation id, a wanted event near 1 MB", "Added",
              json.dumps({"n": 1, "memo": "x" * NEAR_LIMIT}).encode(), expect=Expect.DEAD,
              routed_dead_letter=False)
        event("the step's correlation id, a 300 KB aggregate id", "Added", b'{"n": 7}',
              aggregate_id=LONG_ID + self.ids.fresh(""), expect=Expect.DEAD, routed_dead_letter=False)
        return records

    def command(self, aggregate_id: str, n: int, correlation_id: str) -> bytes:
        return as_json({"command_id": self.ids.fresh("cmd"), "correlation_id": correlation_id,
                        "aggregate_id": aggregate_id, "type": "Add", "payload": {"n": n}})

    def filter_canary(self) -> Link:
        """The command whose event the filter step waits for, after every hostile event."""
        w = self.waiting
        return self.record("till events", "the event the filter step waits for", self.till_commands,
                           w.filter_target.encode(),
                           self.command(w.filter_target, WANTED, step_key("relay", w.filter_relay)), JSON,
                           expect=Expect.CANARY, check=ended("relay", w.filter_relay, "finished", f"added {WANTED}"))

    def saga_canary(self, target: str, partition: int, *, by_events: bool) -> Link:
        """A command whose event starts a saga: its event on till's events partition ``partition``
        (``by_events``), or its saga on the saga's partition ``partition``."""
        aggregate = self.ids.on(partition, "till") if by_events else self.ids.fresh("till")
        saga_id = self.ids.fresh("tally") if by_events else self.ids.on(partition, "tally")
        return self.record(target, f"canary on p{partition}", self.till_commands, aggregate.encode(),
                           self.command(aggregate, STARTS, saga_id), JSON, expect=Expect.CANARY,
                           check=saga_started(saga_id))

    # -- everything ----------------------------------------------------------------------

    def hostile(self) -> list[Link]:
        return (self.reply_cases() + self.parent_cases() + self.kid_cases() + self.event_cases()
                + self.generic_cases("saga inbox", self.saga_inbox, "saga_inbox")
                + self.generic_cases("saga replies", self.saga_replies, "replies"))

    def canaries(self) -> list[Link]:
        records = [self.filter_canary()]
        for p in range(PARTITIONS):
            records += [self.reply_canary(p), self.parent_canary(p), self.kid_canary(p),
                        self.saga_canary("till events", p, by_events=True),
                        self.saga_canary("saga inbox and replies", p, by_events=False)]
        return records


# -- running it --------------------------------------------------------------------------


@pytest.fixture
def links_apps(kafka_bootstrap: str, app_id: str) -> Iterator[tuple[App, App]]:
    app, mute = build(app_id)
    for one in (app, mute):
        apply_topics(kafka(kafka_bootstrap), one.topic_specs(), out=lambda line: None)
    yield app, mute
    admin = kafka(kafka_bootstrap).admin()
    topics = admin.list_topics(timeout=30).topics
    ours = [name for name in topics if name.startswith((f"{app_id}.", f"{app_id}-"))]
    if ours:
        for future in admin.delete_topics(ours, operation_timeout=30).values():
            future.result()


@pytest.fixture
def links_worker(kafka_bootstrap: str, links_apps: tuple[App, App], tmp_path: Path) -> Iterator[WorkerProcess]:
    workers = Workers(kafka_bootstrap, links_apps[0].name, tmp_path,
                      app_spec="tests.integration.hostile_links_apps:app")
    yield workers.start()
    workers.kill_all()


def produce(bootstrap: str, phases: list[list[Link]]) -> None:
    """Send each phase, acknowledged, before the next (so a canary comes after its records)."""
    producer = kafka(bootstrap).producer(**{"partitioner": "murmur2_random",
                         "enable.idempotence": True, "linger.ms": 2, "message.max.bytes": 1_048_576})
    failures: list[str] = []
    for phase in phases:
        for record in phase:
            def delivered(error: KafkaError | None, message: Message, record: Link = record) -> None:
                if error is not None:
                    failures.append(f"{record.label()}: {error}")
                elif message.partition() != record.partition:
                    failures.append(f"{record.label()}: landed on partition {message.partition()}")
                else:
                    record.offset = message.offset() or 0

            kwargs: dict[str, Any] = {"headers": list(record.headers), "on_delivery": delivered}
            if record.explicit:
                kwargs["partition"] = record.partition
            producer.produce(record.topic, record.value, record.key, **kwargs)
        assert producer.flush(30) == 0
    assert failures == [], "the test could not send its records:\n" + "\n".join(failures)


def _decoded(value: bytes | None, record_type: type) -> Any:
    try:
        # A JSON request's reply and a JSON start's outcome are JSON (codec/answers.py).
        if record_type is ReplyEnvelope:
            return decode_reply(value or b"")
        if record_type is WorkflowOutcomeRecord:
            return decode_outcome_record(value or b"")
        return avro.decode_as(value or b"", record_type)
    except RecordError:
        return None


def observe(bootstrap: str, table: LinkTable) -> Seen:
    app = table.app
    dead: dict[tuple[str, int, int], list[tuple[str, int]]] = defaultdict(list)
    letters: list[DeadLetter] = []
    undecodable: list[int] = []
    for record in read_topic(bootstrap, f"{app}.deadletter"):
        letter = _decoded(record.value, DeadLetter)
        if isinstance(letter, DeadLetter):
            dead[(letter.source_topic, letter.partition, letter.offset)].append(
                (letter.reason, len(record.value or b"")))
            letters.append(letter)
        else:
            undecodable.append(len(record.value or b""))
    outcomes: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    started: Counter[tuple[str, str]] = Counter()
    signals: dict[str, Counter[str | None]] = defaultdict(Counter)
    for workflow in ("relay", "parent", "kid"):
        for record in read_topic(bootstrap, f"{app}.workflow.{workflow}.outcomes"):
            outcome = _decoded(record.value, WorkflowOutcomeRecord)
            if isinstance(outcome, WorkflowOutcomeRecord):
                detail = outcome.result if outcome.result is not None else str(outcome.error)
                outcomes[(workflow, outcome.instance_id)].append((outcome.outcome, detail or ""))
        for record in read_topic(bootstrap, f"{app}.workflow.{workflow}.journal"):
            entry = _decoded(record.value, WorkflowJournalEntry)
            if isinstance(entry, WorkflowJournalEntry):
                if isinstance(entry.record, Started):
                    started[(workflow, entry.instance_id)] += 1
                elif isinstance(entry.record, SignalReceived):
                    signals[entry.instance_id][entry.record.signal_id] += 1
    sagas = Counter((record.key or b"").decode(errors="replace").rpartition("/")[0]
                    for record in read_topic(bootstrap, f"{app}.saga.tally.journal"))
    commands = Counter(c.correlation_id for r in read_topic(bootstrap, f"{app}-mute.aggregate.bell.commands")
                       if isinstance(c := _decoded(r.value, CommandEnvelope), CommandEnvelope))
    till = Counter(e.correlation_id for r in read_topic(bootstrap, table.till_events)
                   if isinstance(e := _decoded(r.value, EventEnvelope), EventEnvelope))
    return Seen(dict(dead), letters, undecodable, dict(outcomes), started, dict(signals), sagas, commands, till)


def wait_until_waiting(bootstrap: str, table: LinkTable, worker: WorkerProcess) -> None:
    """Start the instances the records aim at, and wait until each waits on its input."""
    built, _ = build(table.app)
    w = table.waiting

    async def start_all() -> None:
        for workflow, instance, value in w.all_starts():
            await built.workflow_handle(workflow).start(instance, value, bootstrap=bootstrap)

    asyncio.run(start_all())

    def ready() -> bool:
        if not worker.running:
            raise AssertionError("the worker exited while the test set up")
        seen = observe(bootstrap, table)
        relays = [*w.relays.values(), *w.extra_relays.values()]
        kids = [f"{p}:1" for p in [*w.parents.values(), *w.huge_parents.values()]] + list(w.kids.values())
        return (all(seen.commands[step_key("relay", r)] for r in relays)
                and seen.till_events[step_key("relay", w.filter_relay)] >= 1
                and all(seen.started[("kid", k)] for k in kids))

    assert_eventually(ready, timeout=60, interval=0.5, message="every instance waits on its input")


def child_tokens(bootstrap: str, app: str) -> dict[str, str]:
    """Each parent's token for the child of its step 1, from its journal (which only workers read)."""
    tokens: dict[str, str] = {}
    for record in read_topic(bootstrap, f"{app}.workflow.parent.journal"):
        entry = _decoded(record.value, WorkflowJournalEntry)
        if (isinstance(entry, WorkflowJournalEntry) and isinstance(entry.record, StepStarted)
                and entry.record.path == "1" and entry.record.token is not None):
            tokens[entry.instance_id] = entry.record.token
    return tokens


def judge(sent: list[Link], seen: Seen) -> list[str]:
    problems: list[str] = []
    for record in sent:
        letters = seen.dead.get(record.position, [])
        found: list[str] = []
        if record.expect is Expect.DEAD:
            if not letters:
                found.append("not dead-lettered")
            elif len(letters) > 1:
                found.append(f"dead-lettered {len(letters)} times")
        elif record.expect is Expect.TOLERATED:
            if len(letters) > 1:
                found.append(f"dead-lettered {len(letters)} times")
        elif letters:
            found.append(f"dead-lettered, but it is a valid input ({letters[0][0][:200]})")
        found += record.check(seen)  # type: ignore[arg-type]
        problems += [f"{record.label()}: {problem}" for problem in found]
    known = {record.position for record in sent}
    explains = [record.explains for record in sent if record.explains is not None]
    for letter in seen.letters:
        position = (letter.source_topic, letter.partition, letter.offset)
        if not letter.reason.strip():
            problems.append(f"the dead letter of {position} has no reason")
        if position not in known and not any(explain(letter) for explain in explains):
            problems.append(f"a record the test did not send was dead-lettered: {position}: {letter.reason[:200]}")
    for position, found_letters in seen.dead.items():
        for _, size in found_letters:
            if size > MAX_DEAD_LETTER:
                problems.append(f"the dead letter of {position} is {size} bytes")
    problems += [f"a dead letter of {size} bytes does not decode" for size in seen.undecodable_dead]
    return problems


def settled(sent: list[Link], seen: Seen) -> bool:
    for record in sent:
        if record.expect is Expect.DEAD:
            if record.position not in seen.dead:
                return False
        elif record.expect is not Expect.TOLERATED and record.check(seen):  # type: ignore[arg-type]
            return False
    return True


def test_no_record_on_the_new_inputs_stops_the_worker_and_each_bad_one_is_dead_lettered_once(
    kafka_bootstrap: str, links_apps: tuple[App, App], links_worker: WorkerProcess
) -> None:
    app, _ = links_apps
    table = LinkTable(app, AvroWriter(ROOT / "schemas"))
    wait_until_waiting(kafka_bootstrap, table, links_worker)
    table.tokens = child_tokens(kafka_bootstrap, app.name)
    assert set(table.waiting.huge_parents.values()) <= set(table.tokens), "a parent journaled no child token"
    hostile, canaries = table.hostile(), table.canaries()
    produce(kafka_bootstrap, [hostile, canaries])
    sent = hostile + canaries

    def done() -> bool:
        if not links_worker.running:
            raise AssertionError("the worker exited")
        return settled(sent, observe(kafka_bootstrap, table))

    try:
        assert_eventually(done, timeout=SETTLE_S, interval=1.0, message="every record handled")
    except AssertionError:
        pass  # listed below, record by record

    problems = judge(sent, observe(kafka_bootstrap, table))
    log = links_worker.log_path.read_text(errors="replace") if links_worker.log_path.exists() else ""
    if not links_worker.running:
        problems.insert(0, "the worker exited")
    if CRASHED in log:
        problems.insert(0, f"the worker logged {CRASHED!r}")
    shown = problems[:SHOWN] + ([f"... and {len(problems) - SHOWN} more"] if len(problems) > SHOWN else [])
    assert problems == [], (f"{len(problems)} problems with {len(sent)} records:\n" + "\n".join(shown)
                            + "\n--- worker log (tail)\n" + links_worker.log_tail(80))
