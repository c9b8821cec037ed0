"""The worker's collector policy (runtime/collector.py): start-up frozen, full collections rare."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tidings.shell.runtime import collector


@pytest.fixture
def restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_settle_freezes_what_exists_and_makes_full_collections_rare(restored: None) -> None:
    gc.unfreeze()
    young, middle, _ = gc.get_threshold()
    kept = [[n] for n in range(1_000)]  # objects alive at start-up, as the app's are
    collector.settle()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == (young, middle, collector.FULL_EVERY)
    assert collector.FULL_EVERY > 10  # CPython's default, which the worker replaces


def test_young_cycles_are_still_collected(restored: None) -> None:
    collector.settle()

    class Node:
        other: object = None

    def cycle() -> None:
        a, b = Node(), Node()
        a.other, b.other = b, a

    for _ in range(10):
        cycle()
    assert gc.collect(0) + gc.collect(1) >= 20  # not frozen, not left to the rare full ones


def test_a_worker_settles_the_collector_before_faust_starts(restored: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Worker.run``: the app loaded (its Faust app built), the collector is settled before
    the worker joins its group and takes records."""
    from types import SimpleNamespace

    from tidings.shell.runtime import worker as worker_module

    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    seen: list[tuple[int, tuple[int, int, int]]] = []

    class FakeFaustWorker:
        def __init__(self, *_: object, **__: object) -> None:
            pass

        def execute_from_commandline(self) -> None:
            seen.append((gc.get_freeze_count(), gc.get_threshold()))

    monkeypatch.setattr(worker_module.faust, "Worker", FakeFaustWorker)
    fake = SimpleNamespace(metrics_port=None, _apply_when_kafka_answers=lambda apply: None,
                           _faust_app=lambda: object(), close=lambda: None, _hard_stop=None)
    worker_module.Worker.run(fake)  # type: ignore[arg-type]
    (frozen, thresholds), = seen
    assert frozen > 0 and thresholds == (700, 10, collector.FULL_EVERY)
