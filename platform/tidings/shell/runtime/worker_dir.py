"""What a worker keeps in its data directory about itself, beside the kinds' stores.

With ``processing_guarantee="exactly_once"`` the worker needs two things from it:

- **a stable transactional id.** A transaction left open by a killed worker blocks every
  ``read_committed`` reader of the partitions it wrote until it is aborted. The worker that
  restarts on the same data directory registers the same ``transactional.id``, which
  aborts it at once (``init_transactions``), instead of after the transaction timeout.
  The id is ``{app}-{instance id}`` for a static member, else a random id kept here.
- **whether the last run ended cleanly.** The kinds write RocksDB once a batch's records
  are acknowledged, before its transaction commits; a worker that dies in between (a
  SIGKILL, a fenced zombie, an aborted transaction) leaves RocksDB holding writes Kafka
  threw away. Like Kafka Streams under exactly-once, a worker that did not stop cleanly
  drops its stores at start; each kind rebuilds them from its journal, which holds only
  committed records.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

_ID_FILE = "transactional-id"
_CLEAN_FILE = "stopped-cleanly"


class WorkerDir:
    """A worker's data directory (``stores/`` holds the kinds' RocksDB stores)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def transactional_id(self, app: str, instance_id: str | None) -> str:
        """Return this worker's ``transactional.id``: the same on every restart."""
        if instance_id:
            return f"{app}-{instance_id}"
        file = self.path / _ID_FILE
        if not file.exists():
            self.path.mkdir(parents=True, exist_ok=True)
            file.write_text(f"{app}-{uuid.uuid4().hex}")
        return file.read_text().strip()

    def drop_stores_unless_clean(self) -> bool:
        """Drop the stores if the last run did not stop cleanly; return whether it did so.

        Call before any store opens. The clean mark is consumed: a run that dies before
        ``mark_clean`` leaves none for the next one.
        """
        clean = self.path / _CLEAN_FILE
        stores = self.path / "stores"
        was_clean = clean.exists()
        clean.unlink(missing_ok=True)
        if was_clean or not stores.exists():
            return False
        log.warning("the last run of this worker did not stop cleanly: dropping its stores in %s; "
                    "they are rebuilt from the journals, which hold only committed records", stores)
        shutil.rmtree(stores)
        return True

    def mark_clean(self) -> None:
        """Record that every write of this run is committed and the stores match Kafka."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / _CLEAN_FILE).write_text("")
