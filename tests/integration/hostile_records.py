"""The hostile records of ``test_hostile_input.py``, and what must come of each.

Every input topic of ``hostile_apps`` gets the generic cases (bytes that are no record of
any kind) and the cases of its kind (commands, events, workflow inbox, orchestration inbox),
each followed by a canary on the same partition. Records are built as an outside producer
would build them: JSON text, or Avro single-object encoding from ``schemas/*.avsc`` with
fastavro alone; nothing from tidings encodes them.

Each record says what must come of it (``Expect``) and how to see it (``Check``, run on
what the worker wrote: ``Observed``).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from tidings.core.partitioning import murmur2

from .hostile_apps import PARTITIONS

Headers = list[tuple[str, bytes | None]]
JSON: Headers = [("content-type", b"application/json")]
#: Short of what the broker takes in one record (its message.max.bytes is 1,048,588).
NEAR_LIMIT = 1_040_000
LONG_ID = "x" * 300_000
#: ``as_json`` writes it as the escape ``"\ud800"``, as the issue's producer did.
SURROGATE = "s-\ud800"
#: 20 KB of JSON nested 10,000 deep (CPython's json gives up near 1,000).
DEEP_JSON = b"[" * 10_000 + b"]" * 10_000
BAD_UTF8 = b"\xff\xfe\xfd\xfc"
#: Encoded as a string, then swapped for as many bytes of invalid UTF-8 (lengths stay right).
PLACEHOLDER = "@@BADUTF8@@!"


class Expect(Enum):
    DEAD = "dead-lettered once"
    VALID = "reaches its instance once, not dead-lettered"
    TOLERATED = "dead-lettered at most once"  # a tombstone on a journal is an erasure (SPEC §2)
    CANARY = "processed once, not dead-lettered"


@dataclass
class Observed:
    """What the worker wrote, read back from its topics (and the projection's notes)."""

    dead: dict[tuple[str, int, int], list[tuple[str, int]]]  # source position -> [(reason, size)]
    undecodable_dead: list[int]  # sizes of dead letters that do not decode
    replies: dict[str, list[str]]  # command id -> reply statuses
    events: dict[str, Counter[str]]  # events topic -> command id -> stored events
    projected: Counter[tuple[str, int]]  # (aggregate id, version) -> applications
    tracked: Counter[str]  # orchestration instance -> outcomes
    track_journal: Counter[str]  # orchestration instance -> journaled events
    greeted: dict[str, list[str]]  # workflow instance -> outcomes
    greet_started: Counter[str]  # workflow instance -> Started journal records


Check = Callable[[Observed], list[str]]
"""Returns what is wrong (nothing when the record had exactly its effect)."""


def no_check(_: Observed) -> list[str]:
    return []


@dataclass
class Sent:
    """One record the test produces, where it must land, and what must come of it.

    ``check`` is, for a valid record or a canary, the effect that must be seen exactly once;
    for a dead-lettered one, what must not have happened.
    """

    target: str
    case: str
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    partition: int
    explicit: bool
    expect: Expect
    check: Check = no_check
    offset: int = -1

    @property
    def position(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)

    def label(self) -> str:
        return f"{self.target}: {self.case} [{self.partition}@{self.offset}]"


@dataclass(frozen=True)
class Topics:
    """The app's topic names, by the naming rule of SPEC §2."""

    app: str

    def aggregate(self, name: str, role: str) -> str:
        return f"{self.app}.aggregate.{name}.{role}"

    @property
    def deadletter(self) -> str:
        return f"{self.app}.deadletter"

    @property
    def replies(self) -> str:
        return f"{self.app}.replies"

    def workflow(self, role: str) -> str:
        return f"{self.app}.workflow.greet.{role}"

    def orchestration(self, role: str) -> str:
        return f"{self.app}.orchestration.track.{role}"


@dataclass(frozen=True)
class Target:
    """One input topic and the kind of records it takes."""

    name: str
    topic: str
    kind: str  # commands, events, inbox, orchestration
    aggregate: str = ""  # vault or ledger, for commands and events

    @property
    def avro_kind(self) -> str:
        return {"commands": "command", "events": "event", "inbox": "workflowinbox",
                "orchestration": "orchestrationevent", "replies": "reply",
                "saga_inbox": "sagainbox"}[self.kind]


def partition_of(key: bytes) -> int:
    """The partition ``murmur2_random`` picks for ``key`` (the test checks the delivery reports)."""
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


class Ids:
    """Fresh ids, and ids that land on a given partition or off it."""

    def __init__(self) -> None:
        self._run = uuid.uuid4().hex[:6]
        self._n = 0

    def fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._run}-{self._n}"

    def on(self, partition: int, prefix: str) -> str:
        while True:
            candidate = self.fresh(prefix)
            if partition_of(candidate.encode()) == partition:
                return candidate

    def off(self, partition: int, prefix: str) -> str:
        while True:
            candidate = self.fresh(prefix)
            if partition_of(candidate.encode()) != partition:
                return candidate

    def bad_utf8_key_off(self, partition: int) -> bytes:
        n = 0
        while partition_of(BAD_UTF8 + b"%d" % n) == partition:
            n += 1
        return BAD_UTF8 + b"%d" % n


# -- encoding, as an outside producer would ---------------------------------------------------


def as_json(obj: Any) -> bytes:
    # ensure_ascii: a lone surrogate becomes the escape "\ud800", which is valid JSON text.
    return json.dumps(obj).encode("ascii")


class AvroWriter:
    """Avro single-object encoding (C3 01, fingerprint, body) from ``schemas/*.avsc``."""

    def __init__(self, schemas: Path) -> None:
        newest: dict[str, tuple[int, Path]] = {}
        for path in schemas.glob("*.v*.avsc"):
            kind, version = path.name.removesuffix(".avsc").split(".v")
            if kind not in newest or int(version) > newest[kind][0]:
                newest[kind] = (int(version), path)
        self._schemas: dict[str, tuple[bytes, Any]] = {}
        for kind, (_, path) in newest.items():
            raw = json.loads(path.read_text(encoding="utf-8"))
            header = b"\xc3\x01" + bytes.fromhex(fingerprint(to_parsing_canonical_form(raw), "CRC-64-AVRO"))
            self._schemas[kind] = (header, parse_schema(raw, named_schemas={}))

    def encode(self, kind: str, fields: dict[str, Any]) -> bytes:
        header, schema = self._schemas[kind]
        out = BytesIO()
        out.write(header)
        schemaless_writer(out, schema, fields)
        return out.getvalue()

    def header(self, kind: str) -> bytes:
        return self._schemas[kind][0]


def with_bad_utf8(encoded: bytes) -> bytes:
    """Swap the placeholder strings in ``encoded`` for as many bytes of invalid UTF-8."""
    placeholder = PLACEHOLDER.encode()
    assert placeholder in encoded
    return encoded.replace(placeholder, (BAD_UTF8 * 4)[: len(placeholder)])


def now_ms() -> int:
    return int(time.time() * 1000)


def event_fields(aggregate_id: str, type_: str, payload: bytes) -> dict[str, Any]:
    event_id = uuid.uuid4().hex
    return {
        "event_id": event_id, "command_id": f"outside-{event_id}", "correlation_id": event_id,
        "aggregate_id": aggregate_id, "version": 1, "type": type_, "payload": payload,
        "timestamp_ms": now_ms(), "deferred": False, "metadata": {},
    }


# -- checks ---------------------------------------------------------------------------------


def all_of(*checks: Check) -> Check:
    return lambda seen: [problem for check in checks for problem in check(seen)]


def command_done(events_topic: str, command_id: str) -> Check:
    def check(seen: Observed) -> list[str]:
        problems = []
        replies = seen.replies.get(command_id, [])
        if replies != ["accepted"]:
            problems.append(f"replies {replies}, not one 'accepted'")
        stored = seen.events[events_topic][command_id]
        if stored != 1:
            problems.append(f"{stored} events stored, not 1")
        return problems

    return check


def command_absent(events_topic: str, command_id: str) -> Check:
    def check(seen: Observed) -> list[str]:
        stored = seen.events[events_topic][command_id]
        return [f"dead-lettered, yet {stored} events were stored"] if stored else []

    return check


def projected_once(aggregate_id: str) -> Check:
    def check(seen: Observed) -> list[str]:
        applied = seen.projected[(aggregate_id, 1)]
        return [] if applied == 1 else [f"projected {applied} times, not once"]

    return check


def tracked_once(order: str) -> Check:
    def check(seen: Observed) -> list[str]:
        problems = []
        if seen.track_journal[order] != 1:
            problems.append(f"{seen.track_journal[order]} orchestration journal entries, not 1")
        if seen.tracked[order] != 1:
            problems.append(f"{seen.tracked[order]} orchestration outcomes, not 1")
        return problems

    return check


def untracked(order: str) -> Check:
    def check(seen: Observed) -> list[str]:
        if seen.track_journal[order] or seen.tracked[order]:
            return [f"dead-lettered, yet journaled {seen.track_journal[order]} times "
                    f"with {seen.tracked[order]} outcomes"]
        return []

    return check


def greeted(instance: str, outcome: str) -> Check:
    def check(seen: Observed) -> list[str]:
        problems = []
        if seen.greet_started[instance] != 1:
            problems.append(f"started {seen.greet_started[instance]} times, not once")
        if seen.greeted.get(instance, []) != [outcome]:
            problems.append(f"outcomes {seen.greeted.get(instance, [])}, not [{outcome!r}]")
        return problems

    return check


def not_started(instance: str) -> Check:
    def check(seen: Observed) -> list[str]:
        if seen.greet_started[instance] or instance in seen.greeted:
            return [f"dead-lettered, yet started {seen.greet_started[instance]} times "
                    f"with outcomes {seen.greeted.get(instance, [])}"]
        return []

    return check


# -- the table ------------------------------------------------------------------------------


class Table:
    """Builds each target's hostile records and the canary after each."""

    def __init__(self, topics: Topics, writer: AvroWriter, seed: int = 8) -> None:
        self.topics = topics
        self.ids = Ids()
        self.avro = writer
        self.rng = random.Random(seed)
        self.vault_events = topics.aggregate("vault", "events")
        self.ledger_events = topics.aggregate("ledger", "events")
        self.targets = [
            Target("vault commands", topics.aggregate("vault", "commands"), "commands", "vault"),
            Target("ledger commands", topics.aggregate("ledger", "commands"), "commands", "ledger"),
            Target("vault events (projection source)", self.vault_events, "events", "vault"),
            Target("ledger events (orchestration source)", self.ledger_events, "events", "ledger"),
            Target("workflow inbox", topics.workflow("inbox"), "inbox"),
            Target("orchestration inbox", topics.orchestration("inbox"), "orchestration"),
        ]

    def rounds(self) -> list[list[tuple[Sent, Sent]]]:
        """Round ``i`` holds the ``i``-th record of every target, each with its canary."""
        per_target = [[(record, self.canary(target, record)) for record in self.records(target)]
                      for target in self.targets]
        length = max(len(pairs) for pairs in per_target)
        return [[pairs[i] for pairs in per_target if i < len(pairs)] for i in range(length)]

    def records(self, target: Target) -> list[Sent]:
        build = {"commands": self.command_cases, "events": self.event_cases,
                 "inbox": self.inbox_cases, "orchestration": self.orchestration_cases}[target.kind]
        return self.generic_cases(target) + build(target)

    # -- building blocks ---------------------------------------------------------------

    def keyed(self, target: Target, case: str, key: bytes, value: bytes | None,
              headers: Sequence[tuple[str, bytes | None]] = (), *,
              expect: Expect = Expect.DEAD, check: Check = no_check) -> Sent:
        """A record the producer's murmur2 partitioner places by ``key``."""
        return Sent(target.name, case, target.topic, key, value, list(headers),
                    partition_of(key), False, expect, check)

    def placed(self, target: Target, case: str, key: bytes | None, value: bytes, partition: int,
               headers: Sequence[tuple[str, bytes | None]] = (), *,
               expect: Expect, check: Check) -> Sent:
        """A record sent to an explicit partition."""
        return Sent(target.name, case, target.topic, key, value, list(headers),
                    partition, True, expect, check)

    def wrong_keys(self, target: Target, valid: Callable[[], tuple[str, bytes, Check]],
                   key_of: Callable[[str], bytes], headers: Headers) -> list[Sent]:
        """Valid records under a wrong key, no key, a key of invalid UTF-8, or their own key on a
        wrong partition; ``valid()`` gives a new one each time (instance, value, its effect)."""
        records = []
        variants = ["valid, under another instance's key", "valid, its key, a wrong partition"]
        if target.kind != "events":  # a compacted topic refuses records without a key
            variants += ["valid, no key, a wrong partition", "valid, under a key of invalid UTF-8"]
        for case in variants:
            instance, value, check = valid()
            home = partition_of(key_of(instance))
            if case.endswith("a wrong partition"):
                key = None if "no key" in case else key_of(instance)
                records.append(self.placed(target, case, key, value, (home + 1) % PARTITIONS, headers,
                                           expect=Expect.VALID, check=check))
            else:
                wrong = (self.ids.bad_utf8_key_off(home) if "invalid UTF-8" in case
                         else key_of(self.ids.off(home, "wrong-key")))
                records.append(self.keyed(target, case, wrong, value, headers, expect=Expect.VALID, check=check))
        return records

    def generic_cases(self, target: Target) -> list[Sent]:
        """Bytes that are no valid record of any kind, whatever topic they are sent to."""

        def key() -> bytes:
            fresh = self.ids.fresh("junk")
            return f"{fresh}/1".encode() if target.kind == "events" else fresh.encode()

        cases: list[tuple[str, bytes | None, Headers]] = [
            ("random bytes", self.rng.randbytes(64), []),
            ("Avro magic and a known fingerprint, then garbage",
             self.avro.header(target.avro_kind) + self.rng.randbytes(40), []),
            ("empty value", b"", []),
            ("JSON nested 10,000 deep (20 KB)", DEEP_JSON, JSON),
            ("JSON array", b"[1, 2, 3]", JSON),
            ("JSON string", b'"hello"', JSON),
            ("JSON object of unknown fields", b'{"hello": "world"}', JSON),
            ("invalid UTF-8 inside JSON", b'{"command_id": "' + BAD_UTF8 + b'", "instance_id": "'
             + BAD_UTF8 + b'", "kind": "start"}', JSON),
            ("near 1 MB of JSON", b'{"junk": "' + b"x" * NEAR_LIMIT + b'"}', JSON),
            ("unknown content-type", b"hello", [("content-type", b"text/plain")]),
            ("content-type of invalid UTF-8", b"{}", [("content-type", BAD_UTF8)]),
            ("a header with a null value", b"{}", [*JSON, ("x-trace", None)]),
        ]
        records = [self.keyed(target, case, key(), value, headers) for case, value, headers in cases]
        # SPEC §2: a tombstone on a journal erases a record; a reader may ignore it.
        tombstone = Expect.TOLERATED if target.kind == "events" else Expect.DEAD
        records.append(self.keyed(target, "tombstone (null value)", key(), None, expect=tombstone))
        return records

    # -- commands ------------------------------------------------------------------------

    def payloads(self, aggregate: str, instance: str) -> dict[str, tuple[str, Any]]:
        if aggregate == "vault":
            return {
                "valid": ("Deposit", {"amount": "1"}),
                "invalid": ("Deposit", {"amount": "lots"}),
                "fold raises": ("Deposit", {"amount": "1e999999999"}),  # decimal.Overflow
                "decide raises": ("Share", {"parts": 0}),
                "near 1 MB": ("Deposit", {"amount": "1", "memo": "x" * NEAR_LIMIT}),
            }
        return {
            "valid": ("Note", {"order": instance, "step": "go"}),
            "invalid": ("Note", {"order": instance}),
            "fold raises": ("Note", {"order": instance, "step": "fold-boom"}),
            "decide raises": ("Note", {"order": instance, "step": "decide-boom"}),
            "near 1 MB": ("Note", {"order": instance, "step": "go", "memo": "x" * NEAR_LIMIT}),
        }

    def command_done(self, aggregate: str, instance: str, command_id: str) -> Check:
        done = command_done(self.topics.aggregate(aggregate, "events"), command_id)
        return all_of(done, tracked_once(instance)) if aggregate == "ledger" else done

    def command_cases(self, target: Target) -> list[Sent]:
        aggregate = target.aggregate
        events = self.topics.aggregate(aggregate, "events")
        replies = self.topics.replies
        records: list[Sent] = []

        def command(case: str, *, payload: str = "valid", command_id: str | None = None,
                    instance: str | None = None, raw: bytes | None = None, **extra: Any) -> None:
            instance = instance or self.ids.fresh(aggregate)
            command_id = command_id or self.ids.fresh("cmd")
            type_, body = self.payloads(aggregate, instance)[payload]
            envelope = {"command_id": command_id, "aggregate_id": instance, "type": type_,
                        "payload": body, "reply_to": replies, **extra}
            value = raw if raw is not None else as_json(envelope)
            key = instance.encode("utf-8", "surrogatepass")
            records.append(self.keyed(target, case, key, value, JSON,
                                      check=command_absent(events, command_id)))

        command("unknown command type", type="Steal")
        command("schema-invalid payload", payload="invalid")
        command("user code raises: fold", payload="fold raises")
        command("user code raises: decide", payload="decide raises")
        command("schema-invalid envelope (expected_version a string)", expected_version="three")
        command("lone surrogate in command_id", command_id=self.ids.fresh(SURROGATE))
        command("lone surrogate in aggregate_id", instance=self.ids.fresh(SURROGATE))
        command("300 KB command_id", command_id=LONG_ID + self.ids.fresh(""))
        command("300 KB aggregate_id", instance=LONG_ID + self.ids.fresh(""))
        command("payload near 1 MB (an ignored extra field)", payload="near 1 MB")
        deep, deep_instance = self.ids.fresh("cmd"), self.ids.fresh(aggregate)
        command("JSON nested 10,000 deep in the payload", command_id=deep, instance=deep_instance,
                raw=b'{"command_id": "' + deep.encode() + b'", "aggregate_id": "' + deep_instance.encode()
                    + b'", "type": "json", "payload": ' + DEEP_JSON + b"}")
        command("reply_to an invalid topic name", reply_to="no such topic!")
        records.append(self.keyed(target, "reply_to an invalid topic name, sent again",
                                  records[-1].key or b"", records[-1].value, JSON, check=records[-1].check))
        command("reply_to its own journal", reply_to=events)
        command("reply_to its own commands topic", reply_to=target.topic)
        command("reply_to the workflow's inbox", reply_to=self.topics.workflow("inbox"))
        command("reply_to the workflow's outcomes", reply_to=self.topics.workflow("outcomes"))
        command("reply_to the orchestration's journal", reply_to=self.topics.orchestration("journal"))

        instance, command_id = self.ids.fresh(aggregate), self.ids.fresh("cmd")
        type_, body = self.payloads(aggregate, instance)["valid"]
        avro_fields = {"command_id": command_id, "correlation_id": command_id, "aggregate_id": instance,
                       "type": type_, "payload": json.dumps(body).encode(), "timestamp_ms": now_ms(),
                       "expected_version": None, "reply_to": replies, "causation_id": None, "metadata": {}}
        records.append(self.keyed(
            target, "invalid UTF-8 in an Avro string (aggregate_id)", instance.encode(),
            with_bad_utf8(self.avro.encode("command", {**avro_fields, "aggregate_id": PLACEHOLDER})),
        ))
        records.append(self.keyed(
            target, "Avro payload of type json nested 10,000 deep", instance.encode(),
            self.avro.encode("command", {**avro_fields, "type": "json", "payload": DEEP_JSON}),
            check=command_absent(events, command_id),
        ))
        records.append(self.keyed(
            target, "an Avro event on the commands topic", instance.encode(),
            self.avro.encode("event", event_fields(instance, type_, json.dumps(body).encode())),
        ))

        def valid() -> tuple[str, bytes, Check]:
            instance, command_id = self.ids.fresh(aggregate), self.ids.fresh("cmd")
            type_, body = self.payloads(aggregate, instance)["valid"]
            value = as_json({"command_id": command_id, "aggregate_id": instance, "type": type_,
                             "payload": body, "reply_to": replies})
            return instance, value, self.command_done(aggregate, instance, command_id)

        return records + self.wrong_keys(target, valid, str.encode, JSON)

    # -- events (a projection's or an orchestration's source) ------------------------------

    def event_payloads(self, aggregate: str, instance: str) -> dict[str, tuple[str, Any]]:
        if aggregate == "vault":
            return {
                "valid": ("Deposited", {"amount": "2"}),
                "invalid": ("Deposited", {"amount": "lots"}),
                "user code raises": ("Deposited", {"amount": "13"}),  # the projection handler
                "near 1 MB": ("Deposited", {"amount": "2", "memo": "x" * NEAR_LIMIT}),
            }
        return {
            "valid": ("Noted", {"order": instance, "step": "go"}),
            "invalid": ("Noted", {"order": instance}),
            "user code raises": ("Noted", {"order": instance, "step": "explode"}),  # key_of
            "near 1 MB": ("Noted", {"order": instance, "step": "go", "memo": "x" * NEAR_LIMIT}),
        }

    def event_cases(self, target: Target) -> list[Sent]:
        aggregate = target.aggregate
        records: list[Sent] = []

        def event(case: str, payload: str = "valid", *, instance: str | None = None,
                  type_: str | None = None, raw_payload: bytes | None = None,
                  **fields: Any) -> None:
            instance = instance or self.ids.fresh(aggregate)
            name, body = self.event_payloads(aggregate, instance)[payload]
            data = raw_payload if raw_payload is not None else json.dumps(body).encode()
            encoded = self.avro.encode("event", {**event_fields(instance, type_ or name, data), **fields})
            if PLACEHOLDER.encode() in encoded:
                encoded = with_bad_utf8(encoded)
            records.append(self.keyed(target, case, f"{instance}/1".encode(), encoded))

        event("unknown event type", type_="Exploded")
        event("schema-invalid payload", "invalid")
        event("user code raises: " + ("projection handler" if aggregate == "vault" else "key_of"),
              "user code raises")
        event("invalid UTF-8 in an Avro string (aggregate_id)", aggregate_id=PLACEHOLDER)
        event("payload of type json nested 10,000 deep", type_="json", raw_payload=DEEP_JSON)
        event("300 KB aggregate_id", instance=LONG_ID + self.ids.fresh(""))
        event("payload near 1 MB (an ignored extra field)", "near 1 MB")
        instance = self.ids.fresh(aggregate)
        command = self.avro.encode("command", {
            "command_id": instance, "correlation_id": instance, "aggregate_id": instance, "type": "x",
            "payload": b"{}", "timestamp_ms": now_ms(), "expected_version": None, "reply_to": None,
            "causation_id": None, "metadata": {},
        })
        records.append(self.keyed(target, "an Avro command on the events topic", f"{instance}/1".encode(), command))

        def valid() -> tuple[str, bytes, Check]:
            instance = self.ids.fresh(aggregate)
            name, body = self.event_payloads(aggregate, instance)["valid"]
            value = self.avro.encode("event", event_fields(instance, name, json.dumps(body).encode()))
            return instance, value, projected_once(instance) if aggregate == "vault" else tracked_once(instance)

        return records + self.wrong_keys(target, valid, lambda i: f"{i}/1".encode(), [])

    # -- the workflow inbox --------------------------------------------------------------

    def inbox_cases(self, target: Target) -> list[Sent]:
        records: list[Sent] = []

        def start(case: str, payload: Any = None, *, instance: str | None = None,
                  raw: bytes | None = None, **extra: Any) -> None:
            instance = instance or self.ids.fresh("greet")
            request = {"kind": "start", "instance_id": instance, "request_id": self.ids.fresh("req"),
                       "payload": {"name": "n"} if payload is None else payload, **extra}
            value = raw if raw is not None else as_json(request)
            records.append(self.keyed(target, case, instance.encode("utf-8", "surrogatepass"), value, JSON,
                                      check=not_started(instance)))

        start("unknown request kind", kind="explode")
        start("schema-invalid input", {"nom": "n"})
        start("user code raises: input deserialisation", {"name": "n", "times": "1e999999999"})
        start("schema-invalid envelope (timestamp_ms a string)", timestamp_ms="soon")
        start("a signal without its name", kind="signal")
        start("lone surrogate in instance_id", instance=self.ids.fresh(SURROGATE))
        # With reply_to, as a caller that waits would send it: the reply is keyed by the request id.
        start("lone surrogate in request_id", request_id=self.ids.fresh(SURROGATE),
              reply_to=self.topics.workflow("replies"))
        start("300 KB request_id", request_id=LONG_ID + self.ids.fresh(""), reply_to=self.topics.workflow("replies"))
        start("300 KB instance_id", instance=LONG_ID + self.ids.fresh(""))
        start("input near 1 MB (an ignored extra field)", {"name": "n", "memo": "x" * NEAR_LIMIT})
        deep = self.ids.fresh("greet")
        start("JSON nested 10,000 deep in the input", instance=deep,
              raw=b'{"kind": "start", "instance_id": "' + deep.encode() + b'", "payload": ' + DEEP_JSON + b"}")
        start("reply_to an invalid topic name", reply_to="no such topic!")
        records.append(self.keyed(target, "reply_to an invalid topic name, sent again",
                                  records[-1].key or b"", records[-1].value, JSON, check=records[-1].check))
        start("reply_to its own journal", reply_to=self.topics.workflow("journal"))
        start("reply_to its own inbox", reply_to=target.topic)
        start("reply_to its own outcomes", reply_to=self.topics.workflow("outcomes"))
        start("reply_to the vault's commands", reply_to=self.topics.aggregate("vault", "commands"))

        def with_start(case: str, *, raw: bytes | None = None, **fields: Any) -> None:
            # A signal-with-start (workflowinbox.v4): whatever is wrong, it starts nothing.
            instance = fields.pop("instance", None) or self.ids.fresh("greet")
            request = {"kind": "signal_with_start", "instance_id": instance, "request_id": self.ids.fresh("req"),
                       "input": {"name": "n"}, "signal": "poke", "payload": 1, **fields}
            value = raw if raw is not None else as_json(request)
            records.append(self.keyed(target, case, instance.encode(), value, JSON, check=not_started(instance)))

        with_start("signal_with_start without its signal name", signal=None)
        with_start("signal_with_start with an empty signal name", signal="")
        with_start("signal_with_start with a signal name that is a number", signal=7)
        with_start("signal_with_start with a 300 KB signal name", signal=LONG_ID)
        with_start("signal_with_start with a schema-invalid input", input={"nom": "n"})
        with_start("signal_with_start with an input near 1 MB", input={"name": "n", "memo": "x" * NEAR_LIMIT})
        with_start("signal_with_start with a payload near 1 MB", payload="x" * NEAR_LIMIT)
        with_start("signal_with_start with a 300 KB signal_id", signal_id=LONG_ID)
        with_start("Signal_With_Start: an unknown kind", kind="Signal_With_Start")
        with_start("an input on a plain start", kind="start", payload={"name": "n"})
        sws_deep = self.ids.fresh("greet")
        with_start("signal_with_start with its input nested 10,000 deep", instance=sws_deep,
                   raw=b'{"kind": "signal_with_start", "instance_id": "' + sws_deep.encode()
                   + b'", "signal": "poke", "input": ' + DEEP_JSON + b"}")
        sws_deep = self.ids.fresh("greet")
        with_start("signal_with_start with its payload nested 10,000 deep", instance=sws_deep,
                   raw=b'{"kind": "signal_with_start", "instance_id": "' + sws_deep.encode()
                   + b'", "signal": "poke", "input": {"name": "n"}, "payload": ' + DEEP_JSON + b"}")

        def update_with_start(case: str, *, raw: bytes | None = None, **fields: Any) -> None:
            # An update-with-start (workflowinbox.v5): whatever is wrong, it starts nothing.
            instance = fields.pop("instance", None) or self.ids.fresh("greet")
            request = {"kind": "update_with_start", "instance_id": instance, "request_id": self.ids.fresh("req"),
                       "input": {"name": "n"}, "update": "poke", "update_id": self.ids.fresh("u"), "payload": 1,
                       **fields}
            value = raw if raw is not None else as_json(request)
            records.append(self.keyed(target, case, instance.encode(), value, JSON, check=not_started(instance)))

        update_with_start("update_with_start without its update name", update=None)
        update_with_start("update_with_start without its update_id", update_id=None)
        update_with_start("update_with_start with an update_id that is a number", update_id=7)
        update_with_start("update_with_start with a 300 KB update name", update=LONG_ID)
        update_with_start("update_with_start with a 300 KB update_id", update_id=LONG_ID)
        update_with_start("update_with_start waiting for nonsense", wait_for="soon")
        update_with_start("update_with_start with a payload near 1 MB", payload="x" * NEAR_LIMIT)
        update_with_start("update fields on a plain start", kind="start", payload={"name": "n"}, input=None)
        uws_deep = self.ids.fresh("greet")
        update_with_start("update_with_start with its input nested 10,000 deep", instance=uws_deep,
                          raw=b'{"kind": "update_with_start", "instance_id": "' + uws_deep.encode()
                          + b'", "update": "poke", "update_id": "u-1", "input": ' + DEEP_JSON + b"}")
        uws_deep = self.ids.fresh("greet")
        update_with_start("update_with_start with its payload nested 10,000 deep", instance=uws_deep,
                          raw=b'{"kind": "update_with_start", "instance_id": "' + uws_deep.encode()
                          + b'", "update": "poke", "update_id": "u-1", "input": {"name": "n"}, "payload": '
                          + DEEP_JSON + b"}")

        def avro_start(instance: str, payload: bytes) -> bytes:
            return self.avro.encode("workflowinbox", {
                "request_id": uuid.uuid4().hex, "instance_id": instance, "kind": "start",
                "timestamp_ms": now_ms(), "payload": payload, "signal": None, "reply_to": None,
                "wait": False, "metadata": {},
            })

        instance = self.ids.fresh("greet")
        records.append(self.keyed(target, "invalid UTF-8 in an Avro string (instance_id)", instance.encode(),
                                  with_bad_utf8(avro_start(PLACEHOLDER, b'{"name": "n"}'))))
        records.append(self.keyed(target, "Avro start with JSON nested 10,000 deep", instance.encode(),
                                  avro_start(instance, DEEP_JSON), check=not_started(instance)))
        records.append(self.keyed(target, "an Avro event on the inbox", instance.encode(),
                                  self.avro.encode("event", event_fields(instance, "Deposited", b"{}"))))

        instance = self.ids.fresh("greet")
        records.append(self.keyed(target, "Avro signal_with_start with its input nested 10,000 deep", instance.encode(),
                                  self.avro.encode("workflowinbox", {
                                      "request_id": uuid.uuid4().hex, "instance_id": instance,
                                      "kind": "signal_with_start", "timestamp_ms": now_ms(), "payload": b"1",
                                      "signal": "poke", "reply_to": None, "wait": False, "metadata": {},
                                      "input": DEEP_JSON}), check=not_started(instance)))
        instance = self.ids.fresh("greet")
        records.append(self.keyed(target, "valid: a signal_with_start starts it with its signal", instance.encode(),
                                  as_json({"kind": "signal_with_start", "instance_id": instance,
                                           "input": {"name": "sws"}, "signal": "poke", "payload": 1}),
                                  JSON, expect=Expect.VALID, check=greeted(instance, "finished")))
        # Valid: the body raises, so the instance ends faulted; the record is no dead letter.
        instance = self.ids.fresh("greet")
        records.append(self.keyed(target, "valid: the body raises, the instance ends faulted", instance.encode(),
                                  as_json({"kind": "start", "instance_id": instance, "payload": {"name": "raise"}}),
                                  JSON, expect=Expect.VALID, check=greeted(instance, "faulted")))
        def valid() -> tuple[str, bytes, Check]:
            instance = self.ids.fresh("greet")
            value = as_json({"kind": "start", "instance_id": instance, "payload": {"name": "wrong-key"}})
            return instance, value, greeted(instance, "finished")

        return records + self.wrong_keys(target, valid, str.encode, JSON)

    # -- the orchestration inbox ---------------------------------------------------------

    def orchestration_cases(self, target: Target) -> list[Sent]:
        records: list[Sent] = []

        def routed(instance: str, payload: bytes, *, type_: str = "Noted", **fields: Any) -> bytes:
            return self.avro.encode("orchestrationevent", {
                "orchestration": "track", "instance": instance, "sequence": 0,
                "source_topic": self.ledger_events, "source_partition": 0,
                # A position no ledger event has: the instance must not take it for a copy.
                "source_offset": 10**12 + self.rng.randrange(10**9), "aggregate": "ledger",
                "event": event_fields(self.ids.fresh("outside"), type_, payload), **fields,
            })

        def record(case: str, step: Any = "go", *, instance: str | None = None,
                   type_: str = "Noted", raw_payload: bytes | None = None, **fields: Any) -> None:
            instance = instance or self.ids.fresh("order")
            body = {"order": instance} if step is None else {"order": instance, "step": step}
            data = raw_payload if raw_payload is not None else json.dumps(body).encode()
            encoded = routed(PLACEHOLDER if fields.pop("bad_utf8", False) else instance, data,
                             type_=type_, **fields)
            if PLACEHOLDER.encode() in encoded:
                encoded = with_bad_utf8(encoded)
            records.append(self.keyed(target, case, instance.encode(), encoded, check=untracked(instance)))

        record("another orchestration's record", orchestration="other")
        record("unknown event type", type_="Exploded")
        record("schema-invalid payload", None)
        record("user code raises: the orchestration", "boom")
        record("a source topic that is no source", source_topic=self.vault_events)
        record("invalid UTF-8 in an Avro string (instance)", bad_utf8=True)
        record("payload of type json nested 10,000 deep", type_="json", raw_payload=DEEP_JSON)
        record("300 KB instance key", instance=LONG_ID + self.ids.fresh(""))
        record("payload near 1 MB (an ignored extra field)",
               raw_payload=json.dumps({"order": "o", "step": "go", "memo": "x" * NEAR_LIMIT}).encode())
        instance = self.ids.fresh("order")
        records.append(self.keyed(target, "an Avro event on the inbox", instance.encode(),
                                  self.avro.encode("event", event_fields(instance, "Noted", b"{}"))))

        def valid() -> tuple[str, bytes, Check]:
            instance = self.ids.fresh("order")
            value = routed(instance, json.dumps({"order": instance, "step": "go"}).encode())
            return instance, value, tracked_once(instance)

        return records + self.wrong_keys(target, valid, str.encode, [])

    # -- canaries ------------------------------------------------------------------------

    def canary(self, target: Target, after: Sent) -> Sent:
        """A valid command or start whose effect lands on ``after``'s partition, after it."""
        partition = after.partition
        case = f"canary after '{after.case}'"
        if target.kind == "inbox":
            instance = self.ids.on(partition, "canary")
            value = as_json({"kind": "start", "instance_id": instance, "payload": {"name": "canary"}})
            return Sent(target.name, case, target.topic, instance.encode(), value, JSON, partition, False,
                        Expect.CANARY, greeted(instance, "finished"))
        # Commands: on the same commands topic. Events: a command whose event the aggregate
        # writes to that partition. Orchestration inbox: a ledger command whose order lands there.
        aggregate = target.aggregate or "ledger"
        instance = self.ids.on(partition, "canary")
        command_id = self.ids.fresh("canary-cmd")
        type_, body = self.payloads(aggregate, instance)["valid"]
        value = as_json({"command_id": command_id, "aggregate_id": instance, "type": type_,
                         "payload": body, "reply_to": self.topics.replies})
        check = self.command_done(aggregate, instance, command_id)
        if target.kind == "events" and aggregate == "vault":
            check = all_of(check, projected_once(instance))
        return Sent(target.name, case, self.topics.aggregate(aggregate, "commands"), instance.encode(),
                    value, JSON, partition, False, Expect.CANARY, check)
