"""The bench's view of a worker's own Prometheus metrics (issue 11: "the bench reads its CPU and
latency split from these metrics rather than from ad-hoc timers").

Every bench worker is started with ``TIDINGS_METRICS_PORT`` on a free port (``worker_env``).
Right before and right after a measured phase the bench scrapes ``/metrics`` (``scrape``);
the difference of the two (``Phase``) says what the worker's main thread did in that phase:
records taken in, how large its batches were, how long deciding and committing them took,
and what the worker itself measured of command → reply and workflow start → outcome. The
process-wide CPU figures (``aggregates.CpuMeter``) stay: they count every thread; these split
the main thread's time between decide and commit.

docs/operations.md ("Metrics") lists what each metric means.
"""

from __future__ import annotations

import math
import socket
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

#: (sample name, sorted label pairs) -> value, as scraped.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    """A TCP port nothing listens on right now (the worker binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def worker_env(port: int, *, exactly_once: bool) -> dict[str, str]:
    """The environment a bench worker needs: its metrics port and its processing guarantee."""
    return {"TIDINGS_METRICS_PORT": str(port),
            "TIDINGS_PROCESSING_GUARANTEE": "exactly_once" if exactly_once else "at_least_once"}


def scrape(port: int, *, timeout: float = 5.0, attempts: int = 3) -> Samples:
    """GET ``http://127.0.0.1:PORT/metrics`` and return every sample.

    A scrape that fails (the worker busy past ``timeout`` on a 2-core machine) is tried again;
    the last failure is raised.

    Raises:
        OSError: The worker does not answer.
    """
    url = f"http://127.0.0.1:{port}/metrics"
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                text = response.read().decode()
            break
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


@dataclass(frozen=True, slots=True)
class Phase:
    """What the worker's metrics moved by between two scrapes (``after - before``)."""

    delta: Samples = field(default_factory=dict)

    @classmethod
    def between(cls, before: Samples, after: Samples) -> Phase:
        # Gauges would make no sense as differences; nothing here reads them.
        return cls({key: value - before.get(key, 0.0) for key, value in after.items()})

    def total(self, name: str, **labels: str) -> float:
        """Sum of ``name``'s samples whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(value for (sample, pairs), value in self.delta.items()
                   if sample == name and wanted <= set(pairs))

    def quantile(self, name: str, fraction: float, **labels: str) -> float:
        """``histogram_quantile`` of the histogram ``name`` over this phase, in its unit.

        As Prometheus computes it: the bucket the rank falls in, linear inside it; NaN when
        the phase observed nothing. Only as fine as the buckets (docs/operations.md).
        """
        wanted = set(labels.items())
        buckets: dict[float, float] = {}
        for (sample, pairs), value in self.delta.items():
            if sample == f"{name}_bucket" and wanted <= set(pairs):
                bound = float(dict(pairs)["le"])
                buckets[bound] = buckets.get(bound, 0.0) + value
        return _quantile(sorted(buckets.items()), fraction)

    def mean(self, name: str, **labels: str) -> float:
        """``sum / count`` of the histogram ``name`` (NaN when it observed nothing)."""
        count = self.total(f"{name}_count", **labels)
        return self.total(f"{name}_sum", **labels) / count if count else float("nan")


def _quantile(cumulative: list[tuple[float, float]], fraction: float) -> float:
    if not cumulative or cumulative[-1][1] <= 0:
        return float("nan")
    rank = fraction * cumulative[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in cumulative:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # above the largest finite bucket: its bound, as Prometheus does
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


class Scraper:
    """Scrapes one worker around measured phases: ``b = scraper.before()``, run, ``scraper.since(b)``."""

    def __init__(self, port: int) -> None:
        self.port = port

    def before(self) -> Samples:
        """Scrape right before a phase."""
        return scrape(self.port)

    def since(self, before: Samples) -> Phase:
        """Scrape right after a phase; return what moved since ``before``."""
        return Phase.between(before, scrape(self.port))


def describe(phase: Phase, wall_s: float, *, kind: str, exactly_once: bool,
             workflows: Iterable[str] = ()) -> str:
    """One note line: what the worker's main thread did in a phase, from its own metrics.

    Args:
        phase: The metrics' movement over the phase.
        wall_s: The phase's wall-clock seconds as the bench measured them (for rates).
        kind: ``"aggregate"`` (adds the worker-side command → reply p50 / p99) or
            ``"workflow"`` (adds the start → outcome mean of ``workflows``).
        exactly_once: Add the transactions committed per second (and any aborted).
        workflows: The workflow names whose start → outcome the phase ran.
    """
    records_in = phase.total("tidings_records_in_total")
    decided = phase.total("tidings_batch_records_sum")
    batches = phase.total("tidings_batch_records_count")
    commits = phase.total("tidings_commit_seconds_count")
    parts = [
        f"records in {records_in:,.0f}",
        f"mean batch {decided / batches:,.1f} records" if batches else "no batches",
        f"decide {phase.total('tidings_decide_seconds_sum') / decided * 1e6:,.0f} µs/record"
        if decided else "decide n/a",
        f"commit {phase.total('tidings_commit_seconds_sum') / commits * 1e3:,.2f} ms/batch"
        if commits else "commit n/a",
    ]
    cpu = phase.total("process_cpu_seconds_total")
    if cpu and records_in:
        # The whole process (every thread), per record taken in: steadier than a rate on a
        # shared 2-core machine, so the figure to compare changes by.
        parts.append(f"worker CPU {cpu / records_in * 1e6:,.0f} µs/record in")
    # Each walks every live object (docs/operations.md, "The worker's garbage collector").
    full = phase.total("python_gc_collections_total", generation="2")
    parts.append(f"full garbage collections {full:,.0f}")
    if kind == "aggregate":
        p50 = phase.quantile("tidings_command_reply_seconds", 0.50)
        p99 = phase.quantile("tidings_command_reply_seconds", 0.99)
        parts.append(f"worker-side command → reply p50 / p99 {p50 * 1e3:,.1f} / {p99 * 1e3:,.1f} ms")
    else:
        inputs = by_input(phase)
        if len(inputs) > 1:
            parts.append("decided per input: " + ", ".join(f"{key} {count:,.0f}"
                                                            for key, count in inputs.items()))
        for name in workflows:
            mean = phase.mean("tidings_workflow_run_seconds", workflow=name)
            parts.append(f"{name} start → outcome mean {mean * 1e3:,.1f} ms")
    if exactly_once:
        committed = phase.total("tidings_transactions_total", outcome="committed")
        aborted = phase.total("tidings_transactions_total", outcome="aborted")
        parts.append(f"{committed / wall_s:,.0f} transactions committed/s" if wall_s > 0 else "n/a")
        timed = phase.total("tidings_transaction_commit_seconds_count")
        if timed:
            parts.append(f"a commit {phase.total('tidings_transaction_commit_seconds_sum') / timed * 1e3:,.1f} ms "
                         "(offsets and commit)")
        if aborted:
            parts.append(f"{aborted:,.0f} aborted")
    return ", ".join(parts)


def by_input(phase: Phase) -> Mapping[str, float]:
    """Records decided per input (``name/input``) over the phase, largest first."""
    counts: dict[str, float] = {}
    for (sample, pairs), value in phase.delta.items():
        if sample == "tidings_batch_records_sum" and value:
            labels = dict(pairs)
            key = f"{labels.get('name')}/{labels.get('input')}"
            counts[key] = counts.get(key, 0.0) + value
    return dict(sorted(counts.items(), key=lambda item: -item[1]))
