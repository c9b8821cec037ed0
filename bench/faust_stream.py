"""Reference: how many records/s a Faust agent takes when it does nothing with them.

Until issue 11 every command crossed Faust's per-record delivery (fetcher -> conductor ->
channel queue -> stream); the worker now takes records from its own consumer
(``tidings.shell.runtime.intake``). This row keeps measuring Faust's path alone, taking records
without automatic acks and acking each as the worker did, with a handler that does
nothing: the reference the issue sets the fed aggregate row against.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .raw_kafka import _produce_all, fresh_topic
from .report import Progress

_APP = '''
import os, time, faust
from tidings.shell.runtime.connection import KafkaConnection

records = int(os.environ["BENCH_RECORDS"])
# Faust's aiokafka clients get the connection's security settings (TIDINGS_KAFKA_*,
# TIDINGS_KAFKA_CONFIG), translated as the bench's own aiokafka clients get them.
kafka = KafkaConnection.resolve().aiokafka("consumer")
credentials = None
if kafka["security_protocol"].startswith("SASL"):
    credentials = faust.SASLCredentials(username=kafka["sasl_plain_username"], password=kafka["sasl_plain_password"],
                                        mechanism=kafka["sasl_mechanism"], ssl_context=kafka.get("ssl_context"))
elif kafka["security_protocol"] == "SSL":
    credentials = faust.SSLCredentials(kafka["ssl_context"])
app = faust.App(os.environ["BENCH_GROUP"], broker="kafka://" + kafka["bootstrap_servers"], broker_credentials=credentials,
                store="memory://", web_enabled=False, consumer_auto_offset_reset="earliest",
                broker_max_poll_records=2000, stream_buffer_maxsize=8000)
topic = app.topic(os.environ["BENCH_TOPIC"], key_type=bytes, value_type=bytes,
                  key_serializer="raw", value_serializer="raw")
seen = [0, 0.0]

def done():
    # Faust redirects stdout into its log: hand the figure over in a file instead.
    with open(os.environ["BENCH_RESULT"], "w") as out:
        out.write(str(time.perf_counter() - seen[1]))
    os._exit(0)

if os.environ.get("BENCH_TAKE"):
    # Faust's batch API: take() still makes an event per record, then hands lists over.
    @app.agent(topic)
    async def consume(stream):
        async for values in stream.take(2000, within=0.005):
            if not seen[1]:
                seen[1] = time.perf_counter()
                seen[0] -= 2000
            seen[0] += len(values)
            if seen[0] >= records:
                done()

async def consume_each(stream):
    stream = stream.noack()
    async for event in stream.events():
        if not seen[1]:
            seen[1] = time.perf_counter()
            seen[0] -= 2000  # the first records include the group join: start the clock here
        seen[0] += 1
        await stream.ack(event)
        if seen[0] >= records:
            done()

if not os.environ.get("BENCH_TAKE"):
    app.agent(topic)(consume_each)
'''


def noop_agent_seconds(
    bootstrap: str, records: int, *, workdir: Path, progress: Progress, take: bool = False
) -> float:
    """Return the seconds a no-op Faust agent takes for ``records`` records (first to last).

    The first records include the group join, so the clock starts at the first batch.
    With ``take``, the agent takes lists with ``stream.take(2000, within=5 ms)`` (automatic
    acks) instead of acking each event.
    """
    topic = fresh_topic(bootstrap, "faust")
    _produce_all(bootstrap, topic, records)
    module = workdir / "bench_faust_noop.py"
    result = workdir / "bench_faust_noop.seconds"
    result.unlink(missing_ok=True)
    module.write_text(_APP)
    what = "Faust no-op agent (take)" if take else "Faust no-op agent"
    progress(f"{what}: consuming {records:,} records")
    env = {
        **os.environ,
        "TIDINGS_BOOTSTRAP": bootstrap,
        "BENCH_TOPIC": topic,
        "BENCH_GROUP": f"bench-faust-{uuid.uuid4().hex[:8]}",
        # The first batch starts the clock; count the rest.
        "BENCH_RECORDS": str(records - 2000),
        "BENCH_RESULT": str(result),
        "PYTHONPATH": os.pathsep.join([str(workdir), os.environ.get("PYTHONPATH", "")]),
        **({"BENCH_TAKE": "1"} if take else {}),
    }
    started = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-m", "faust", "-A", "bench_faust_noop", "worker", "-l", "warn",
         "--without-web"],
        env=env, cwd=workdir, capture_output=True, text=True, timeout=300,
    )
    if result.exists():
        seconds = float(result.read_text())
        progress(f"{what}: {(records - 2000) / seconds:,.0f} records/s "
                 f"({time.perf_counter() - started:.0f} s with start-up)")
        return seconds
    raise RuntimeError(f"the Faust no-op agent printed no result:\n{finished.stderr[-2000:]}")


def intake_noop_seconds(bootstrap: str, records: int, *, progress: Progress) -> float:
    """Return the seconds the worker's intake (``tidings.shell.runtime.intake``) takes to feed
    ``records`` records to a ``start`` that does nothing, through the same pipelined
    ``Feed`` and offset commits the worker uses (first batch to last, as above)."""
    import asyncio

    from tidings.shell.runtime.connection import KafkaConnection
    from tidings.shell.runtime.intake import Intake

    topic = fresh_topic(bootstrap, "intake")
    _produce_all(bootstrap, topic, records)
    progress(f"tidings intake doing nothing: consuming {records:,} records")
    seen = [0, 0.0]

    async def measure() -> float:
        done = asyncio.get_running_loop().create_future()

        async def start(batch: list[object]) -> object:
            if not seen[1]:
                seen[1] = time.perf_counter()
                seen[0] -= 2000
            seen[0] += len(batch)
            if seen[0] >= records - 2000 and not done.done():
                done.set_result(time.perf_counter() - seen[1])

            async def finish() -> None:
                return None

            return finish

        intake = Intake(KafkaConnection.of(bootstrap), f"bench-intake-{uuid.uuid4().hex[:8]}",
                        on_assigned=lambda partitions: None, on_revoked=lambda partitions: None)
        intake.add([topic], start, "bench")
        await intake.start()
        try:
            return await asyncio.wait_for(done, 300)
        finally:
            await intake.stop()

    seconds = asyncio.run(measure())
    progress(f"tidings intake doing nothing: {(records - 2000) / seconds:,.0f} records/s")
    return seconds
