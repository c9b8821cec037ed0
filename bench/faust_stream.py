"""Reference: how many records/s a Faust agent takes when it does nothing with them.

Until issue 11 every command crossed Faust's per-record delivery (fetcher -> conductor ->
channel queue -> stream); the worker now takes records from its own consumer
(``tidings.shell.intake``). This row keeps measuring Faust's path alone, taking records
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

records = int(os.environ["BENCH_RECORDS"])
app = faust.App(os.environ["BENCH_GROUP"], broker="kafka://" + os.environ["TIDINGS_BOOTSTRAP"],
                store="memory://", web_enabled=False, consumer_auto_offset_reset="earliest",
                broker_max_poll_records=2000, stream_buffer_maxsize=8000)
topic = app.topic(os.environ["BENCH_TOPIC"], key_type=bytes, value_type=bytes,
                  key_serializer="raw", value_serializer="raw")
seen = [0, 0.0]

@app.agent(topic)
async def consume(stream):
    stream = stream.noack()
    async for event in stream.events():
        if not seen[1]:
            seen[1] = time.perf_counter()
            seen[0] -= 2000  # the first records include the group join: start the clock here
        seen[0] += 1
        await stream.ack(event)
        if seen[0] >= records:
            # Faust redirects stdout into its log: hand the figure over in a file instead.
            with open(os.environ["BENCH_RESULT"], "w") as out:
                out.write(str(time.perf_counter() - seen[1]))
            os._exit(0)
'''


def noop_agent_seconds(bootstrap: str, records: int, *, workdir: Path, progress: Progress) -> float:
    """Return the seconds a no-op Faust agent takes for ``records`` records (first to last).

    The first records include the group join, so the clock starts at the first batch.
    """
    topic = fresh_topic(bootstrap, "faust")
    _produce_all(bootstrap, topic, records)
    module = workdir / "bench_faust_noop.py"
    result = workdir / "bench_faust_noop.seconds"
    result.unlink(missing_ok=True)
    module.write_text(_APP)
    progress(f"Faust no-op agent: consuming {records:,} records")
    env = {
        **os.environ,
        "TIDINGS_BOOTSTRAP": bootstrap,
        "BENCH_TOPIC": topic,
        "BENCH_GROUP": f"bench-faust-{uuid.uuid4().hex[:8]}",
        # The first batch starts the clock; count the rest.
        "BENCH_RECORDS": str(records - 2000),
        "BENCH_RESULT": str(result),
        "PYTHONPATH": os.pathsep.join([str(workdir), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-m", "faust", "-A", "bench_faust_noop", "worker", "-l", "warn",
         "--without-web"],
        env=env, cwd=workdir, capture_output=True, text=True, timeout=300,
    )
    if result.exists():
        seconds = float(result.read_text())
        progress(f"Faust no-op agent: {(records - 2000) / seconds:,.0f} records/s "
                 f"({time.perf_counter() - started:.0f} s with start-up)")
        return seconds
    raise RuntimeError(f"the Faust no-op agent printed no result:\n{finished.stderr[-2000:]}")
