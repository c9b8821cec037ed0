"""The records a workflow instance journals, as frozen, JSON-compatible values.

Every record carries ``seq``, its per-instance sequence number (1, 2, 3 ...), which makes the
Kafka key ``{instance_id}/{seq}`` unique so compaction never drops history. User values
(input, results, signal payloads) are stored as JSON text, so a codec can carry any record
as plain JSON or Avro strings without knowing user types.

Which records are *inputs* and which are *produced by the body* is not a property of the
type: replay walks the journal in order and feeds it every record the body did not produce
itself (see ``docs/workflows.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from tidings.core.workflow.child_records import ChildOutcome
from tidings.core.workflow.failures import StepError


class StepKind:
    """The stored kind of a step. Steps that store the same kind may replace each other."""

    ACTIVITY = "activity"
    TIMER = "timer"
    NOW = "now"
    GUID = "guid"
    RANDOM = "random"
    SIGNAL = "signal"
    ALL = "all"
    RACE = "race"
    SEND = "send"
    CHILD_START = "child_start"
    CHILD_AWAIT = "child_await"
    SIGNAL_SEND = "signal_send"
    UPDATE = "update"


@dataclass(frozen=True, slots=True)
class Started:
    """The instance started with ``input`` (JSON text) at ``at`` (ms).

    A child workflow's start also names its parent (workflow, instance id, and the path
    of the step that started it), so the child can report its end to the parent.
    ``outcome_json``: the start was a JSON request, so the outcome record is written as
    JSON for its non-Python sender (None: Avro; since ``workflowjournal.v3``).
    ``parent_token``: a child's copy of the token its parent drew for it, which every
    report to the parent carries (since ``workflowjournal.v4``).
    ``traceparent``: the W3C trace context of the run's span (docs/tracing.md), so the run's
    later spans resume under it after a restart (None: not traced; since ``workflowjournal.v5``).
    ``run``: which run of the instance this start begins: 2, 3 ... after a ``continue_as_new``
    (None: the first run; since ``workflowjournal.v8``).
    """

    seq: int
    input: str
    at: int
    parent_workflow: str | None = None
    parent_id: str | None = None
    parent_path: str | None = None
    outcome_json: bool | None = None
    parent_token: str | None = None
    traceparent: str | None = None
    run: int | None = None


@dataclass(frozen=True, slots=True)
class ContinuedAsNew:
    """The body ended its run with ``continue_as_new(input)`` at ``at`` (ms): the next record is
    the ``Started`` of run ``run`` with the same ``input`` (JSON text). Since ``workflowjournal.v8``.

    ``carried``: how many stored signals and updates the new run gets, journaled right after
    its ``Started``: a new run is complete only with all of them (a crash can cut a batch).
    Produced by the body, so replay checks it in order. It is what makes a later ``Started``
    legitimate: a ``Started`` that does not follow one of these (same run, same input, the
    seq right before) is a second start, and the instance parks (``continuing.current_run``).
    """

    seq: int
    at: int
    input: str
    run: int
    carried: int = 0


@dataclass(frozen=True, slots=True)
class StepStarted:
    """The body reached step ``path``; ``due`` (ms) is stored for timers and timed waits.

    ``token``: a ``child_start`` step's random token, drawn live and stored so a replay
    keeps it; the child's reports must carry it (since ``workflowjournal.v4``; None for
    every other step, and for children started before: their reports are not checked).
    """

    seq: int
    path: str
    kind: str
    name: str
    at: int
    due: int | None = None
    token: str | None = None


@dataclass(frozen=True, slots=True)
class StepCompleted:
    """Step ``path`` gave ``result`` (JSON text). ``signal`` is the seq of the signal a wait consumed.

    ``at`` (ms): when it completed; ``attempt``: an activity's attempt that gave the result
    (both since ``workflowjournal.v4``; None in older records and, for ``attempt``, for
    every other step). Stored for people (``tidings journal``, the console); replay reads
    neither.
    """

    seq: int
    path: str
    result: str
    signal: int | None = None
    at: int | None = None
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class StepFailed:
    """Step ``path`` failed with ``error``. ``signal`` is the seq of a consumed unreadable signal.

    ``at`` and ``attempt`` as for ``StepCompleted`` (``attempt``: the activity's last attempt).
    """

    seq: int
    path: str
    error: StepError
    signal: int | None = None
    at: int | None = None
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class StepAttemptFailed:
    """Attempt ``attempt`` of the activity at step ``path`` failed with ``error`` at ``at`` (ms),
    and the policy makes another at ``retry_at`` (ms). Since ``workflowjournal.v5``.

    Written for people (``tidings describe``, ``tidings journal``): replay skips it, so a
    journal with these records replays exactly as one without them, and an attempt after a
    restart is still counted from 1 (the retry policy's count lives in the owning worker).
    The attempt that ends the step is not one of these: its ``StepCompleted`` or
    ``StepFailed`` carries its number.
    """

    seq: int
    path: str
    attempt: int
    error: StepError
    at: int
    retry_at: int


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """A signal ``name`` with ``payload`` (JSON text) arrived at ``at`` (ms).

    ``signal_id`` is the sender's id of the signal, if it gave one: the instance stores no
    second signal with an id its journal holds (None: never de-duplicated).
    """

    seq: int
    name: str
    payload: str
    at: int
    signal_id: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateReceived:
    """An update ``name`` with ``payload`` (JSON text) was accepted at ``at`` (ms); since
    ``workflowjournal.v7``.

    Stored only once the update passed its checks (a declared name, a payload that reads as
    the declared type, the validator): a rejected update stores nothing. ``update_id`` names
    it: the instance stores one update per id, and a repeat gets the first answer.
    ``reply_to``, ``request_id``, ``reply_json``: where the caller that waits for the update's
    completion is answered, kept here so a worker that restarts before it answered still can
    (None: nobody waits, e.g. a caller that waited only for acceptance).
    """

    seq: int
    name: str
    payload: str
    at: int
    update_id: str
    reply_to: str | None = None
    request_id: str | None = None
    reply_json: bool | None = None


@dataclass(frozen=True, slots=True)
class UpdateAnswered:
    """The body answered update ``update_id`` at ``at`` (ms): ``result`` (JSON text), or
    ``error`` when it failed it (``req.fail``). Produced by the body, so replay checks it in
    order; since ``workflowjournal.v7``."""

    seq: int
    update_id: str
    at: int
    result: str | None = None
    error: StepError | None = None


@dataclass(frozen=True, slots=True)
class VersionMarker:
    """``version(change_id, ...)`` at ``position`` gave ``version`` to this instance."""

    seq: int
    position: str
    change_id: str
    version: int


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """Cancellation was requested at ``at`` (ms)."""

    seq: int
    at: int


OutcomeName = Literal["finished", "faulted", "cancelled"]


@dataclass(frozen=True, slots=True)
class Ended:
    """The body ended: ``result`` (JSON text) when finished, ``error`` when faulted."""

    seq: int
    outcome: OutcomeName
    at: int
    result: str | None = None
    error: StepError | None = None


JournalRecord = (
    Started | StepStarted | StepCompleted | StepFailed | SignalReceived | VersionMarker | CancelRequested | Ended
    | ChildOutcome | StepAttemptFailed | UpdateReceived | UpdateAnswered | ContinuedAsNew
)
"""Any record of a workflow journal."""

JOURNAL_TYPES: Final[Mapping[str, type[Any]]] = MappingProxyType({
    "started": Started,
    "step_started": StepStarted,
    "step_completed": StepCompleted,
    "step_failed": StepFailed,
    "signal_received": SignalReceived,
    "version_marker": VersionMarker,
    "cancel_requested": CancelRequested,
    "ended": Ended,
    "child_ended": ChildOutcome,
    "step_attempt_failed": StepAttemptFailed,
    "update_received": UpdateReceived,
    "update_answered": UpdateAnswered,
    "continued_as_new": ContinuedAsNew,
})
"""Each journal record class by its stored type name (the JSON and Avro ``type``)."""
_NAMES: dict[type[Any], str] = {cls: name for name, cls in JOURNAL_TYPES.items()}


def record_type_name(record: JournalRecord) -> str:
    """Return the stable type name of ``record`` (e.g. ``step_started``), used by codecs."""
    return _NAMES[type(record)]


def record_to_json(record: JournalRecord) -> dict[str, Any]:
    """Return ``record`` as a JSON-compatible dict with its type name under ``"type"``."""
    data: dict[str, Any] = {"type": _NAMES[type(record)]}
    for name in record.__slots__:  # type: ignore[union-attr]
        value = getattr(record, name)
        data[name] = value.to_json() if isinstance(value, StepError) else value
    return data


def record_from_json(data: dict[str, Any]) -> JournalRecord:
    """Rebuild a record from ``record_to_json``'s output.

    Raises:
        ValueError: The type name is unknown or a field is missing.
    """
    fields = dict(data)
    name = fields.pop("type", None)
    cls = JOURNAL_TYPES.get(str(name))
    if cls is None:
        raise ValueError(f"unknown workflow journal record type {name!r}")
    if isinstance(fields.get("error"), dict):
        fields["error"] = StepError.from_json(fields["error"])
    try:
        record: JournalRecord = cls(**fields)
    except TypeError as exc:
        raise ValueError(f"invalid {name!r} record: {exc}") from exc
    return record
