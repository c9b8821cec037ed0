"""``@app.workflow``: declare a durable workflow hosted on Kafka, and its handle.

Declaring does no I/O: ``declare_workflow`` validates the body (``define_workflow``),
registers the handle with ``app.host(handle)`` and returns it. The worker calls
``handle.open(runtime)`` to run the definition (``tidings.shell.agents.workflow``);
a program calls ``handle.start/result/value/status/signal/cancel``, which talk to the
worker through Kafka (see docs/workflows-hosted.md)::

    @app.workflow("enrich")
    async def enrich(ctx: WorkflowContext, order: str) -> int:
        return await ctx.activity("score", Retry.times(3), lambda a: score(a.idempotency_key, order))

    await enrich.start("order-17", "ABC")
    outcome = await enrich.result("order-17", timeout=60)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.limits import check_id, check_payload_size
from ..core.workflow import Cancelled, Faulted, Outcome, WorkflowDefinition, WorkflowStatus, define_workflow
from ..errors import SchemaError, WorkflowCancelled, WorkflowEnded, WorkflowFaulted, WorkflowNotFound
from .agents.workflow import WorkflowAgent, WorkflowTopics
from .agents.workflow_client import WorkflowClient
from .agents.workflow_codec import outcome_from
from .agents.workflow_store import WorkflowStore
from .hosting import Runtime
from .topics import TopicSpec, deadletter_topic, spec_for, topic_name

if TYPE_CHECKING:
    from .app import App

#: How often ``result`` asks again while it waits: an answer promised by a worker that
#: then crashed is never sent, so the question is repeated to whoever owns the instance.
RESULT_REASK_S = 5.0


class WorkflowHandle:
    """What ``@app.workflow`` returns: start, signal, cancel and inspect instances.

    Every method takes an optional ``bootstrap``; the default is the app's.
    """

    def __init__(self, app: App, definition: WorkflowDefinition, *, cache_size: int = 10_000) -> None:
        self.app = app
        self.definition = definition
        self.name = definition.name
        self.cache_size = cache_size
        self.topics = WorkflowTopics(
            inbox=topic_name(app.name, "workflow", self.name, "inbox"),
            journal=topic_name(app.name, "workflow", self.name, "journal"),
            outcomes=topic_name(app.name, "workflow", self.name, "outcomes"),
            status=topic_name(app.name, "workflow", self.name, "status"),
            replies=topic_name(app.name, "workflow", self.name, "replies"),
            deadletter=deadletter_topic(app.name),
        )
        self._clients: dict[str, WorkflowClient] = {}

    # -- the client side ---------------------------------------------------------------

    async def start(self, instance_id: str, input: Any = None, *, bootstrap: str | None = None) -> None:
        """Start ``instance_id`` with ``input``; a second start with the same id stores nothing.

        Returns once the request is in the inbox (durable); the worker decides it in order.

        Raises:
            LimitError: ``instance_id`` is empty, not valid UTF-8 or longer than
                ``MAX_ID_BYTES``, or the input is larger than ``MAX_PAYLOAD_BYTES``
                (``tidings.core.limits``; raised before producing).
            SchemaError: ``input`` cannot be stored or read back as the input type.
        """
        _check_id(instance_id)
        try:
            text, _ = self.definition.codec.convert(input, self.definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"workflow {self.name!r}: the input cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), "the input")
        client = self.client(bootstrap)
        await client.send(client.request(instance_id, "start", payload=text.encode(), answer=False))

    async def result(self, instance_id: str, timeout: float | None = None, *, bootstrap: str | None = None) -> Outcome:
        """Wait for the instance's outcome: ``Finished(value)``, ``Faulted(error)`` or ``Cancelled()``.

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            TimeoutError: It had not ended within ``timeout`` seconds (default: the app's).
        """
        _check_id(instance_id)
        client = self.client(bootstrap)
        wait = self.app.command_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name} {instance_id!r} did not end within {wait} s")
            try:
                reply = await client.ask(client.request(instance_id, "query", wait=True),
                                         min(remaining, RESULT_REASK_S))
            except asyncio.TimeoutError:
                continue
            if reply.answer == "not_found":
                raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
            if reply.outcome is not None:
                return outcome_from(reply.outcome, reply.result, reply.error, self.definition)

    async def value(self, instance_id: str, timeout: float | None = None, *, bootstrap: str | None = None) -> Any:
        """Wait for the instance's result value.

        Raises:
            WorkflowFaulted: It ended Faulted (the message holds the stored error).
            WorkflowCancelled: It ended Cancelled.
            WorkflowNotFound, TimeoutError: as for ``result``.
        """
        outcome = await self.result(instance_id, timeout, bootstrap=bootstrap)
        if isinstance(outcome, Faulted):
            raise WorkflowFaulted(f"{self.name} {instance_id!r} faulted: {outcome.error}")
        if isinstance(outcome, Cancelled):
            raise WorkflowCancelled(f"{self.name} {instance_id!r} was cancelled")
        return outcome.value

    async def status(
        self, instance_id: str, timeout: float | None = None, *, bootstrap: str | None = None
    ) -> WorkflowStatus | None:
        """Return RUNNING, FINISHED, FAULTED, CANCELLED or PARKED; None when never started."""
        try:
            reply = await self._ask(instance_id, "query", timeout, bootstrap)
        except WorkflowNotFound:
            return None
        if reply.status is None:
            return None
        return WorkflowStatus(reply.status)

    async def signal(
        self, instance_id: str, name: str, payload: Any = None, *,
        timeout: float | None = None, bootstrap: str | None = None,
    ) -> None:
        """Deliver signal ``name`` with ``payload``; returns once it is stored.

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            WorkflowEnded: The instance has ended.
            LimitError: ``instance_id`` or ``name`` is empty, not valid UTF-8 or longer
                than ``MAX_ID_BYTES``, or the payload is larger than ``MAX_PAYLOAD_BYTES``
                (``tidings.core.limits``; raised before producing).
            SchemaError: The payload cannot be stored.
            TimeoutError: No answer in time (the signal may still be stored later).
        """
        _check_id(instance_id)
        check_id(name, "signal name")
        try:
            text = self.definition.codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"the payload of signal {name!r} cannot be stored: {exc}") from exc
        check_payload_size(text.encode(), f"the payload of signal {name!r}")
        reply = await self._ask(instance_id, "signal", timeout, bootstrap, payload=text.encode(), signal=name)
        if reply.answer == "ended":
            raise WorkflowEnded(f"{self.name} {instance_id!r} has ended and takes no signal {name!r}")
        if reply.answer == "rejected":
            raise SchemaError(f"the worker rejected signal {name!r}: {reply.reason}")

    async def cancel(self, instance_id: str, *, timeout: float | None = None, bootstrap: str | None = None) -> None:
        """Request cancellation (a second request, or one to an ended instance, changes nothing).

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            TimeoutError: No answer in time (the request may still be applied later).
        """
        await self._ask(instance_id, "cancel", timeout, bootstrap)

    def client(self, bootstrap: str | None = None) -> WorkflowClient:
        """Return this workflow's client for ``bootstrap`` (made on first use)."""
        address = bootstrap or self.app.bootstrap()
        if address not in self._clients:
            self._clients[address] = WorkflowClient(address, inbox=self.topics.inbox, replies=self.topics.replies)
        return self._clients[address]

    def close(self, bootstrap: str | None = None) -> None:
        """Close this handle's clients: the one for ``bootstrap``, or every one.

        A closed client is forgotten, so a later call makes a new one.
        """
        addresses = list(self._clients) if bootstrap is None else [bootstrap]
        for address in addresses:
            client = self._clients.pop(address, None)
            if client is not None:
                client.close()

    async def _ask(self, instance_id: str, kind: str, timeout: float | None, bootstrap: str | None, **fields: Any) -> Any:
        _check_id(instance_id)
        client = self.client(bootstrap)
        wait = self.app.command_timeout if timeout is None else timeout
        try:
            reply = await client.ask(client.request(instance_id, kind, **fields), wait)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"no answer from workflow {self.name!r} about {instance_id!r} within {wait} s; "
                "is a worker running? (`tidings worker MODULE:APP`)"
            ) from None
        if reply.answer == "not_found":
            raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
        return reply

    # -- the hosting protocol (the worker side) -----------------------------------------

    def topic_specs(self) -> list[TopicSpec]:
        """Every topic this workflow needs (and the app's shared dead-letter topic)."""
        partitions = self.app.partitions
        topics = self.topics
        return [
            spec_for("inbox", topics.inbox, partitions=partitions),
            spec_for("journal", topics.journal, partitions=partitions),
            spec_for("outcomes", topics.outcomes, partitions=partitions),
            spec_for("status", topics.status, partitions=partitions),
            spec_for("replies", topics.replies, partitions=partitions),
            spec_for("deadletter", topics.deadletter, partitions=partitions),
        ]

    @property
    def kind(self) -> str:
        return "workflow"

    def open(self, runtime: Runtime) -> WorkflowAgent:
        """Open the store and return the agent that runs this workflow in a worker."""
        store = WorkflowStore(runtime.store_path(self.kind, self.name))
        return WorkflowAgent(
            self.definition, topics=self.topics, store=store, runtime=runtime, cache_size=self.cache_size
        )


def declare_workflow(app: App, name: str | Callable[..., Any] | None = None, **options: Any) -> Any:
    """Return the decorator ``@app.workflow(name)`` applies to ``async def body(ctx, input)``.

    Args:
        app: The App the workflow belongs to.
        name: The stored name (a topic segment); default: the body's ``__name__``.
            ``@app.workflow`` without parentheses passes the body here.
        **options: ``input_type``, ``result_type`` (default: the body's annotations) and
            ``cache_size`` (live instances a worker keeps in memory; default 10,000).

    Raises:
        DefinitionError: listing every problem with the body or the options.
    """
    if callable(name):
        return declare_workflow(app, None, **options)(name)
    unknown = sorted(set(options) - {"input_type", "result_type", "cache_size"})
    if unknown:
        from ..errors import DefinitionError

        raise DefinitionError(f"workflow {name!r}", [f"unknown option {option!r}" for option in unknown])

    def decorate(body: Callable[..., Any]) -> WorkflowHandle:
        definition = define_workflow(
            name or str(getattr(body, "__name__", "")),
            body,
            input_type=options.get("input_type"),
            result_type=options.get("result_type"),
        )
        handle = WorkflowHandle(app, definition, cache_size=options.get("cache_size", 10_000))
        app.host(handle)
        return handle

    return decorate


def workflow_named(app: App, name: str) -> WorkflowHandle:
    """Return the handle of the workflow ``name`` declared in ``app``.

    Raises:
        LookupError: ``app`` declares no such workflow (the message lists the known ones).
    """
    workflows = [hosted for hosted in app.hosted if isinstance(hosted, WorkflowHandle)]
    for handle in workflows:
        if handle.name == name:
            return handle
    known = ", ".join(sorted(h.name for h in workflows)) or "none"
    raise LookupError(f"app {app.name!r} has no workflow {name!r}; known: {known}")


def _check_id(instance_id: str) -> None:
    # LimitError is a ValueError and a SchemaError: raised before anything is produced.
    check_id(instance_id, "instance_id")
