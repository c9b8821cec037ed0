"""An app's schedules: their journal folded as a worker's recovery does, and a handle to command them.

``tidings schedule`` and the console share this. Reading needs no worker (the aggregate's
journal ``{app}.aggregate.schedule.events``, from its beginning to its end); the handle's
commands are answered by a running worker.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..codec import avro
from ..codec.payloads import load_payload
from ..core.aggregate import AggregateDefinition, AggregateInstance, restore
from ..core.partitioning import partition_for
from ..core.records import EventEnvelope
from ..core.schedule.aggregate import ScheduleState
from ..shell.client.client import Client
from ..shell.client.follower import TopicFollower
from ..shell.kinds.aggregate.handle import AggregateHandle
from ..shell.kinds.schedule.handle import ScheduleHandle
from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.context import ThroughClient
from ..shell.runtime.io import Incoming

log = logging.getLogger(__name__)


def schedule_aggregate(app: Any) -> AggregateHandle[Any, Any, ScheduleState]:
    """The app's schedule aggregate.

    Raises:
        LookupError: the app declares no schedules (the message says what to add).
    """
    return app.schedule_handle().aggregate  # type: ignore[no-any-return]


def fold_journal(
    records: Iterable[Incoming],
    definition: AggregateDefinition[Any, Any, ScheduleState],
    partitions: int,
    instances: dict[str, AggregateInstance[ScheduleState]],
) -> int:
    """Fold the schedule journal's ``records`` into ``instances`` (by schedule id), as a worker's
    recovery does; return how many records were skipped.

    A record that does not decode, sits off its schedule's home partition, or is not the next
    version of its schedule is skipped (``restore``'s rule), so what any producer wrote to the
    journal never changes a schedule here either. Records of one partition must come in
    offset order; partitions may interleave.
    """
    skipped = 0
    for record in records:
        try:
            event = avro.decode_as(record.value or b"", EventEnvelope)
            if partition_for(event.aggregate_id, partitions) != record.partition:
                raise ValueError(f"an event of {event.aggregate_id[:100]!r} off its home partition")
            value = load_payload(event.type, event.payload, definition.event_types)
            instance = instances.get(event.aggregate_id) or AggregateInstance.new(
                event.aggregate_id, definition.initial
            )
            restored = restore(definition, instance, event, value)
        except Exception as exc:  # noqa: BLE001 - a bad record, or fold raising on it
            log.warning("skipping journal record %s/%d@%d: %s: %s", record.topic, record.partition,
                        record.offset, type(exc).__name__, exc)
            skipped += 1
            continue
        if restored is None:
            skipped += 1
            continue
        instances[event.aggregate_id] = restored
    return skipped


async def read_schedules(
    aggregate: AggregateHandle[Any, Any, ScheduleState], connection: KafkaConnection,
    progress: Callable[[str], None] = lambda line: None, every_s: float = 2.0,
) -> dict[str, ScheduleState]:
    """Every schedule of the app as its journal stands now, read from the beginning to the end.

    ``progress`` is told how far the reading is every ``every_s`` seconds, once it has taken
    that long.

    Raises:
        BrokerError: the journal topic is missing, or Kafka did not answer.
    """
    instances: dict[str, AggregateInstance[ScheduleState]] = {}
    follower = TopicFollower(connection, aggregate.topics.events, follow=False, chunk=2000)
    read = skipped = 0
    started = last = time.monotonic()
    try:
        await follower.start()
        while (chunk := await follower.next_chunk()) is not None:
            read += len(chunk)
            skipped += fold_journal(chunk, aggregate.definition, aggregate.context.partitions, instances)
            if time.monotonic() - last >= every_s:
                last = time.monotonic()
                progress(f"read {read} journal records, {len(instances)} schedules "
                         f"({last - started:.0f} s)")
    finally:
        follower.close()
    if skipped:
        progress(f"skipped {skipped} journal record(s) that were not the next version of their schedule "
                 "or did not decode (see the log)")
    return {schedule_id: instance.state for schedule_id, instance in instances.items()}


def schedule_handle(app: Any, client: Client, timeout: float | None) -> ScheduleHandle:
    """A handle like the one ``app.schedules`` returned to the program, sending through ``client``.

    The workflows a schedule may start are the ones the program listed in ``app.schedules``.
    """
    aggregate = schedule_aggregate(app)
    workflows = app.schedule_handle().workflows
    bound = dataclasses.replace(aggregate, context=ThroughClient(aggregate.context, client, timeout))
    return ScheduleHandle(bound, workflows)
