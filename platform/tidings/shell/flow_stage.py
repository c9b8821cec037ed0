"""``app.workflow_flow``: the ``WorkflowFlow`` stage deployed topic to topic, as a kind (SPEC §7).

::

    app.workflow_flow("score-orders", source_topic="shop.orders", handle=score,
                      id_of=lambda order: f"score-{order.id}", sink_topic="shop.scored",
                      parallelism=64, timeout=300)

Every worker of the app consumes its share of ``source_topic`` (a topic of anyone's, with
JSON values) in the app's consumer group. Per record: the value is decoded as the
workflow's input type, ``handle.start(id_of(element), element)`` starts its workflow (a
second start of an id stores nothing), the outcome is awaited and written to
``sink_topic`` keyed by the workflow id as a JSON record::

    {"id": "score-17", "workflow": "score", "outcome": "finished", "value": 289}
    {"id": "score-27", "workflow": "score", "outcome": "faulted",
     "error": {"kind": "not_retryable", "message": "...", "type": "RuntimeError"}}
    {"id": "score-33", "workflow": "score", "outcome": "cancelled"}

Durability comes from the order of effects: a source record's offset is committed only
after its outcome is written (and after every earlier record of its partition is done:
the pipeline acks whole batches in order). A worker that dies replays the uncommitted
records: their starts store nothing, their waits find the instances they started, and
their outcomes are written (again, for those written before the crash: a sink may hold
the same outcome of an id more than once; it is a compacted topic keyed by id, so
compaction keeps one).

A record that cannot be used (not JSON, not the input type, ``id_of`` raising, an id
breaking the limits, a start the workflow refuses) goes to the app's dead-letter topic
with the reason and the stage goes on. So does an element whose workflow has not ended
within ``timeout`` of its start: it is dead-lettered with a ``TimeoutError`` reason and
its offset may be committed; the workflow itself carries on (its outcome is on the
workflow's own outcomes topic, not on the sink). Only Kafka failing stops the worker
(exit 70, restarted, records replayed).

At most ``parallelism`` elements per worker are between their start and their written
outcome (one semaphore for every source partition the worker owns).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import pydantic_core

from ..codec.json import CONTENT_TYPE
from ..core.limits import load_json
from ..core.partitioning import partition_for
from ..core.workflow import Cancelled, Faulted, Finished, Outcome
from ..errors import BrokerError, DecodeError, DefinitionError, KeyOfFailed, SchemaError
from .deadletters import dead_letter
from .flow import _check
from .hosting import Input, Runtime, TopicPartition
from .io import Incoming, Outgoing
from .topics import TopicSpec, deadletter_topic, spec_for

if TYPE_CHECKING:
    from .app import App
    from .workflows import WorkflowHandle

log = logging.getLogger(__name__)

#: The first two bytes of an Avro single-object record.
_AVRO_MARKER = b"\xc3\x01"


class WorkflowFlowStage:
    """The ``Hosted`` of one ``app.workflow_flow``: a source topic to a sink topic through a workflow.

    Attributes:
        source_topic: The topic elements are read from (external: not declared by the app).
        sink_topic: The topic outcomes are written to (declared: role ``outcomes``).
        handle: The workflow each element starts.
        parallelism: Most elements in flight per worker.
        timeout: Seconds an element's workflow may take from its start.
    """

    def __init__(
        self,
        app: App,
        name: str,
        source_topic: str,
        handle: WorkflowHandle,
        id_of: Callable[[Any], str],
        sink_topic: str,
        parallelism: int,
        timeout: float,
    ) -> None:
        self.app = app
        self._name = name
        self.source_topic = source_topic
        self.sink_topic = sink_topic
        self.handle = handle
        self.id_of = id_of
        self.parallelism = parallelism
        self.timeout = timeout

    @property
    def kind(self) -> str:
        return "flow"

    @property
    def name(self) -> str:
        return self._name

    def topic_specs(self) -> list[TopicSpec]:
        """The sink (compacted, keyed by workflow id) and the app's dead-letter topic.

        Not the source: it belongs to whoever writes it; ``open`` checks it exists.
        """
        partitions = self.app.partitions
        return [
            spec_for("outcomes", self.sink_topic, partitions=partitions),
            spec_for("deadletter", deadletter_topic(self.app.name), partitions=partitions),
        ]

    def open(self, runtime: Runtime) -> WorkflowFlowAgent:
        """Check the source topic exists and return the agent.

        Raises:
            DefinitionError: The source topic does not exist (consuming it would wait
                forever, or have the broker auto-create it with a layout nobody chose).
        """
        if not runtime.topic_check().exists(self.source_topic):
            raise DefinitionError(f"flow {self.name!r}", [
                f"its source topic {self.source_topic!r} does not exist on {runtime.bootstrap}; "
                "create it (it is not one of the app's own topics, so `tidings topics apply` does not)"
            ])
        return WorkflowFlowAgent(self, runtime)


class WorkflowFlowAgent:
    """Runs one flow in a worker: decodes, starts, awaits and writes outcomes; see the module."""

    def __init__(self, stage: WorkflowFlowStage, runtime: Runtime) -> None:
        self.stage = stage
        self._runtime = runtime
        self._slots = asyncio.Semaphore(stage.parallelism)
        self._tasks: set[asyncio.Future[Any]] = set()
        self.in_flight = 0
        handle = stage.handle
        # The handle's calls go to the worker's broker (not TIDINGS_BOOTSTRAP of the process).
        runtime.on_close(lambda: handle.close(runtime.bootstrap))

    # -- the hosting seam ----------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[Input]:
        # One batch per record when the source trickles: parallelism + 1 batches in flight
        # let ``parallelism`` elements run even then (the semaphore bounds the elements).
        return [Input(f"flow-{self.stage.name}", (self.stage.source_topic,), self.start,
                      partitions=None, max_in_flight=self.stage.parallelism + 1)]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing to recover: the stage keeps no state beyond the committed offsets."""

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing: elements in flight finish and write their outcome; their offsets are
        not committed (the partition is gone), so the new owner replays them into the same
        instances and writes the same outcome again."""

    def close(self) -> None:
        """Cancel the waits in flight; the workflows they started carry on."""
        for task in self._tasks:
            task.cancel()

    # -- one batch -----------------------------------------------------------------------

    async def start(self, batch: list[Incoming]) -> Callable[[], Awaitable[None]]:
        """Start one task per record (each waits for a slot); ``finish`` waits for them all."""
        tasks = [asyncio.ensure_future(self._element(record)) for record in batch]
        self._tasks.update(tasks)

        async def finish() -> None:
            try:
                # A BrokerError of one element raises here and stops the worker (exit 70):
                # nothing of the batch is acked, so all of it is replayed.
                await asyncio.gather(*tasks)
            finally:
                self._tasks.difference_update(tasks)

        return finish

    async def _element(self, record: Incoming) -> None:
        stage = self.stage
        try:
            element = self._decode(record)
            instance_id = self._id_of(element)
        except (DecodeError, SchemaError, KeyOfFailed) as exc:
            await self._dead_letter(record, exc)
            return
        async with self._slots:
            self.in_flight += 1
            try:
                outcome = await self._run(instance_id, element)
            except BrokerError:
                raise
            except TimeoutError as exc:
                await self._dead_letter(record, TimeoutError(
                    f"flow {stage.name!r}: workflow {stage.handle.name} {instance_id!r} did not end within "
                    f"{stage.timeout} s of its start; the element is dead-lettered and the workflow carries on "
                    f"({exc or 'no outcome'})"))
                return
            except Exception as exc:  # noqa: BLE001 - no record stops the worker; only Kafka does
                await self._dead_letter(record, exc)
                return
            finally:
                self.in_flight -= 1
            await self._runtime.publisher.publish([self._outcome_record(instance_id, outcome)])

    async def _run(self, instance_id: str, element: Any) -> Outcome:
        handle, bootstrap, seconds = self.stage.handle, self._runtime.bootstrap, self.stage.timeout
        await handle.start(instance_id, element, bootstrap=bootstrap)
        # The handle's own deadline answers with its reason (e.g. "it is parked");
        # wait_for bounds it should it not honour the timeout.
        return await asyncio.wait_for(handle.result(instance_id, seconds, bootstrap=bootstrap), seconds)

    def _decode(self, record: Incoming) -> Any:
        """The record's value as the workflow's input type.

        Raises:
            DecodeError: A tombstone, an Avro record, or not UTF-8 JSON within the limits.
            SchemaError: JSON that is not the workflow's input type.
        """
        value = record.value
        if value is None:
            raise DecodeError("a tombstone (no value) is no flow element")
        if value.startswith(_AVRO_MARKER):
            raise DecodeError("an Avro single-object record: a flow's source takes JSON values "
                              "of the workflow's input type")
        try:
            load_json(value, "a flow element")  # the size and depth limits, and valid JSON
        except ValueError as exc:
            raise DecodeError(f"not a JSON flow element: {exc}") from exc
        definition = self.stage.handle.definition
        try:
            return definition.codec.decode(value.decode("utf-8-sig"), definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"not an input of workflow {definition.name!r}: {exc}") from exc

    def _id_of(self, element: Any) -> str:
        try:
            instance_id = self.stage.id_of(element)
        except Exception as exc:  # noqa: BLE001 - user code: its failure is the record's
            raise KeyOfFailed(f"id_of raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(instance_id, str):
            raise KeyOfFailed(f"id_of must return a str, not {type(instance_id).__name__}")
        return instance_id

    def _outcome_record(self, instance_id: str, outcome: Outcome) -> Outgoing:
        stage = self.stage
        body: dict[str, Any] = {"id": instance_id, "workflow": stage.handle.name}
        if isinstance(outcome, Finished):
            body["outcome"] = "finished"
            body["value"] = outcome.value
        elif isinstance(outcome, Faulted):
            error = outcome.error
            body["outcome"] = "faulted"
            body["error"] = {"kind": error.kind.value if error.kind is not None else None,
                             "message": error.message, "type": error.type}
        elif isinstance(outcome, Cancelled):
            body["outcome"] = "cancelled"
        value = pydantic_core.to_json(body)
        return Outgoing(stage.sink_topic, instance_id.encode(), value,
                        partition_for(instance_id, stage.app.partitions),
                        (("content-type", CONTENT_TYPE.encode()),))

    async def _dead_letter(self, record: Incoming, error: BaseException) -> None:
        log.error("flow %s dead-letters %s/%d@%d: %s", self.stage.name, record.topic, record.partition,
                  record.offset, error)
        runtime = self._runtime
        letter = dead_letter(record, error, runtime.deadletter_topic, int(runtime.clock() * 1000),
                             value_limit=runtime.deadletter_value_limit)
        await runtime.publisher.publish([letter])


def declare_flow(
    app: App,
    name: str,
    source_topic: str,
    handle: WorkflowHandle | str,
    id_of: Callable[[Any], str],
    sink_topic: str,
    parallelism: int,
    timeout: float | Any,
) -> WorkflowFlowStage:
    """Validate the arguments of ``app.workflow_flow`` and host the stage.

    Raises:
        DefinitionError: listing every problem (an unknown workflow, a bad parallelism or
            timeout, ``id_of`` not callable, sink and source the same topic or one of the
            app's own topics).
    """
    from .workflows import WorkflowHandle

    problems: list[str] = []
    resolved: WorkflowHandle | None = None
    if isinstance(handle, str):
        try:
            resolved = app.workflow_handle(handle)
        except LookupError as exc:
            problems.append(str(exc))
    elif isinstance(handle, WorkflowHandle) and handle.app is app:
        resolved = handle
    else:
        problems.append(f"handle must be a workflow of app {app.name!r} (its handle or name), not {handle!r}")
    seconds = math.nan
    try:
        seconds = _check(resolved or _Placeholder(), id_of, parallelism, ("start", "result"), timeout)
    except ValueError as exc:
        problems.extend(str(exc).removeprefix("WorkflowFlow: ").split("; "))
    for role, topic in (("source_topic", source_topic), ("sink_topic", sink_topic)):
        if not isinstance(topic, str) or not topic:
            problems.append(f"{role} must be a topic name, not {topic!r}")
    if source_topic == sink_topic:
        problems.append(f"source_topic and sink_topic are both {source_topic!r}")
    if isinstance(source_topic, str) and source_topic in app.own_topics():
        problems.append(f"source_topic {source_topic!r} is one of the app's own topics")
    if isinstance(sink_topic, str) and sink_topic in app.own_topics():
        problems.append(f"sink_topic {sink_topic!r} is already one of the app's topics")
    if problems or resolved is None:
        raise DefinitionError(f"flow {name!r}", problems)
    stage = WorkflowFlowStage(app, name, source_topic, resolved, id_of, sink_topic, parallelism, seconds)
    app.host(stage)
    return stage


class _Placeholder:
    """Stands in for an unresolved handle, so ``_check`` reports the other arguments' problems."""

    async def start(self, instance_id: str, input: Any = None) -> None: ...

    async def result(self, instance_id: str, timeout: float | None = None) -> Outcome:
        raise NotImplementedError
