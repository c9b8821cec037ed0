"""The saga agent's RocksDB store: an ended saga keeps only its last record."""

from __future__ import annotations

from pathlib import Path

from tidings.codec import avro
from tidings.core.saga_records import SagaJournalEntry
from tidings.shell.kinds.saga.agent import SagaStore
from tidings.shell.runtime.rocks import prefixed


def _entry(saga_id: str, seq: int, *, ended: bool = False) -> tuple[int, SagaJournalEntry, bytes]:
    record = SagaJournalEntry(saga="transfer", saga_id=saga_id, seq=seq, entered_at_ms=1_000 + seq,
                              transition="stop" if ended else "handle", state=b'{"n": %d}' % seq,
                              ended=ended)
    return 0, record, avro.encode(record)


def _journal_keys(store: SagaStore) -> list[bytes]:
    return [key for key, _ in prefixed(store._db, b"j/")]  # noqa: SLF001 - what the store keeps


def test_an_end_deletes_the_journal_records_stored_before_and_those_of_its_own_batch(tmp_path: Path) -> None:
    store = SagaStore(tmp_path / "store")
    try:
        store.write([_entry("t-1", 1), _entry("t-1", 2), _entry("t-2", 1)], {0: 3})
        # t-1 ends with seq 3 and 4 in one batch (a state entered and left at once); t-2 goes on.
        store.write([_entry("t-1", 3), _entry("t-1", 4, ended=True)], {0: 5})

        assert [(r.seq, r.ended) for r in store.records("t-1")] == [(4, True)]
        assert store.has("t-1", 2) and store.has("t-1", 9)  # an ended saga has every seq
        assert store.running(0) == ["t-2"]
        # Only t-2's record is left: t-1's stored ones and the one put in the ending batch are gone.
        assert len(_journal_keys(store)) == 1
        assert [r.seq for r in store.records("t-2")] == [1]
        assert store.journal_offset(0) == 5
    finally:
        store.close()


def test_an_id_that_is_a_prefix_of_another_keeps_the_other_s_records(tmp_path: Path) -> None:
    store = SagaStore(tmp_path / "store")
    try:
        store.write([_entry("t", 1), _entry("t-1", 1), _entry("t-1", 2)], {0: 3})
        store.write([_entry("t", 2, ended=True)], {0: 4})

        assert [r.seq for r in store.records("t-1")] == [1, 2]
        assert [r.ended for r in store.records("t")] == [True]
    finally:
        store.close()
