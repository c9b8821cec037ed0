"""The worker process's garbage collector: what start-up built is frozen, full collections are rare.

CPython frees almost everything by reference counting; its cyclic collector only finds what
that cannot (a few hundred objects in a burst of 10,000 runs). But a *full* collection walks
every live object, and it is triggered by the heap's growth: in a burst, with thousands of
instances, futures and records in flight, each took ~0.1 s, six to eight per 10,000 runs.
Measured on this machine (10,000 one-activity runs at once, four pairs): 1.0–1.4 s of the
worker's 4.7–6.1 s of CPU were full collections, none of which found anything to free.

So, once the app is loaded:

- ``gc.freeze()`` moves what the imports, the app and its definitions built (~50,000
  objects, alive for the process's life) out of every collection;
- the oldest generation is collected after ``FULL_EVERY`` collections of the middle one
  instead of 10. Young cycles are still collected as often as before (generations 0 and
  1 keep their thresholds), and CPython's own rule still skips a full collection until
  the objects that survived since the last one are a quarter of the heap.

Cycles that live long enough to reach the oldest generation wait longer to be freed: at
the middle generation's pace at idle (seconds apart), that is minutes, not never.
"""

from __future__ import annotations

import gc

#: Collections of generation 1 between two of generation 2 (CPython's default: 10).
FULL_EVERY = 100


def settle() -> None:
    """Freeze what exists now and make full collections rare (see the module docstring)."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_EVERY)
