"""An activity that raises ``TimeoutError`` timed out, on a real worker as in the in-memory
runtime (issue 21, item 11): the same three workflows (tests/integration/timeout_apps.py) run
in a worker process and in ``WorkflowTestRuntime``, and their outcomes and journals compare.

The worker's threads (a sync call due now) used to count a ``TimeoutError`` as the attempt's
error, so a policy retrying only ``ValueError`` gave up where the runtime retried.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tidings import App, Faulted, Finished
from tidings.codec import avro
from tidings.core.workflow.journal import JournalRecord, StepAttemptFailed, StepFailed, record_type_name
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.testing import WorkerProcess, WorkflowTestRuntime
from tidings.testing.topics import read_topic
from tests.integration.timeout_apps import build

WORKFLOWS = ("score_sync", "score_async", "score_refused")


@pytest.fixture
def tidings_app_spec() -> str:
    return "tests.integration.timeout_apps:build"


def hosted_journal(bootstrap: str, topic: str, instance_id: str) -> list[JournalRecord]:
    entries = (avro.decode(stored.value or b"") for stored in read_topic(bootstrap, topic))
    return [e.record for e in entries if isinstance(e, WorkflowJournalEntry) and e.instance_id == instance_id]


def shape(outcome: Any, journal: list[JournalRecord]) -> tuple[Any, ...]:
    """What must agree: the outcome, the record types, and each failure's error type and kind."""
    value = outcome.value if isinstance(outcome, Finished) else (type(outcome).__name__, outcome.error.kind.value
                                                                 if isinstance(outcome, Faulted) else None)
    failures = [(record_type_name(r), r.error.type, r.error.kind) for r in journal
                if isinstance(r, (StepAttemptFailed, StepFailed))]
    return value, [record_type_name(r) for r in journal], failures


def test_a_timeout_error_is_a_timeout_on_the_worker_as_in_the_runtime(
    tidings_app: App, tidings_worker: WorkerProcess, tidings_bootstrap: str, tidings_runtime: WorkflowTestRuntime
) -> None:
    async def hosted() -> dict[str, Any]:
        for name in WORKFLOWS:
            await tidings_app.workflow_handle(name).start("order-17", "ABC")
        return {name: await tidings_app.workflow_handle(name).result("order-17", 60) for name in WORKFLOWS}

    outcomes = asyncio.run(hosted())
    on_worker = {name: shape(outcomes[name], hosted_journal(
        tidings_bootstrap, tidings_app.workflow_handle(name).topics.journal, "order-17")) for name in WORKFLOWS}

    in_memory = {}
    for handle in build("in-memory").workflows:
        registered = tidings_runtime.register(handle.definition)
        registered.start("order-17", "ABC")
        in_memory[handle.name] = shape(registered.result("order-17", timedelta(minutes=5)),
                                       registered.journal("order-17"))

    assert on_worker == in_memory, tidings_worker.log_tail()
    # Both retried the timed-out attempt although the policy retries only ValueError ...
    assert on_worker["score_sync"][0] == on_worker["score_async"][0] == 30
    assert on_worker["score_sync"][2] == [("step_attempt_failed", "TimeoutError", None)]
    # ... and gave up at once on an error it refuses.
    assert on_worker["score_refused"][0] == ("Faulted", "not_retryable")
