"""What the bench prints: progress while it runs, then the machine and one table.

The table is Markdown, so a run's output can be pasted into ``docs/benchmarks.md`` as is.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table.

    Attributes:
        workload: What was measured.
        measured: The figure, formatted (e.g. ``5,210 /s``).
        target: Issue 11's target where it sets one, else SPEC §10's, or ``—``.
        reference: The raw Kafka figure it compares to, or ``—``.
    """

    workload: str
    measured: str
    target: str = "—"
    reference: str = "—"


class Progress:
    """Prints timestamped progress lines to stderr, so stdout keeps only the report."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def __call__(self, line: str) -> None:
        print(f"[{time.monotonic() - self._start:6.1f}s] {line}", file=sys.stderr, flush=True)


def rate(count: float, seconds: float, unit: str = "/s") -> str:
    """Format ``count / seconds`` as ``12,345 /s``."""
    return f"{count / seconds:,.0f} {unit}" if seconds > 0 else "n/a"


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile of ``samples`` (``fraction`` in 0..1)."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[index]


def latency(samples_s: Sequence[float]) -> str:
    """Format p50 / p99 of ``samples_s`` (seconds) in milliseconds."""
    return f"{percentile(samples_s, 0.50) * 1000:.1f} / {percentile(samples_s, 0.99) * 1000:.1f} ms"


def p50(samples_s: Sequence[float]) -> float:
    """The median of ``samples_s``."""
    return percentile(samples_s, 0.50)


#: Issue 11: the exactly-once rows may be at most this much worse than at-least-once.
EXACTLY_ONCE_TARGET = "≤ 10 % below at-least-once"
EXACTLY_ONCE_LATENCY_TARGET = "p50 ≤ 2 × at-least-once"


def versus(exactly_once: float, at_least_once: float, *, higher_is_better: bool = True,
           than: str = "at-least-once") -> str:
    """How an exactly-once figure compares with its at-least-once one (or any figure with
    the one named ``than``), in words.

    Throughput (``higher_is_better``): ``"12 % below at-least-once"`` (or ``above``);
    latency: ``"12 % above at-least-once"`` means slower.
    """
    if not (at_least_once > 0 and exactly_once == exactly_once):  # 0 or NaN
        return "n/a"
    change = (exactly_once - at_least_once) / at_least_once
    if higher_is_better:
        return f"{abs(change):.0%} {'below' if change < 0 else 'above'} {than}".replace("%", " %")
    return f"{abs(change):.0%} {'above' if change > 0 else 'below'} {than}".replace("%", " %")


def ratio(numerator: float, denominator: float) -> str:
    """``numerator / denominator`` as ``0.55 ×``."""
    return f"{numerator / denominator:.2f} ×" if denominator > 0 else "n/a"


def machine(
    kafka_version: str, bootstrap: str, started_broker: bool, load_before: float
) -> list[str]:
    """Describe where the figures come from.

    Args:
        kafka_version: The broker's Apache Kafka version, as far as known.
        bootstrap: The broker's address.
        started_broker: Whether this run started the broker.
        load_before: The 1-minute load average when the run began: anything else busy on
            a 2-core machine takes CPU from the broker, the worker and the client alike.
    """
    import confluent_kafka

    try:
        import aiokafka

        aio = aiokafka.__version__
    except ImportError:  # pragma: no cover - aiokafka ships with faust-streaming
        aio = "absent"
    broker = "started by the bench" if started_broker else "from TIDINGS_BOOTSTRAP"
    version = confluent_kafka.version()
    version = version[0] if isinstance(version, tuple) else version
    return [
        f"machine: {os.cpu_count()} cores (nproc), {_memory()}, {platform.platform()}",
        f"python: {platform.python_implementation()} {platform.python_version()}",
        f"kafka: Apache Kafka {kafka_version}, one local broker at {bootstrap} ({broker})",
        f"clients: confluent-kafka {version} "
        f"(librdkafka {confluent_kafka.libversion()[0]}), aiokafka {aio}",
        f"load average (1 min): {load_before:.2f} before the run, "
        f"{os.getloadavg()[0]:.2f} after it",
    ]


def table(rows: Sequence[Row]) -> str:
    """Render ``rows`` as a Markdown table with aligned columns."""
    header = Row("workload", "measured", "target (issue 11, else SPEC §10)", "raw Kafka reference")
    cells = [(r.workload, r.measured, r.target, r.reference) for r in (header, *rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(4)]

    def render(line: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([render(cells[0]), rule, *(render(line) for line in cells[1:])])


def _memory() -> str:
    try:
        with open("/proc/meminfo") as meminfo:
            kib = int(meminfo.readline().split()[1])
        return f"{kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        return "RAM unknown"


@contextmanager
def alone(prefix: str) -> Iterator[tuple[str, Path, ExitStack, Progress]]:
    """For a bench module run by itself (``python -m bench.sagas``): a work directory, the
    broker (``TIDINGS_BOOTSTRAP``, else a local one started here and stopped on the way out),
    the stack its processes' stops go on, and the progress printer."""
    progress = Progress()
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        bootstrap = os.environ.get("TIDINGS_BOOTSTRAP")
        if not bootstrap:
            from tidings.broker import LocalBroker

            broker = LocalBroker(workdir / "kafka", on_progress=progress)
            bootstrap = broker.start()
            stack.callback(broker.stop)
        yield bootstrap, workdir, stack, progress
        progress("stopping what the bench started")


def print_report(rows: Sequence[Row], notes: Sequence[str], profile: Path | None = None) -> None:
    """Print the table, the notes under it, and the worker's profile if one was written."""
    print(table(rows))
    for line in notes:
        print(line)
    if profile is not None:
        import pstats

        print(f"\nworker profile (cProfile, main thread), top by own time; stats in {profile}")
        pstats.Stats(str(profile)).sort_stats("tottime").print_stats(25)
