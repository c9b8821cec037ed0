"""Signal ids: a signal a sender names is stored once per instance.

A sender that may repeat a signal (a projection that handles a re-delivered event, a
program that retries after a lost answer) names it with an id (``Signal.id``). The
instance journals the id on its ``SignalReceived`` and stores no second signal with an id
its journal holds: the repeat is answered ``accepted`` and changes nothing.

The set is the journal's, not a window: every id of every ``SignalReceived`` the instance
holds, rebuilt from the journal on replay. So the rule holds however late the repeat comes
(a projection rebuilt from the start re-sends signals of months ago), and it costs one
string per named signal, no more than the journal itself holds. Signals without an id
cost nothing and are never de-duplicated. An ended instance keeps no set: it answers every
signal ``ended``, a repeat too, whether it is in memory or known only by its stored end.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidings.core.workflow.journal import JournalRecord, SignalReceived


def stored_signal_ids(records: Iterable[JournalRecord]) -> set[str] | None:
    """Return the ids of the signals in ``records``; None when there is none (no set kept)."""
    ids = {r.signal_id for r in records if type(r) is SignalReceived and r.signal_id is not None}
    return ids or None


def remember_signal_id(ids: set[str] | None, signal_id: str) -> set[str]:
    """Return ``ids`` with ``signal_id`` added, making the set on the first id."""
    if ids is None:
        return {signal_id}
    ids.add(signal_id)
    return ids
