"""The records a hosted orchestration writes to Kafka, as plain immutable values.

A hosted orchestration (``app.orchestration``, docs/orchestrations-hosted.md) moves three
kinds of records:

- ``OrchestrationEvent``: a stored aggregate event routed to one orchestration instance.
  On the inbox topic its ``sequence`` is 0 (not journaled yet); on the journal topic it is
  the instance's position ``1, 2, ...`` and the record key is ``{instance}/{sequence}``.
- ``OrchestrationActions``: the new actions an instance asked for at one position,
  keyed ``{instance}/{position}`` on the actions topic.
- ``OrchestrationOutcome``: the ``Continue`` value a finished instance gave, keyed by the
  instance on the outcomes topic.

User values (actions, outcome values) stay opaque here, as in ``tidings.core.records``:
a stable type name and JSON bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.records import EventEnvelope


@dataclass(frozen=True, slots=True)
class OrchestrationEvent:
    """One source event for one orchestration instance (inbox: sequence 0; journal: >= 1).

    Idempotent by ``(source_topic, source_partition, source_offset)``: each instance
    remembers the last source offset it journaled per source partition, so a re-routed
    event is journaled once.
    """

    orchestration: str
    instance: str
    sequence: int
    source_topic: str
    source_partition: int
    source_offset: int
    aggregate: str
    event: EventEnvelope


@dataclass(frozen=True, slots=True)
class Action:
    """One action an orchestration asked for: the user's value as type name and JSON bytes."""

    type: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class OrchestrationActions:
    """The actions an instance asked for at ``position`` that it had not asked for before."""

    orchestration: str
    instance: str
    position: int
    actions: tuple[Action, ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OrchestrationOutcome:
    """A finished instance: the last ``Continue`` value of its finishing step, if any.

    ``type`` and ``payload`` are None when the orchestration finished without a value.
    """

    orchestration: str
    instance: str
    position: int
    timestamp_ms: int
    type: str | None = None
    payload: bytes | None = None
