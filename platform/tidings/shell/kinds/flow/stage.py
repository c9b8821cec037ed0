"""``app.workflow_flow``: the ``WorkflowFlow`` stage deployed topic to topic, as a kind (SPEC §7).

::

    app.workflow_flow("score-orders", source_topic="shop.orders", handle=score,
                      id_of=lambda order: f"score-{order.id}", sink_topic="shop.scored",
                      parallelism=64, timeout=300)

Every worker of the app consumes its share of ``source_topic`` (a topic of anyone's) in
the app's consumer group. Per record: the value is read (``SourceDecoder``: JSON, or Avro
when the flow declares ``source_schema``) as the workflow's input type, ``handle.start(id_of(element), element)`` starts its workflow (a
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

A record that cannot be used (a tombstone, not JSON, Avro that does not decode with the
declared schema or without one, not the input type, ``id_of`` raising, an id breaking the
limits, an input too large, a start the workflow refuses) goes to the app's dead-letter topic
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
import json
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Sequence
from io import BytesIO
from typing import TYPE_CHECKING, Any

import pydantic_core
from fastavro import parse_schema, schemaless_reader

from ....codec.avro import schema_fingerprint
from ....codec.answers import JSON_HEADERS
from ....core.limits import MAX_ID_BYTES, check_id, load_json
from ....core.partitioning import partition_for
from ....core.workflow import Cancelled, Faulted, Finished, Outcome
from ....errors import BrokerError, DecodeError, DefinitionError, KeyOfFailed, SchemaError
from ..workflow.handle import WorkflowHandle, workflow_named
from .definition import _check
from ...runtime.context import KindContext
from ...runtime.hosting import Input, Runtime, TopicPartition
from ...runtime.io import Incoming, Outgoing
from ...runtime.topics import TopicSpec, deadletter_topic, spec_for
from ...runtime.tracing import CONSUMER, carrier_of

if TYPE_CHECKING:
    from ....core.workflow import WorkflowDefinition

log = logging.getLogger(__name__)

#: The first two bytes of an Avro single-object record; 8 bytes of fingerprint follow.
_SINGLE_OBJECT = b"\xc3\x01"
_SINGLE_OBJECT_HEADER = len(_SINGLE_OBJECT) + 8
#: The first byte of Confluent's Schema Registry wire format; a 4-byte schema id follows.
#: No JSON text starts with it (nor with 0xC3, which is no JSON token's first byte).
_CONFLUENT = b"\x00"
_CONFLUENT_HEADER = len(_CONFLUENT) + 4
_NO_SCHEMA = ("the flow declares no source_schema: pass app.workflow_flow(..., source_schema=<the "
              "producers' Avro schema>) to read Avro values")


class SourceSchema:
    """The Avro schema a flow reads its source's Avro values with (``source_schema``).

    Attributes:
        raw: The schema as JSON-decoded Python values.
        parsed: The fastavro-parsed schema.
        fingerprint: The 8 bytes a single-object record written with it carries.
    """

    def __init__(self, schema: Any) -> None:
        """Parse ``schema``: an Avro schema as a dict (or list, or primitive name), or its JSON text.

        Raises:
            ValueError: It is not JSON or not a valid Avro schema (the message says why).
        """
        raw = schema
        if isinstance(schema, (str, bytes)):
            try:
                raw = json.loads(schema)
            except ValueError as exc:
                raise ValueError(f"source_schema is not JSON text of an Avro schema: {exc}") from None
        if not isinstance(raw, (dict, list, str)):
            raise ValueError(f"source_schema must be an Avro schema (a dict or its JSON text), "
                             f"not {type(schema).__name__}")
        try:
            # A fresh name registry: another flow's (or tidings' own) record names must not
            # resolve inside this schema.
            self.parsed = parse_schema(raw, named_schemas={})
            self.fingerprint = schema_fingerprint(raw)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types for a bad schema
            raise ValueError(f"source_schema is not a valid Avro schema: {type(exc).__name__}: {exc}") from None
        self.raw = raw


class SourceDecoder:
    """Reads one source value as a workflow input: JSON always, Avro with a declared schema.

    The value's first bytes say its encoding (headers are not trusted: any producer writes
    them, or none):

    - ``C3 01`` + 8-byte CRC-64-AVRO fingerprint + Avro body: Avro single-object encoding.
      The fingerprint must be the declared schema's.
    - ``00`` + 4-byte schema id + Avro body: Confluent Schema Registry wire format. No
      registry is consulted (none need be reachable from a worker): the body is read with the
      declared schema as the writer's, whatever the id, so the producers must write with
      that schema; a body that does not decode with it is dead-lettered.
    - anything else: UTF-8 JSON text within the limits of ``load_json``.

    An Avro body becomes a Python value (a dict for a record) that is then validated as the
    workflow's input type exactly like a decoded JSON element.
    """

    def __init__(self, definition: WorkflowDefinition, schema: SourceSchema | None) -> None:
        self.definition = definition
        self.schema = schema

    def element(self, value: bytes | None) -> Any:
        """The record's value as the workflow's input type.

        Raises:
            DecodeError: A tombstone, Avro that does not decode (or no schema to decode it
                with), or not UTF-8 JSON within the limits.
            SchemaError: A decoded value that is not the workflow's input type.
        """
        if value is None:
            raise DecodeError("a tombstone (no value) is no flow element")
        if value.startswith(_SINGLE_OBJECT):
            return self._as_input(self._single_object(value))
        if value.startswith(_CONFLUENT):
            return self._as_input(self._confluent(value))
        try:
            load_json(value, "a flow element")  # the size and depth limits, and valid JSON
        except ValueError as exc:
            raise DecodeError(f"not a JSON flow element: {exc}") from exc
        definition = self.definition
        try:
            return definition.codec.decode(value.decode("utf-8-sig"), definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"not an input of workflow {definition.name!r}: {exc}") from exc

    def _single_object(self, value: bytes) -> Any:
        what = "an Avro single-object record"
        if len(value) < _SINGLE_OBJECT_HEADER:
            raise DecodeError(f"{what} cut short: {len(value)} bytes, its header alone is {_SINGLE_OBJECT_HEADER}")
        found = value[len(_SINGLE_OBJECT):_SINGLE_OBJECT_HEADER]
        if self.schema is None:
            raise DecodeError(f"{what} (schema fingerprint {found.hex()}): {_NO_SCHEMA}")
        if found != self.schema.fingerprint:
            raise DecodeError(f"{what} of schema fingerprint {found.hex()}; the flow's source_schema "
                              f"has fingerprint {self.schema.fingerprint.hex()} (expected)")
        return self._body(value[_SINGLE_OBJECT_HEADER:], what)

    def _confluent(self, value: bytes) -> Any:
        what = "a Confluent wire-format Avro record"
        if len(value) < _CONFLUENT_HEADER:
            raise DecodeError(f"{what} cut short: {len(value)} bytes, its header alone is {_CONFLUENT_HEADER}")
        schema_id = int.from_bytes(value[len(_CONFLUENT):_CONFLUENT_HEADER], "big")
        if self.schema is None:
            raise DecodeError(f"{what} (schema id {schema_id}): {_NO_SCHEMA}")
        return self._body(value[_CONFLUENT_HEADER:], f"{what} (schema id {schema_id}, read with the "
                                                     "flow's source_schema as the writer's schema)")

    def _body(self, body: bytes, what: str) -> Any:
        assert self.schema is not None
        stream = BytesIO(body)
        try:
            decoded = schemaless_reader(stream, self.schema.parsed, None)
        except Exception as exc:  # noqa: BLE001 - any byte string: fastavro raises many types
            raise DecodeError(f"{what} does not decode: {type(exc).__name__}: {exc or 'cut short'}") from None
        if stream.tell() != len(body):
            # Bytes left over mean another schema wrote it (or garbage follows): the
            # values read are not what the producer meant.
            raise DecodeError(f"{what} does not decode: {len(body) - stream.tell()} bytes left after "
                              f"the value ({len(body)} in the body)")
        return decoded

    def _as_input(self, decoded: Any) -> Any:
        definition = self.definition
        try:
            _, element = definition.codec.convert(decoded, definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"not an input of workflow {definition.name!r}: {exc}") from exc
        return element


class WorkflowFlowStage:
    """The ``Hosted`` of one ``app.workflow_flow``: a source topic to a sink topic through a workflow.

    Attributes:
        source_topic: The topic elements are read from (external: not declared by the app).
        sink_topic: The topic outcomes are written to (declared: role ``outcomes``).
        handle: The workflow each element starts.
        parallelism: Most elements in flight per worker.
        timeout: Seconds an element's workflow may take from its start.
        source_schema: The Avro schema the source's Avro values are read with, or None
            (Avro values are then dead-lettered).
    """

    def __init__(
        self,
        context: KindContext,
        name: str,
        source_topic: str,
        handle: WorkflowHandle,
        id_of: Callable[[Any], str],
        sink_topic: str,
        parallelism: int,
        timeout: float,
        source_schema: SourceSchema | None = None,
    ) -> None:
        self.context = context
        self._name = name
        self.source_topic = source_topic
        self.sink_topic = sink_topic
        self.handle = handle
        self.id_of = id_of
        self.parallelism = parallelism
        self.timeout = timeout
        self.source_schema = source_schema

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
        partitions = self.context.partitions
        return [
            spec_for("outcomes", self.sink_topic, partitions=partitions),
            spec_for("deadletter", deadletter_topic(self.context.name), partitions=partitions),
        ]

    def open(self, runtime: Runtime) -> WorkflowFlowAgent:
        """Check the source topic exists and return the agent.

        Raises:
            DefinitionError: The source topic does not exist (consuming it would wait
                forever, or have the broker auto-create it with a layout nobody chose).
        """
        check = runtime.topic_check()
        if not check.exists(self.source_topic):
            refusal = check.refusal(self.source_topic) or "it is not there"
            raise DefinitionError(f"flow {self.name!r}", [
                f"its source topic {self.source_topic!r} cannot be read on {runtime.connection}: {refusal}; "
                "create it (it is not one of the app's own topics, so `tidings topics apply` does not), "
                "and on a cluster with an authorizer apply the app's ACLs (`tidings acls MODULE:APP --worker "
                "User:W --apply` grants its workers READ on it)"
            ])
        return WorkflowFlowAgent(self, runtime)


class WorkflowFlowAgent:
    """Runs one flow in a worker: decodes, starts, awaits and writes outcomes; see the module."""

    def __init__(self, stage: WorkflowFlowStage, runtime: Runtime) -> None:
        self.stage = stage
        self._runtime = runtime
        self._decoder = SourceDecoder(stage.handle.definition, stage.source_schema)
        self._slots = asyncio.Semaphore(stage.parallelism)
        self._tasks: set[asyncio.Future[Any]] = set()
        self.in_flight = 0
        handle = stage.handle
        # The handle's calls go to the worker's broker (not TIDINGS_BOOTSTRAP of the process).
        runtime.on_close(lambda: handle.close(runtime.connection))

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
        tracing = self._runtime.tracing
        if tracing is None:
            await self._run_element(record)
            return
        # The element's span goes on in the trace of the source record's traceparent header,
        # if it has one; the workflow's start (the requester's span) and run are under it.
        with tracing.span(f"flow {self.stage.name}", carrier_of(None, record.headers), kind=CONSUMER,
                          attributes={"tidings.flow": self.stage.name, "tidings.workflow": self.stage.handle.name,
                                      "messaging.destination.name": record.topic,
                                      "messaging.kafka.offset": record.offset}):
            await self._run_element(record)

    async def _run_element(self, record: Incoming) -> None:
        stage = self.stage
        try:
            element = self._decoder.element(record.value)
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
        # Outside the bound: the slot goes to the next element while the broker acknowledges
        # this one's sink record (a round trip per element that held each of the
        # ``parallelism`` slots). The batch's finish still waits for it before its offsets.
        await self._runtime.publisher.publish([self._outcome_record(instance_id, outcome)])

    async def _run(self, instance_id: str, element: Any) -> Outcome:
        """Start the element's workflow and return its outcome (``WorkflowHandle.execute_outcome``).

        The outcome record is watched *before* the start, so the outcome of an instance
        this start creates is seen without asking the worker anything: no query and no
        reply per element, which would double the inbox records the worker handles and
        the records this stage waits for. The worker answers the start only when it stores
        nothing: the instance existed (a replayed element whose instance ended before the
        crash, its outcome written before the watch began), and is asked about then.
        """
        handle, seconds = self.stage.handle, self.stage.timeout
        # The handle's own deadline answers with its reason (e.g. "it is parked"); wait_for
        # bounds it should it not honour the timeout.
        return await asyncio.wait_for(handle.execute_outcome(
            instance_id, element, seconds, bootstrap=self._runtime.connection), seconds)

    def _id_of(self, element: Any) -> str:
        try:
            instance_id = self.stage.id_of(element)
        except Exception as exc:  # noqa: BLE001 - user code: its failure is the record's
            try:
                message = str(exc)
            except Exception:  # noqa: BLE001 - a user exception's __str__ must not stop the worker
                message = "(its message could not be rendered)"
            raise KeyOfFailed(f"id_of raised {type(exc).__name__}: {message}") from exc
        try:
            # Checked before the element takes a slot: the id becomes a Kafka key, a RocksDB
            # key and part of every record of the instance.
            return check_id(instance_id, "the id id_of returned")
        except ValueError as exc:
            raise KeyOfFailed(f"{exc} (ids are non-empty str of at most {MAX_ID_BYTES} bytes of UTF-8)") from None

    def _outcome_record(self, instance_id: str, outcome: Outcome) -> Outgoing:
        stage = self.stage
        body: dict[str, Any] = {"id": instance_id, "workflow": stage.handle.name}
        if isinstance(outcome, Finished):
            body["outcome"] = "finished"
            body["value"] = outcome.value
        elif isinstance(outcome, Faulted):
            body["outcome"] = "faulted"
            body["error"] = outcome.error.to_json()
        elif isinstance(outcome, Cancelled):
            body["outcome"] = "cancelled"
        value = pydantic_core.to_json(body)
        return Outgoing(stage.sink_topic, instance_id.encode(), value,
                        partition_for(instance_id, stage.context.partitions), JSON_HEADERS)

    async def _dead_letter(self, record: Incoming, error: BaseException) -> None:
        log.error("flow %s dead-letters %s/%d@%d: %s", self.stage.name, record.topic, record.partition,
                  record.offset, error)
        await self._runtime.publisher.publish([self._runtime.dead_letter(record, error)])


def declare_flow(
    context: KindContext,
    name: str,
    source_topic: str,
    handle: WorkflowHandle | str,
    id_of: Callable[[Any], str],
    sink_topic: str,
    parallelism: int,
    timeout: float | Any,
    source_schema: Any = None,
) -> WorkflowFlowStage:
    """Validate the arguments of ``app.workflow_flow`` and return the stage (``App`` hosts it).

    Raises:
        DefinitionError: listing every problem (an unknown workflow, a bad parallelism or
            timeout, ``id_of`` not callable, sink and source the same topic or one of the
            app's own topics, a ``source_schema`` that is no valid Avro schema).
    """
    problems: list[str] = []
    resolved: WorkflowHandle | None = None
    if isinstance(handle, str):
        try:
            resolved = workflow_named(context, handle)
        except LookupError as exc:
            problems.append(str(exc))
    elif isinstance(handle, WorkflowHandle) and handle.context is context:
        resolved = handle
    else:
        problems.append(f"handle must be a workflow of app {context.name!r} (its handle or name), not {handle!r}")
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
    if isinstance(source_topic, str) and source_topic in context.own_topics():
        problems.append(f"source_topic {source_topic!r} is one of the app's own topics")
    if isinstance(sink_topic, str) and sink_topic in context.own_topics():
        problems.append(f"sink_topic {sink_topic!r} is already one of the app's topics")
    schema: SourceSchema | None = None
    if source_schema is not None:
        try:
            schema = SourceSchema(source_schema)
        except ValueError as exc:
            problems.append(str(exc))
    if problems or resolved is None:
        raise DefinitionError(f"flow {name!r}", problems)
    return WorkflowFlowStage(context, name, source_topic, resolved, id_of, sink_topic, parallelism, seconds,
                             schema)


class _Placeholder:
    """Stands in for an unresolved handle, so ``_check`` reports the other arguments' problems."""

    async def start(self, instance_id: str, input: Any = None) -> None: ...

    async def result(self, instance_id: str, timeout: float | None = None) -> Outcome:
        raise NotImplementedError
