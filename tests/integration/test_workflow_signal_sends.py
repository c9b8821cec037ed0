"""ctx.signal on a real broker: a body signals another workflow's instance once, across a SIGKILL."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tidings import App, Finished, WorkflowStatus
from tidings.codec import avro
from tidings.core.workflow import SignalReceived, StepKind, StepStarted
from tidings.core.records import DeadLetter
from tidings.core.workflow_records import WorkflowInbox, WorkflowJournalEntry, WorkflowReply
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.workflow_apps import Calls
from tests.workers import Workers
from tests.workflow_workers import WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


def _journal(bootstrap: str, app: App, workflow: str, instance_id: str) -> list[object]:
    entries = [avro.decode_as(r.value, WorkflowJournalEntry)
               for r in read_topic(bootstrap, app.workflow_handle(workflow).topics.journal)]
    return [e.record for e in entries if e.instance_id == instance_id]


def _signals_sent(bootstrap: str, app: App, signal_id: str) -> list[WorkflowInbox]:
    records = [avro.decode_as(r.value, WorkflowInbox)
               for r in read_topic(bootstrap, app.workflow_handle("collector").topics.inbox)]
    return [r for r in records if r.kind == "signal" and r.signal_id == signal_id]


def test_a_body_signals_another_workflow_and_the_answers_raise_at_the_step(
    workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    collector, signaller = workflow_app.workflow_handle("collector"), workflow_app.workflow_handle("signaller")

    async def scenario() -> list[object]:
        await collector.start("c-1", 1)
        await signaller.start("s-1", ["collector", "c-1"])
        sent = await signaller.value("s-1", 60)
        collected = await collector.value("c-1", 60)
        # The collector has ended now: a second signaller gets WorkflowEnded at its step.
        await signaller.start("s-2", ["collector", "c-1"])
        await signaller.start("s-3", ["collector", "nobody"])
        await signaller.start("s-4", ["no-such-workflow", "c-1"])
        return [sent, collected, *[await signaller.value(i, 60) for i in ("s-2", "s-3", "s-4")]]

    sent, collected, ended, missing, unknown = asyncio.run(scenario())
    assert (sent, collected) == ("sent", [7]), workflow_workers.log_tail()
    assert ended == "ended: collector 'c-1' has ended and takes no more signals"
    assert missing == "not found: no collector 'nobody' was started"
    assert unknown == ("failed: no-such-workflow 'c-1' rejected signal 'item': "
                       "this app declares no workflow 'no-such-workflow'")
    # The worker goes on after the hostile step: another signal is delivered.
    asyncio.run(collector.start("c-2", 1))
    asyncio.run(signaller.start("s-5", ["collector", "c-2"]))
    assert asyncio.run(collector.value("c-2", 60)) == [7]


def test_a_sigkill_after_the_step_started_sends_again_and_the_target_stores_the_signal_once(
    kafka_bootstrap: str, app_id: str, tmp_path: Path, guarantee: str, calls: Calls,
    workflow_app: App, workflow_workers: WorkflowWorkers,
) -> None:
    collector, signaller = workflow_app.workflow_handle("collector"), workflow_app.workflow_handle("signaller")
    first = workflow_workers.start("full-1")

    async def collecting() -> None:
        await collector.start("c-1", 2)
        while await collector.status("c-1") is not WorkflowStatus.RUNNING:
            await asyncio.sleep(0.05)

    asyncio.run(collecting())
    first.stop()
    # A worker that does not host the collector: the signal goes out and nobody answers it.
    senders = Workers(kafka_bootstrap, app_id, tmp_path / "senders", app_spec="tests.integration.workflow_apps:app",
                      env={"TEST_CALLS_DIR": str(calls.directory), "TEST_WITHOUT_COLLECTOR": "1"},
                      guarantee=guarantee)
    try:
        sender = senders.start("senders")
        asyncio.run(signaller.start("s-1", ["collector", "c-1"]))
        signal_id = "signaller/s-1/1"

        def step_started_and_signal_sent() -> bool:
            records = _journal(kafka_bootstrap, workflow_app, "signaller", "s-1")
            assert any(isinstance(r, StepStarted) and r.kind == StepKind.SIGNAL_SEND for r in records)
            assert len(_signals_sent(kafka_bootstrap, workflow_app, signal_id)) == 1
            return True

        assert_eventually(step_started_and_signal_sent, timeout=60, interval=0.2)
        sender.kill()  # SIGKILL: the step started, the signal is out, no answer journaled
    finally:
        senders.kill_all()
    # A full worker recovers the signaller (it sends the signal again, same id) and the collector.
    workflow_workers.start("full-2")
    assert asyncio.run(signaller.value("s-1", 90)) == "sent", workflow_workers.log_tail()
    asyncio.run(collector.signal("c-1", "item", 8))
    assert asyncio.run(collector.value("c-1", 60)) == [7, 8]  # 7 once, though it was sent twice
    sent = _signals_sent(kafka_bootstrap, workflow_app, signal_id)
    assert len(sent) == 2 and {r.request_id for r in sent} == {signal_id}
    received = [r for r in _journal(kafka_bootstrap, workflow_app, "collector", "c-1")
                if isinstance(r, SignalReceived)]
    assert [(r.payload, r.signal_id) for r in received] == [("7", signal_id), ("8", None)]


def test_forged_answers_on_the_replies_topic_are_dead_lettered_and_the_worker_goes_on(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    collector, signaller = workflow_app.workflow_handle("collector"), workflow_app.workflow_handle("signaller")
    # First a real round trip: the worker reads its replies partitions from their end as of
    # when it took them, so forged records produced before that would never be read.
    asyncio.run(collector.start("c-8", 1))
    asyncio.run(signaller.start("s-8", ["collector", "c-8"]))
    assert asyncio.run(signaller.value("s-8", 60)) == "sent", workflow_workers.log_tail()
    replies = signaller.topics.replies
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    forged = [
        WorkflowReply("signaller/never-started/1", "never-started", "accepted", 1),  # no such instance
        WorkflowReply("someone-else/s-1/1", "s-1", "accepted", 1),  # names no step of this workflow
        WorkflowReply("signaller/s-1/not-a-path", "s-1", "accepted", 1),
    ]
    for reply in forged:
        producer.produce(replies, avro.encode(reply), reply.request_id.encode())
    producer.flush(10)

    def dead_letters() -> list[DeadLetter]:
        letters = [avro.decode(r.value) for r in read_topic(kafka_bootstrap, f"{workflow_app.name}.deadletter")]
        assert len(letters) == 3
        return letters  # type: ignore[return-value]

    letters = assert_eventually(dead_letters, timeout=60)
    assert {letter.error_type for letter in letters} == {"SchemaError"}
    assert all(letter.source_topic == replies for letter in letters)
    # The worker goes on: a real signal step is answered.
    asyncio.run(collector.start("c-9", 1))
    asyncio.run(signaller.start("s-9", ["collector", "c-9"]))
    assert asyncio.run(signaller.value("s-9", 60)) == "sent", workflow_workers.log_tail()
    assert asyncio.run(collector.value("c-9", 60)) == [7]
