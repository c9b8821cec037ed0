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
