"""Reading a worker's Prometheus endpoint from a test (``TIDINGS_METRICS_PORT``)."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    """A port nobody listens on now (the worker binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> Samples:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    """The sample of ``metric`` with exactly ``labels``; 0 when there is none."""
    return samples.get((metric, frozenset(labels.items())), 0.0)


def metric(port: int, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``, scraped now."""
    return sum(v for (sample, have), v in scrape(port).items()
               if sample == name and all((k, w) in have for k, w in labels.items()))
