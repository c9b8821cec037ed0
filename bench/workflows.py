"""One-activity workflows through one worker: start -> outcome throughput and idle latency.

Standalone (not yet a row of ``python -m bench``)::

    .venv/bin/python -m bench.workflows [--count 2000] [--latency 200]

Uses ``TIDINGS_BOOTSTRAP`` when set, else starts a local broker. The worker runs
``tests.integration.workflow_apps:app`` in a child process; its ``one-activity`` workflow
calls one sync activity and returns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from tidings.broker import LocalBroker
from tidings.shell.topics import apply_topics
from tidings.testing.processes import WorkerProcess

ROOT = Path(__file__).resolve().parent.parent


async def _measure(handle, count: int, latency_runs: int) -> tuple[float, list[float]]:  # noqa: ANN001
    await handle.start("warm-up", 0)
    await handle.value("warm-up", 120)
    latencies = []
    for n in range(latency_runs):
        began = time.perf_counter()
        await handle.start(f"lat-{n}", n)
        await handle.value(f"lat-{n}", 60)
        latencies.append((time.perf_counter() - began) * 1000)
    began = time.perf_counter()
    await asyncio.gather(*(handle.start(f"thr-{n}", n) for n in range(count)))
    await asyncio.gather(*(handle.value(f"thr-{n}", 300) for n in range(count)))
    return count / (time.perf_counter() - began), latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--latency", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = None
        bootstrap = os.environ.get("TIDINGS_BOOTSTRAP")
        if not bootstrap:
            broker = LocalBroker(Path(tmp) / "kafka")
            bootstrap = broker.start()
        app_id = f"bench{uuid.uuid4().hex[:8]}"
        os.environ.update(TIDINGS_BOOTSTRAP=bootstrap, TEST_APP_ID=app_id, TEST_CALLS_DIR=str(Path(tmp) / "calls"))
        from tests.integration.workflow_apps import build

        app = build(app_id, Path(tmp) / "calls")
        apply_topics(bootstrap, app.topic_specs(), out=lambda line: None)
        worker = WorkerProcess("tests.integration.workflow_apps:app", bootstrap=bootstrap,
                               data_dir=Path(tmp) / "w1", log_path=Path(tmp) / "w1.log",
                               env={"TEST_APP_ID": app_id}, cwd=ROOT).start()
        handle = next(h for h in app.hosted if h.name == "one-activity")
        try:
            rate, latencies = asyncio.run(_measure(handle, args.count, args.latency))
        finally:
            handle.close()
            worker.stop()
            if broker is not None:
                broker.stop()
    quantiles = statistics.quantiles(latencies, n=100)
    print("| workload | measured |")
    print("|---|---|")
    print(f"| one-activity workflows, start -> outcome ({args.count} at once) | {rate:,.0f} /s |")
    print(f"| one-activity latency on an idle worker, p50 / p99 ({args.latency} runs) | "
          f"{quantiles[49]:.1f} / {quantiles[98]:.1f} ms |")


if __name__ == "__main__":
    main()
