"""Parity: one scenario table through AppTestRuntime (in memory) and through a real worker on a
real broker, every answer and journal compared (issue 21, item 9).

The App is tests/parity_app.py: the bank's accounts, its transfer saga and balances projection,
and ``payout``, a workflow that runs an activity, sends to the accounts, waits for a signal
with a window (a timer), sends the transfer that starts the saga, sleeps and draws a guid.
Compared: each run's outcome, each workflow journal, every stored account event, each
transfer saga's journal, the balances view, and the ``onboarding`` orchestration's actions
(per instance and position) and outcomes. Times and the drawn guid are compared by
their role, not their value: a time becomes ``<time>`` (and the durations the body asked for,
the window and the nap, are checked on each side), the guid ``<guid>`` wherever it appears.
Everything else (event ids, command ids, saga ids, versions, payloads) is derived from the
step keys, so it must be equal as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from decimal import Decimal
from typing import Any

import pytest

from examples.bank.account import Open
from tidings import App
from tidings.codec import avro
from tidings.core.orchestration_records import OrchestrationActions, OrchestrationOutcome
from tidings.core.records import EventEnvelope
from tidings.core.workflow.journal import record_to_json
from tidings.shell.kinds.projection.views import ViewStore
from tidings.testing import AppTestRuntime, WorkerProcess, assert_eventually
from tidings.testing.topics import read_topic
from tests.parity_app import NAP, WINDOW, Payout

#: (instance id, the account it opens, the transfer's target, the signal it gets: None = none).
SCENARIOS: list[tuple[str, str, str, bool | None]] = [
    ("p-approved", "ann", "bob", True),      # the saga credits bob
    ("p-refunded", "cat", "nobody", True),   # bob's namesake is not open: the saga refunds cat
    ("p-declined", "dan", "bob", False),     # a signal that says no: no transfer
    ("p-silent", "eve", "bob", None),        # no signal: the window runs out
]
OPENED = [("bob", "open-bob")]  # accounts opened directly, with these command ids
TIME_KEYS = {"at", "due", "entered_at_ms", "timestamp_ms"}
MS = 1000


@pytest.fixture
def tidings_app_spec() -> str:
    return "tests.parity_app:build"


def order(account: str, target: str) -> Payout:
    return Payout(account=account, target=target, amount=Decimal(30))


def by_role(value: Any, guids: set[str]) -> Any:
    """``value`` with its times and drawn guids replaced by what they are."""
    if isinstance(value, dict):
        return {k: "<time>" if k in TIME_KEYS and isinstance(v, int) else by_role(v, guids) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [by_role(v, guids) for v in value]
    if isinstance(value, bytes):
        return by_role(value.decode(), guids)
    if isinstance(value, str):
        for guid in guids:
            value = value.replace(guid, "<guid>")
        return value
    return value


def durations(journal: list[dict[str, Any]]) -> dict[str, int]:
    """What each timed step asked for: its due time less its start, by path."""
    return {r["path"]: r["due"] - r["at"] for r in journal if r["type"] == "step_started" and r["due"] is not None}


def acted(records: list[OrchestrationActions], outcomes: list[OrchestrationOutcome]) -> dict[str, Any]:
    """The orchestration's actions per instance and position, and its outcomes (no timestamps)."""
    actions: dict[str, list[Any]] = {}
    for record in sorted(records, key=lambda r: (r.instance, r.position)):
        actions.setdefault(record.instance, []).append(
            [record.position, [[a.type, a.payload.decode()] for a in record.actions]])
    return {"actions": actions,
            "outcomes": {o.instance: [o.position, o.type, (o.payload or b"").decode()] for o in outcomes}}


def summary(outcomes: dict[str, Any], journals: dict[str, list[dict[str, Any]]], events: list[EventEnvelope],
            sagas: dict[str, list[Any]], view: dict[str, Any], orchestration: dict[str, Any]) -> dict[str, Any]:
    """Everything compared, by role; the asked-for durations checked on the way."""
    guids = {outcome["guid"] for outcome in outcomes.values()}
    asked = sorted([int(WINDOW.total_seconds() * MS), int(NAP.total_seconds() * MS)])
    for instance_id, journal in journals.items():
        assert sorted(durations(journal).values()) == asked, (instance_id, durations(journal))
    return by_role({
        "outcomes": outcomes,
        "journals": journals,
        "events": sorted((dataclasses.asdict(e) for e in events), key=lambda e: (e["aggregate_id"], e["version"])),
        "sagas": {saga_id: [dataclasses.asdict(r) for r in records] for saga_id, records in sagas.items()},
        "view": view,
        "orchestration": orchestration,
    }, guids)


def in_memory() -> dict[str, Any]:
    from tests.parity_app import build

    runtime = AppTestRuntime(build("parity"))
    payout = runtime.workflow("payout")
    for account, command_id in OPENED:
        runtime.send("account", account, Open(owner=account), command_id=command_id)
    for instance_id, account, target, _ in SCENARIOS:
        payout.start(instance_id, order(account, target))
    runtime.run_until_idle()
    for instance_id, _, _, approve in SCENARIOS:
        if approve is not None:
            payout.signal(instance_id, "approve", approve)
    runtime.advance(WINDOW + NAP)
    outcomes = {i: payout.value(i).model_dump(mode="json") for i, *_ in SCENARIOS}
    journals = {i: [record_to_json(r) for r in payout.journal(i)] for i, *_ in SCENARIOS}
    accounts = ["bob", *(a for _, a, _, _ in SCENARIOS)]
    events = [e for a in accounts for e in runtime.events("account", a)]
    sagas = {f"payout/{i}/5": runtime.saga_journal("transfer", f"payout/{i}/5") for i, *_ in SCENARIOS}
    records = [r for a in accounts for r in runtime.orchestration_actions("onboarding", a)]
    finished = [found for a in accounts if (found := runtime.orchestration_outcome("onboarding", a)) is not None]
    return summary(outcomes, journals, events, {k: v for k, v in sagas.items() if v},
                   dict(runtime.view("balances").items()), acted(records, finished))


def on_worker(app: App, worker: WorkerProcess, bootstrap: str, expected: dict[str, Any]) -> dict[str, Any]:
    payout = app.workflow_handle("payout")
    accounts = app.aggregates[0]
    transfer = app.sagas[0]
    client = app.client()

    async def waiting(instance_id: str) -> bool:
        # Signal once the body waits for it, as the in-memory run does (a signal stored
        # before the wait is journaled before the sends' results: another, valid, journal).
        journal = [record_to_json(r) for r in await payout.journal(instance_id)]
        return any(r["type"] == "step_started" and r["path"] == "4" for r in journal)

    async def scenario() -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, list[Any]]]:
        for account, command_id in OPENED:
            await client.send(accounts, account, Open(owner=account), command_id=command_id)
        for instance_id, account, target, _ in SCENARIOS:
            await payout.start(instance_id, order(account, target))
        for instance_id, _, _, approve in SCENARIOS:
            if approve is not None:
                for _ in range(120):
                    if await waiting(instance_id):
                        break
                    await asyncio.sleep(0.25)
                await payout.signal(instance_id, "approve", approve)
        outcomes = {i: (await payout.value(i, 60)).model_dump(mode="json") for i, *_ in SCENARIOS}
        journals = {i: [record_to_json(r) for r in await payout.journal(i)] for i, *_ in SCENARIOS}
        sagas: dict[str, list[Any]] = {}
        for instance_id, *_ in SCENARIOS:
            saga_id = f"payout/{instance_id}/5"
            for _ in range(120):  # the saga ends a moment after the workflow (its own commands)
                records = await transfer.journal(saga_id)
                if not records or records[-1].ended:
                    break
                await asyncio.sleep(0.25)
            if records:
                sagas[saga_id] = records
        return outcomes, journals, sagas

    outcomes, journals, sagas = asyncio.run(scenario())
    records = read_topic(bootstrap, accounts.topics.events)
    events = [avro.decode_as(r.value, EventEnvelope) for r in records if r.value]
    onboarding = app.declared("orchestration")[0].topics  # type: ignore[attr-defined]

    def orchestrated() -> dict[str, Any]:
        return acted([avro.decode_as(r.value, OrchestrationActions) for r in read_topic(bootstrap, onboarding.actions)],
                     [avro.decode_as(r.value, OrchestrationOutcome) for r in read_topic(bootstrap, onboarding.outcomes)])

    # The orchestration follows the events on its own (its router, its inbox): wait until it
    # has written as many records as the in-memory run holds, then compare what they say.
    def counts(found: dict[str, Any]) -> tuple[int, int]:
        return sum(len(v) for v in found["actions"].values()), len(found["outcomes"])

    assert_eventually(lambda: counts(orchestrated()) == counts(expected), timeout=30,
                      message="the orchestration did not write what the in-memory run did")
    worker.stop()
    store = ViewStore(app.projections[0].view_path(worker.data_dir), read_only=True)
    try:
        view = dict(store.view.items())
    finally:
        store.close()
    return summary(outcomes, journals, events, sagas, view, orchestrated())


def test_the_in_memory_runtime_answers_and_journals_as_a_worker_on_a_real_broker(
    tidings_app: App, tidings_worker: WorkerProcess, tidings_bootstrap: str
) -> None:
    memory_side = in_memory()
    worker_side = on_worker(tidings_app, tidings_worker, tidings_bootstrap, memory_side["orchestration"])
    print(f"\ncompared: {len(memory_side['journals'])} workflow journals "
          f"({sum(len(j) for j in memory_side['journals'].values())} records), {len(memory_side['events'])} events, "
          f"{len(memory_side['sagas'])} saga journals, {len(memory_side['view'])} view entries")
    for part in ("outcomes", "journals", "events", "sagas", "view", "orchestration"):
        assert memory_side[part] == worker_side[part], (
            f"{part} differ:\nin memory: {json.dumps(memory_side[part], indent=1, default=str)[:4000]}\n"
            f"worker:    {json.dumps(worker_side[part], indent=1, default=str)[:4000]}")
    assert set(memory_side["sagas"]) == {"payout/p-approved/5", "payout/p-refunded/5"}
    assert set(memory_side["orchestration"]["outcomes"]) == {"ann", "cat", "dan", "eve"}  # bob: only opened
