"""Continue-as-new: a run ends and the same instance id starts afresh, with an empty journal.

``await ctx.continue_as_new(input)`` raises ``ContinueAsNew`` in the body (a BaseException, so
an ``except Exception`` in the body does not swallow it); when it leaves the body the
interpreter calls ``continue_run``. That journals, in one decision:

1. ``ContinuedAsNew(seq, at, input, run)``: the old run's last record, produced by the body
   (replay checks it);
2. ``Started(seq + 1, input, ..., run=run)``: the new run's start, with the parent, trace and
   JSON-outcome flags of the old one;
3. one ``SignalReceived`` / ``UpdateReceived`` per signal and update the old run had stored and
   not taken (new seqs, same names, payloads, ids and callers), so none is lost and none is
   given twice: the old ones go with their run.

and returns the ``DropRun`` effect: once the new start is stored, the shell tombstones the old
run's records. Seqs go on counting across runs (the new start is at the old run's last seq
+ 1), so a tombstone never hits a key of the new run.

The pure rule every reader applies (``current_run``): an instance's history is its journal
from its last *legitimate* ``Started``: right after a ``ContinuedAsNew`` of the same run and
input, ending the run before it (run - 1), and followed by all the ``carried`` signals and
updates the ``ContinuedAsNew`` counts. Records before it are a run the shell has not finished
tombstoning (a crash between the new start and the tombstones): they are skipped and dropped
again. A new run cut short (a crash wrote part of its batch) is no run yet: the old run is
replayed through its continue, whose records match the stored ones and journal the rest. A
``Started`` that follows anything else is not a new run, so a malformed or forged start
cannot make an instance skip runs or forget its history: replay finds a second start and
parks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidings.core.workflow.effects import DropRun
from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.journal import ContinuedAsNew, Ended, JournalRecord, SignalReceived, Started, UpdateReceived
from tidings.core.workflow.requests import StepRequest
from tidings.core.workflow.signal_ids import remember_signal_id
from tidings.core.workflow.updates import AnswerUpdate
from tidings.errors import ContinueAsNew

if TYPE_CHECKING:
    from tidings.core.workflow.interpreter import WorkflowInstance


class ContinueAsNewRequest(StepRequest[None]):
    """``await ctx.continue_as_new(input)``: raises ``ContinueAsNew`` where it is awaited."""

    __slots__ = ("input",)

    def __init__(self, input: Any) -> None:
        self.input = input

    def __await__(self) -> Any:
        raise ContinueAsNew(self.input)
        yield  # pragma: no cover - makes this a generator; never reached


_CARRIED = (SignalReceived, UpdateReceived)


def run_of(record: Started) -> int:
    """The run number a ``Started`` begins (1 for a first start, stored as None)."""
    return record.run or 1


def current_run(records: Sequence[JournalRecord]) -> tuple[Sequence[JournalRecord], DropRun | None]:
    """The records of the instance's current run, and the earlier run's records to drop (if any).

    Only a ``Started`` that follows a ``ContinuedAsNew`` of the same run and input, at the seq
    right before, begins a run; the journal of the last such start is the instance's history.
    """
    for index in range(len(records) - 1, 0, -1):
        record = records[index]
        if type(record) is not Started:
            continue
        before = records[index - 1]
        if not (type(before) is ContinuedAsNew and before.seq == record.seq - 1  # type: ignore[union-attr]
                and before.run == run_of(record) and before.input == record.input):  # type: ignore[union-attr]
            return records, None  # a start that begins no run: replay parks on it
        ended = next((r for r in reversed(records[:index - 1]) if type(r) is Started), None)
        if ended is not None and run_of(ended) != before.run - 1:  # type: ignore[arg-type, union-attr]
            return records, None  # a run that does not follow the one it ends: parks
        count = before.carried or 0  # type: ignore[union-attr]
        carried = records[index + 1:index + 1 + count]
        if len(carried) < count or any(
                type(r) not in _CARRIED or r.seq != record.seq + n for n, r in enumerate(carried, 1)):
            # The new run's records were cut short by a crash (one batch, written in part):
            # replay the old run through its continue, which journals the rest again.
            return records, None
        return records[index:], DropRun(records[0].seq, before.seq)
    return records, None


def continue_run(instance: WorkflowInstance, new_input: Any) -> None:
    """The body raised ``ContinueAsNew(new_input)``: journal the next run's start and begin it."""
    definition = instance.definition
    now = instance._now
    if instance._cancel_requested:
        # A cancel requested in this run wins: a new run would not know of it and run on.
        instance._end(Ended(instance._next_seq, "cancelled", now))
        return
    try:
        text, _ = definition.codec.convert(new_input, definition.input_type)
    except Exception as exc:  # noqa: BLE001 - a validator of the input type is user code
        error = StepError.of_exception(
            ErrorKind.NOT_RETRYABLE, exc,
            f"continue_as_new: the new input does not fit the workflow's input type {definition.input_type!r}: ")
        instance._end(Ended(instance._next_seq, "faulted", now, error=error))
        return
    first = instance._run_start
    run = instance._run_number + 1
    # Replaying a journal whose last record is this one (its Started was never stored), the
    # stored record matches and the Started below is journaled live.
    signals = [s for queue in (instance._signals or {}).values() for s in queue]
    book = instance._updates
    pending_updates = [u for queue in (book.queues.values() if book is not None else ()) for u in queue]
    # An update the run took and never answered cannot be answered by the next run (it has no
    # UpdateCall for it): its callers hear "ended", as when an instance ends first.
    queued = {u.update_id for u in pending_updates}
    unanswered = [] if book is None or instance._replay is not None else [
        AnswerUpdate(update_id, "ended", reply) for update_id, reply in book.pending.items() if update_id not in queued]
    continued = instance._record(ContinuedAsNew(instance._next_seq, now, text, run, len(signals) + len(pending_updates)))
    parent = instance._parent
    started = Started(
        instance._next_seq, text, now,
        None if parent is None else parent.workflow, None if parent is None else parent.instance_id,
        None if parent is None else parent.path, True if instance._outcome_json else None,
        None if parent is None else parent.token, instance._traceparent, run,
    )
    last = continued.seq  # the stored one's: replaying, the records made here are matched, not kept
    instance._reset_for_run()
    instance._apply_stored(instance._record(started))
    # Carried in the order they arrived: a body that takes them in turn sees them as before.
    for signal in sorted(signals, key=lambda s: s.seq):
        carried = instance._record(SignalReceived(instance._next_seq, signal.name, signal.payload, signal.at,
                                                  signal.signal_id))
        if signal.signal_id is not None:  # a repeat sent to the new run stores nothing either
            instance._signal_ids = remember_signal_id(instance._signal_ids, signal.signal_id)
        instance._apply_stored(carried)
    for update in sorted(pending_updates, key=lambda u: u.seq):
        carried_update = instance._record(UpdateReceived(
            instance._next_seq, update.name, update.payload, update.at, update.update_id,
            update.reply_to, update.request_id, update.reply_json))
        instance._apply_stored(carried_update)
    instance._effects.extend(unanswered)
    instance._effects.append(DropRun(first, last))
