"""The console's JSON API: each endpoint's checks, its reading or action, its answer.

Every answer is ``(status, JSON object)``; a refusal is a 4xx with ``{"error": "..."}`` that
says what to do, and changes nothing. Readings go through ``tidings.inspection`` (what
``tidings list``, ``describe`` and ``journal`` read), so the page and the CLI agree.
Endpoints (docs/console.md has each with an example answer):

  GET  /api/session                              the app, whether actions are allowed, the CSRF token
  GET  /api/overview                             every declared kind with counts by status, the dead letters
  GET  /api/instances/KIND?name=&status=&q=&page=&per_page=
                                                 a page of rows (KIND workflow, saga, aggregate, orchestration, flow, deadletters, schedule)
  GET  /api/workflows/NAME/ID                    describe, timeline, journal, parent and children
  GET  /api/sagas/NAME/ID                        describe, transitions with the commands sent
  GET  /api/aggregates/NAME/ID                   events by version
  GET  /api/deadletters/PARTITION:OFFSET         the letter, and whether (and where) it may be sent back
  POST /api/workflows/NAME/ID/signal             {"signal": NAME, "payload": JSON}
  POST /api/workflows/NAME/ID/cancel             {}
  POST /api/cancel                               {"workflow": NAME?, "status": [...], "q": TEXT, "expect": N}
  POST /api/schedules/ID/pause | resume          {}
  POST /api/deadletters/PARTITION:OFFSET/replay  {"confirm": true}
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..core.limits import MAX_ID_BYTES, MAX_PAYLOAD_BYTES, check_id
from ..core.schedule import format_due, run_id
from ..core.workflow.journal import Ended, record_to_json
from ..errors import (
    BrokerError,
    ConsoleRefusal,
    LimitError,
    ReplayRefused,
    ReplyTimeout,
    SchemaError,
    WorkflowEnded,
    WorkflowNotFound,
)
from ..inspection.deadletters import dead_letter_line
from ..inspection.indexes import KINDS, READERS, declared_names
from ..inspection.instances import read_aggregate_events, read_saga, read_workflow, saga_record_json, shown
from ..inspection.listing import Filters, Row, counts_json, row_json, select
from ..inspection.schedules import read_schedules, schedule_aggregate
from ..shell.client.scan import read_topics
from ..shell.kinds.workflow.journal import read_journal
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.io import Incoming
from ..shell.runtime.topics import deadletter_topic
from .actions import Actions
from .replay import Input, input_topics, replay_of
from .timeline import timeline

#: Rows per page unless ``per_page`` says otherwise, and at most.
PER_PAGE: Final = 50
MAX_PER_PAGE: Final = 500
#: Most instances one batch cancel asks for.
MAX_BATCH: Final = 1000
#: The kinds ``/api/instances`` lists.
LISTED: Final = ("workflow", "saga", "aggregate", "orchestration", "flow", "deadletters", "schedule")
SCHEDULE_STATUSES: Final = ("active", "paused", "deleted")
#: Statuses a cancel can still change.
CANCELLABLE: Final = ("RUNNING", "PARKED")


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]


def _one(query: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = query.get(name) or []
    if len(values) > 1:
        raise ConsoleRefusal(400, f"give {name} once")
    return values[0] if values else None


def _whole(text: str | None, name: str, default: int, low: int, high: int) -> int:
    if text is None or text == "":
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise ConsoleRefusal(400, f"{name} must be a whole number from {low} to {high}, not {text[:40]!r}")
    return int(text)


def _id(value: Any, what: str) -> str:
    try:
        return check_id(value, what)
    except LimitError as exc:
        raise ConsoleRefusal(400, str(exc)) from None


def _listed(row: Row) -> dict[str, Any]:
    """A row as a list shows it: a dead letter without its key and value (its own page has them)."""
    line = row_json(row)
    letter = line.get("letter")
    if isinstance(letter, dict):
        line["letter"] = {k: v for k, v in letter.items() if k not in ("key", "value", "headers")}
    return line


class ConsoleApi:
    """The JSON API of one app.

    Args:
        app: The App.
        kafka: The cluster its topics are on.
        actions: What acts (None: read-only; every POST is refused before it gets here).
        csrf: The CSRF token ``/api/session`` hands the page.
        timeout: Seconds to wait for Kafka per reading.
    """

    def __init__(self, app: Any, kafka: KafkaConnection, actions: Actions | None, csrf: str,
                 timeout: float = 15.0) -> None:
        self.app = app
        self.kafka = kafka
        self.actions = actions
        self.csrf = csrf
        self.timeout = timeout

    # -- dispatch -------------------------------------------------------------------------

    def get(self, parts: Sequence[str], query: Mapping[str, Sequence[str]]) -> Answer:
        match list(parts):
            case ["session"]:
                return Answer(200, self.session())
            case ["overview"]:
                return Answer(200, self.overview())
            case ["instances", kind]:
                return Answer(200, self.instances(kind, query))
            case ["workflows", name, instance_id]:
                return Answer(200, self.workflow(name, instance_id))
            case ["sagas", name, saga_id]:
                return Answer(200, self.saga(name, saga_id))
            case ["aggregates", name, aggregate_id]:
                return Answer(200, self.aggregate(name, aggregate_id))
            case ["deadletters", letter]:
                return Answer(200, self.deadletter(letter))
        raise ConsoleRefusal(404, "no such endpoint; docs/console.md lists the API")

    def post(self, parts: Sequence[str], body: Any) -> Answer:
        if not isinstance(body, dict):
            raise ConsoleRefusal(400, "the body must be a JSON object")
        match list(parts):
            case ["workflows", name, instance_id, "signal"]:
                return Answer(200, self.signal(name, instance_id, body))
            case ["workflows", name, instance_id, "cancel"]:
                return Answer(200, self.cancel(name, instance_id))
            case ["cancel"]:
                return Answer(200, self.cancel_batch(body))
            case ["schedules", schedule_id, ("pause" | "resume") as action]:
                return Answer(200, self.schedule(action, schedule_id))
            case ["deadletters", letter, "replay"]:
                return Answer(200, self.replay(letter, body))
        raise ConsoleRefusal(404, "no such endpoint; docs/console.md lists the API")

    # -- reading ----------------------------------------------------------------------------

    def session(self) -> dict[str, Any]:
        return {"app": self.app.name, "allow_actions": self.actions is not None, "csrf": self.csrf,
                "kinds": {kind: [h.name for h in self.app.declared(kind)]
                          for kind in ("workflow", "saga", "aggregate", "projection", "orchestration", "flow")}}

    def _workflow_handle(self, name: str) -> Any:
        handles = {h.name: h for h in self.app.declared("workflow")}
        if name not in handles:
            raise ConsoleRefusal(404, f"{self.app.name} declares no workflow {name[:100]!r} "
                                f"(it declares: {', '.join(handles) or 'none'})")
        return handles[name]

    def _rows(self, kind: str, names: Sequence[str] | None = None) -> list[Row]:
        spec = KINDS[kind]
        every = declared_names(self.app, kind, spec)
        rows, _ = READERS[kind](self.app, self.kafka, every if names is None else names, names is not None,
                                timeout=self.timeout)
        return rows

    def _schedule_rows(self) -> list[Row] | None:
        try:
            aggregate = schedule_aggregate(self.app)
        except LookupError:
            return None
        # A fresh loop in this request's thread: read_schedules is a coroutine.
        states = asyncio.run(read_schedules(aggregate, self.kafka))
        rows = []
        for schedule_id, state in states.items():
            due = state.next_due()
            rows.append(Row("schedule", "schedule", schedule_id, state.status, None,
                            state.workflow or "",
                            {"state": state.model_dump(mode="json"),
                             "next_due": None if due is None else format_due(due),
                             "next_run_id": None if due is None else run_id(schedule_id, due)}))
        return rows

    def overview(self) -> dict[str, Any]:
        kinds: list[dict[str, Any]] = []
        for kind in ("workflow", "saga", "aggregate", "orchestration", "flow"):
            if not self.app.declared(kind):
                continue
            rows = self._rows(kind)
            for name in declared_names(self.app, kind, KINDS[kind]):
                selection = select((r for r in rows if r.name == name), Filters())
                kinds.append({"kind": kind, "name": name, **counts_json(selection)})
        schedules = self._schedule_rows()
        if schedules is not None:
            kinds.append({"kind": "schedule", "name": "schedule", **counts_json(select(schedules, Filters()))})
        for handle in self.app.declared("projection"):
            # A projection is a table its handlers keep, not instances with a status.
            kinds.append({"kind": "projection", "name": handle.name, "total": None, "counts": {},
                          "note": "a table of its own, not instances: nothing to list"})
        letters = select(self._rows("deadletters"), Filters())
        return {"app": self.app.name, "kinds": kinds, "deadletters": counts_json(letters)}

    def instances(self, kind: str, query: Mapping[str, Sequence[str]]) -> dict[str, Any]:
        kind = {"workflows": "workflow", "sagas": "saga", "aggregates": "aggregate", "schedules": "schedule",
                "orchestrations": "orchestration", "flows": "flow", "deadletter": "deadletters"}.get(kind, kind)
        if kind not in LISTED:
            raise ConsoleRefusal(404, f"no list of {kind[:60]!r}; lists: {', '.join(LISTED)}")
        unknown = set(query) - {"name", "status", "q", "page", "per_page"}
        if unknown:
            raise ConsoleRefusal(400, f"unknown parameter {sorted(unknown)[0][:40]!r}; give name, status, q, page, per_page")
        name = _one(query, "name") or None
        q = _one(query, "q") or ""
        if len(q.encode("utf-8")) > MAX_ID_BYTES:
            raise ConsoleRefusal(400, f"q is longer than an id can be ({MAX_ID_BYTES} bytes)")
        page = _whole(_one(query, "page"), "page", 1, 1, 1_000_000)
        per_page = _whole(_one(query, "per_page"), "per_page", PER_PAGE, 1, MAX_PER_PAGE)
        statuses = set(query.get("status") or [])
        if kind == "schedule":
            allowed: tuple[str, ...] | None = SCHEDULE_STATUSES
        elif kind == "deadletters":
            allowed = None  # a dead letter's status is its error type, as written
        else:
            allowed = KINDS[kind].statuses
        if kind == "aggregate" and statuses:
            raise ConsoleRefusal(400, "an aggregate has no status to filter on")
        if allowed is not None:
            statuses = {s.lower() if kind == "schedule" else s.upper() for s in statuses}
            wrong = sorted(statuses - set(allowed))
            if wrong:
                raise ConsoleRefusal(400, f"unknown status {wrong[0][:40]!r}; {kind} statuses: {', '.join(allowed)}")
        if kind == "schedule":
            found = self._schedule_rows()
            if found is None:
                raise ConsoleRefusal(404, f"{self.app.name} declares no schedules (app.schedules([...]))")
            rows = found
        else:
            names = None
            if name is not None:
                known = declared_names(self.app, kind, KINDS[kind])
                if name not in known:
                    raise ConsoleRefusal(404, f"{self.app.name} declares no {kind} {name[:100]!r} "
                                        f"(it declares: {', '.join(known) or 'none'})")
                names = [name]
            rows = self._rows(kind, names)
        needle = q.lower()
        rows = [r for r in rows if needle in r.id.lower()]
        selection = select(rows, Filters(frozenset(statuses)))
        pages = max((selection.matched + per_page - 1) // per_page, 1)
        shown_rows = selection.shown[(page - 1) * per_page: page * per_page]
        return {"kind": kind, "rows": [_listed(r) for r in shown_rows], "page": page, "pages": pages,
                "per_page": per_page, **counts_json(selection)}

    def workflow(self, name: str, instance_id: str) -> dict[str, Any]:
        self._workflow_handle(name)
        instance_id = _id(instance_id, "workflow id")
        read = read_workflow(self.app, self.kafka, name, instance_id, timeout=self.timeout)
        if read is None:
            raise ConsoleRefusal(404, f"no {name} instance {instance_id[:100]!r} was started (its journal is empty)")
        return {"describe": shown(read.described), "timeline": timeline(read.records, int(time.time() * 1000)),
                "journal": [shown(record_to_json(r)) for r in read.records]}

    def saga(self, name: str, saga_id: str) -> dict[str, Any]:
        handles = {h.name: h for h in self.app.declared("saga")}
        if name not in handles:
            raise ConsoleRefusal(404, f"{self.app.name} declares no saga {name[:100]!r} (it declares: {', '.join(handles) or 'none'})")
        saga_id = _id(saga_id, "saga id")
        read = read_saga(handles[name], self.kafka, saga_id, timeout=self.timeout)
        if read is None:
            raise ConsoleRefusal(404, f"no {name} saga {saga_id[:100]!r} was started (its journal is empty)")
        return {"describe": read.described, "transitions": [saga_record_json(e) for e in read.entries]}

    def aggregate(self, name: str, aggregate_id: str) -> dict[str, Any]:
        names = [h.name for h in self.app.declared("aggregate")]
        if name not in names:
            raise ConsoleRefusal(404, f"{self.app.name} declares no aggregate {name[:100]!r} (it declares: {', '.join(names) or 'none'})")
        aggregate_id = _id(aggregate_id, "aggregate id")
        events = read_aggregate_events(self.app, self.kafka, name, aggregate_id, timeout=self.timeout)
        if not events:
            raise ConsoleRefusal(404, f"no {name} {aggregate_id[:100]!r} has stored an event")
        return {"aggregate": name, "id": aggregate_id, "version": events[-1]["version"], "events": events}

    def _letter(self, letter: str) -> dict[str, Any]:
        partition_text, colon, offset_text = letter.partition(":")
        if not colon or not partition_text.isdigit() or not offset_text.isdigit() or len(letter) > 40:
            raise ConsoleRefusal(400, f"a dead letter is named PARTITION:OFFSET (e.g. 0:17), not {letter[:40]!r}")
        partition, offset = int(partition_text), int(offset_text)
        topic = deadletter_topic(self.app.name)
        partitions = self._partitions(topic)
        if partition >= partitions:
            raise ConsoleRefusal(404, f"{topic} has no partition {partition} ({partitions} partitions)")
        found: list[dict[str, Any]] = []

        def take(record: Incoming) -> None:
            if record.offset == offset and not found:
                found.append(dead_letter_line(record)[0])

        read_topics(self.kafka, {topic: take}, group_prefix=f"{self.app.name}.", timeout=self.timeout,
                    only={topic: {partition}})
        if not found:
            raise ConsoleRefusal(404, f"no dead letter at {partition}:{offset} of {topic} (gone by retention, or never)")
        return found[0]

    def _partitions(self, topic: str) -> int:
        admin = self.kafka.admin()
        try:
            metadata = admin.list_topics(topic, timeout=self.timeout).topics.get(topic)
        except Exception as exc:  # noqa: BLE001 - Kafka's errors as one line
            raise BrokerError(f"could not ask Kafka about {topic}: {exc}") from exc
        if metadata is None or metadata.error is not None:
            return 0
        return len(metadata.partitions)

    def _inputs(self) -> dict[str, Input]:
        specs = {spec.name: spec.partitions for spec in self.app.topic_specs()}
        sources = {h.source_topic: 0 for h in self.app.declared("flow") if getattr(h, "source_topic", None)}
        for topic in sources:
            sources[topic] = self._partitions(topic)
        return input_topics(self.app.name, specs, sources)

    def deadletter(self, letter: str) -> dict[str, Any]:
        line = self._letter(letter)
        try:
            replay: dict[str, Any] = {"allowed": True, **replay_of(line, self._inputs()).json()}
        except ReplayRefused as exc:
            replay = {"allowed": False, "reason": str(exc)}
        return {"letter": line, "replay": replay}

    # -- acting ----------------------------------------------------------------------------------

    def _actions(self) -> Actions:
        if self.actions is None:
            raise ConsoleRefusal(403, "the console is read-only: start it with --allow-actions to act")
        return self.actions

    def _running(self, name: str, instance_id: str, doing: str) -> None:
        """Refuse (404, 409) before anything is sent when the journal says the instance never
        started or has ended: a refused action writes nothing, not even a request."""
        handle = self._workflow_handle(name)
        records = read_journal(self.kafka, handle.topics.journal, self.app.partitions, instance_id,
                               timeout=self.timeout, group_prefix=f"{self.app.name}.")
        if not records:
            raise ConsoleRefusal(404, f"no {name} instance {instance_id[:100]!r} was started (its journal is empty)")
        if isinstance(records[-1], Ended):
            raise ConsoleRefusal(409, f"{name} {instance_id[:100]!r} has ended ({records[-1].outcome}): nothing to {doing}")

    def signal(self, name: str, instance_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        actions = self._actions()
        self._workflow_handle(name)
        instance_id = _id(instance_id, "workflow id")
        if set(body) - {"signal", "payload"}:
            raise ConsoleRefusal(400, "a signal's body is {\"signal\": NAME, \"payload\": JSON}; nothing else")
        signal = _id(body.get("signal"), "signal name")
        payload_bytes = len(json.dumps(body.get("payload")).encode())
        if payload_bytes > MAX_PAYLOAD_BYTES:
            raise ConsoleRefusal(413, f"the payload is {payload_bytes} bytes of JSON; a signal's is at most {MAX_PAYLOAD_BYTES}")
        self._running(name, instance_id, "signal")
        try:
            actions.signal(name, instance_id, signal, body.get("payload"))
        except WorkflowNotFound as exc:
            raise ConsoleRefusal(404, str(exc)) from None
        except WorkflowEnded as exc:
            raise ConsoleRefusal(409, str(exc)) from None
        except LimitError as exc:
            raise ConsoleRefusal(413 if "bytes" in str(exc) and "payload" in str(exc) else 400, str(exc)) from None
        except SchemaError as exc:
            raise ConsoleRefusal(400, str(exc)) from None
        except ReplyTimeout as exc:
            raise ConsoleRefusal(504, str(exc)) from None
        return {"signalled": instance_id, "workflow": name, "signal": signal}

    def cancel(self, name: str, instance_id: str) -> dict[str, Any]:
        actions = self._actions()
        self._workflow_handle(name)
        instance_id = _id(instance_id, "workflow id")
        self._running(name, instance_id, "cancel")
        try:
            actions.cancel(name, instance_id)
        except WorkflowNotFound as exc:
            raise ConsoleRefusal(404, str(exc)) from None
        except ReplyTimeout as exc:
            raise ConsoleRefusal(504, str(exc)) from None
        return {"cancel_requested": instance_id, "workflow": name}

    def cancel_batch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        actions = self._actions()
        if set(body) - {"workflow", "status", "q", "expect"}:
            raise ConsoleRefusal(400, "a batch cancel's body is {\"workflow\", \"status\", \"q\", \"expect\"}; nothing else")
        name = body.get("workflow")
        if name is not None and not isinstance(name, str):
            raise ConsoleRefusal(400, "workflow must be a name or null")
        if name is not None:
            self._workflow_handle(name)
        statuses = body.get("status") or list(CANCELLABLE)
        if not isinstance(statuses, list) or not all(isinstance(s, str) and s.upper() in CANCELLABLE for s in statuses):
            raise ConsoleRefusal(400, f"status must be a list of {', '.join(CANCELLABLE)} (only those can be cancelled)")
        q = body.get("q") or ""
        if not isinstance(q, str) or len(q.encode()) > MAX_ID_BYTES:
            raise ConsoleRefusal(400, f"q must be text of at most {MAX_ID_BYTES} bytes")
        expect = body.get("expect")
        if not isinstance(expect, int) or isinstance(expect, bool) or not 1 <= expect <= MAX_BATCH:
            raise ConsoleRefusal(400, f"expect must be the number of instances the filter matches (1 to {MAX_BATCH}), "
                                "as the page shows it: a cancel of more than you saw is refused")
        rows = self._rows("workflow", None if name is None else [name])
        wanted = {s.upper() for s in statuses}
        chosen = [r for r in rows if r.status in wanted and q.lower() in r.id.lower()]
        if len(chosen) != expect:
            raise ConsoleRefusal(409, f"the filter matches {len(chosen)} instances now, not {expect}: "
                                "look again and confirm that number")
        cancelled, failed = [], []
        for row in chosen:
            try:
                actions.cancel(row.name, row.id)
                cancelled.append({"workflow": row.name, "id": row.id})
            except (WorkflowNotFound, ReplyTimeout) as exc:
                failed.append({"workflow": row.name, "id": row.id, "error": str(exc)})
        return {"cancel_requested": cancelled, "failed": failed}

    def schedule(self, action: str, schedule_id: str) -> dict[str, Any]:
        actions = self._actions()
        try:
            schedule_aggregate(self.app)
        except LookupError:
            raise ConsoleRefusal(404, f"{self.app.name} declares no schedules (app.schedules([...]))") from None
        schedule_id = _id(schedule_id, "schedule id")
        # The journal first: an absent schedule, or one the action would not change, is refused unsent.
        known = asyncio.run(read_schedules(schedule_aggregate(self.app), self.kafka)).get(schedule_id)
        if known is None or known.status == "absent":
            raise ConsoleRefusal(404, f"schedule {schedule_id[:100]!r} does not exist")
        if (action, known.status) not in (("pause", "active"), ("resume", "paused")):
            raise ConsoleRefusal(409, f"schedule {schedule_id[:100]!r} is {known.status}: {action} changes nothing")
        try:
            done, status = actions.schedule(action, schedule_id)
        except ReplyTimeout as exc:
            raise ConsoleRefusal(504, str(exc)) from None
        if status == "absent":
            raise ConsoleRefusal(404, f"schedule {schedule_id[:100]!r} does not exist")
        if not done:
            raise ConsoleRefusal(409, f"schedule {schedule_id[:100]!r} is {status}: {action} changes nothing")
        return {f"{action}d": schedule_id, "status": status}

    def replay(self, letter: str, body: Mapping[str, Any]) -> dict[str, Any]:
        actions = self._actions()
        if set(body) - {"confirm"}:
            raise ConsoleRefusal(400, "a replay's body is {\"confirm\": true}; nothing else")
        line = self._letter(letter)
        try:
            replay = replay_of(line, self._inputs())
        except ReplayRefused as exc:
            raise ConsoleRefusal(422, str(exc)) from None
        if body.get("confirm") is not True:
            raise ConsoleRefusal(400, f"confirm the replay with {{\"confirm\": true}}: it sends {len(replay.value)} bytes "
                                f"to {replay.topic} partition {replay.partition}")
        offset = actions.replay(replay)
        return {"replayed": letter, "topic": replay.topic, "partition": replay.partition, "offset": offset}
