"""A transactional publisher: a worker's records and input offsets commit together, or not at all.

With ``processing_guarantee="exactly_once"`` a worker process writes through ONE
transactional confluent-kafka producer, shared by all its agents, in the KIP-447 style: the
input offsets go into the transaction with ``send_offsets_to_transaction`` and the consumer
group's metadata (member id, generation), so the group coordinator refuses them, and the
transaction with them, when the worker's generation is stale. A zombie that lost its
partitions but still writes can therefore make nothing visible to ``read_committed`` readers.

How the pieces move::

    send()  ──produce──▶ open transaction ◀── commit_offsets() / committed() register waiters
                             │
          committer task: send_offsets_to_transaction(merged offsets, group metadata now)
                          commit_transaction() ─▶ waiters resolve ─▶ begin_transaction()
                             │
    send() while a commit runs: held in order, produced as soon as the next one begins

librdkafka refuses ``produce`` between the start of a commit and the next
``begin_transaction``, hence the hold. Blocking transaction calls run in a thread, one at a
time; the event loop never waits on the broker.

An agent must register the offsets of an input in the same turn of the loop as the send of
the records that input produced (``send(...)`` then ``commit_offsets(...)`` before awaiting
anything else): a commit triggered by another agent in between would otherwise make the
records visible without the offsets, and a crash then would redo that input.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ...errors import BrokerError, Fenced, TransactionAborted
from .connection import KafkaConnection
from .io import Delivered, Outgoing
from .kafka import _Batch, produce_records, producer_config, sent_in_background, settle_future
from .threads import OwnThread

__all__ = ["GROUP_FENCING", "PRODUCER_FENCING", "Fenced", "TransactionAborted", "TransactionalPublisher"]

log = logging.getLogger(__name__)

#: Longest a transaction stays open with records nobody waits for (seconds). Longer than a
#: batch's decide-to-offsets time, so a batch's records and offsets mostly commit together.
MAX_OPEN_S: Final = 0.1


#: Errors of ``send_offsets_to_transaction`` that say the group moved on without us.
GROUP_FENCING: Final = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.FENCED_INSTANCE_ID,
    }
)

#: Errors that say another producer holds the transactional id (always fatal in librdkafka).
PRODUCER_FENCING: Final = frozenset(
    {KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED}
)


class TransactionalPublisher:
    """Produces in Kafka transactions that also commit the consumed offsets (exactly-once).

    Offers the ``Publisher`` seam of ``tidings.shell.runtime.io`` (``send``, ``publish``,
    ``publish_later``, ``close``) with ``ConfluentPublisher``'s semantics, plus
    ``commit_offsets`` and ``committed``, which return once a transaction carrying the
    caller's records has committed. ``commits`` and ``aborts`` count transactions, for metrics.

    Args:
        connection: The Kafka cluster and its client properties.
        transactional_id: Stable per worker data dir: ``start`` aborts what a previous
            process with the same id left open, instead of leaving it for the broker's
            transaction timeout (which holds back every ``read_committed`` reader).
        group_metadata: Returns the input consumer's ``consumer_group_metadata()``; called
            at each commit, so the generation checked is the current one.
        fence_offsets: ``fence_offsets(metadata)``: offsets to send with a transaction that
            carries none of its own (an activity's result, a reply): the group's committed
            offsets of partitions this worker owned under ``metadata``. Kafka checks the
            generation only when offsets come with the transaction, so without them a
            zombie's transaction with no input would commit.
        on_fenced: Called (on the loop) with the ``Fenced`` error when Kafka fences us.
        commit_interval_ms: The shortest time between two commits; waiters arriving
            meanwhile share the next transaction.
        transaction_timeout_ms: ``transaction.timeout.ms``: the broker aborts a transaction
            left open longer (a crashed worker's).
        on_outcome: Called with ``"committed"`` or ``"aborted"`` and the commit's seconds
            (None when unknown) after each transaction (``Metrics.transaction``).
    """

    def __init__(
        self,
        connection: KafkaConnection,
        *,
        transactional_id: str,
        group_metadata: Callable[[], object],
        fence_offsets: Callable[[object], Mapping[tuple[str, int], int]] | None = None,
        on_fenced: Callable[[BaseException], None],
        commit_interval_ms: float = 0.0,
        transaction_timeout_ms: int = 10_000,
        on_outcome: Callable[[str, float | None], None] | None = None,
    ) -> None:
        config = producer_config()
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = transaction_timeout_ms
        # A transaction begun while the last one's markers are still being written gets
        # CONCURRENT_TRANSACTIONS and is retried after retry.backoff.ms: librdkafka's 100 ms
        # default put a 100 ms step into the exactly-once latency tail.
        config["retry.backoff.ms"] = 5
        config["retry.backoff.max.ms"] = 100
        self._producer = connection.producer(**config)
        # Its own thread: in asyncio's shared pool the commit queued behind readers' polls.
        self._calls = OwnThread("tidings-txn-calls")
        self._group_metadata = group_metadata
        self._fence_offsets = fence_offsets
        self._on_fenced = on_fenced
        self._interval = commit_interval_ms / 1000.0
        self._call_timeout = max(transaction_timeout_ms / 1000.0, 1.0)
        #: Transactions committed and aborted since start (read by metrics).
        self.commits = 0
        self.aborts = 0
        self._on_outcome = on_outcome
        # Sends may produce directly only while a transaction is open and no commit runs.
        self._open = False
        self._held: list[tuple[Sequence[Outgoing], _Batch, asyncio.Future[list[Delivered]]]] = []
        # What the open transaction carries: waiters to resolve, offsets to send with it.
        self._waiters: list[asyncio.Future[None]] = []
        self._offsets: dict[tuple[str, int], int] = {}
        self._produced = 0
        # The sends of the open transaction, acknowledged or not (see ``_finish``).
        self._sends: list[asyncio.Future[list[Delivered]]] = []
        # librdkafka refused a produce: the open transaction can only be aborted.
        self._doomed = False
        self._failure: BrokerError | None = None  # fatal: every later call fails with it
        self._closing = False
        self._in_call = False  # a blocking transaction call runs in a thread
        self._last_commit = 0.0
        self._wake: asyncio.Event | None = None
        self._committer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Future[Any]] = set()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tidings-txn-producer", daemon=True)
        self._thread.start()

    async def start(self, timeout: float = 60.0) -> None:
        """Register the transactional id, abort what a predecessor left open, begin a transaction.

        Records sent before ``start`` are held and go into the first transaction.

        Raises:
            BrokerError: Kafka did not register the id within ``timeout``.
        """
        self._wake = asyncio.Event()
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self._call(self._producer.init_transactions, self._call_timeout)
                break
            except KafkaException as exc:
                error = _error_of(exc)
                # The coordinator (and its __transaction_state topic) may still be starting.
                if error is None or not error.retriable() or time.monotonic() > deadline:
                    raise BrokerError(f"registering the transactional producer failed: {exc}") from exc
                await asyncio.sleep(0.1)
        await self._call(self._producer.begin_transaction)
        self._release_held()
        self._committer = asyncio.create_task(self._commit_loop(), name="tidings-txn-committer")
        if self._waiters:
            self._wake.set()

    def send(self, records: Sequence[Outgoing]) -> asyncio.Future[list[Delivered]]:
        """Enqueue ``records`` in order into the open (or the next) transaction.

        The future resolves to their positions once the broker acknowledges them, which is
        before the transaction commits: await ``commit_offsets`` or ``committed`` for that.
        A record Kafka refuses before queueing fails only the future (``RecordRejected``).
        A record the broker refuses fails the future the same way and also dooms the
        transaction (Kafka aborts a transaction with a failed write): its waiters get
        ``TransactionAborted``.

        Raises:
            BrokerError: The producer is unusable (``Fenced``, a fatal error, closed).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Delivered]] = loop.create_future()
        if self._failure is not None:
            raise self._failure
        if self._closing:
            raise BrokerError("the transactional publisher is closed")
        if not records:
            future.set_result([])
            return future
        batch = _Batch(loop, future, len(records))
        if self._open and not self._held:
            self._produce(records, batch, future)
        else:
            # A commit is running (or we have not started): keep the order for the next one.
            self._held.append((records, batch, future))
        return future

    @property
    def in_commit(self) -> bool:
        """Whether sends are held now (a commit runs, or ``start`` has not finished)."""
        return not self._open

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        return await self.send(records)

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        """Produce ``records`` and commit them soon, without waiting; failures are logged.

        A transaction commits only when something waits for it, so these records register
        a waiter of their own: they become visible with the next commit.
        """
        future = self.send(records)
        self._background.add(future)
        future.add_done_callback(partial(sent_in_background, self._background))
        commit = self.committed()
        self._background.add(commit)
        commit.add_done_callback(partial(sent_in_background, self._background))

    def commit_offsets(self, offsets: Mapping[tuple[str, int], int]) -> asyncio.Future[None]:
        """Add consumed offsets to the transaction; resolve once it has committed.

        ``offsets`` maps ``(topic, partition)`` to the next offset to consume there. They are
        registered at the call (not at the first await), into the same transaction as every
        record sent before; offsets of several callers merge, the highest per partition.

        Returns:
            A future that resolves once a transaction carrying these offsets and every record
            sent before the call has committed.

        Raises (through the future):
            TransactionAborted: That transaction was aborted; nothing of it is visible.
            Fenced: The group moved on or another producer took the id over.
        """
        waiter = self._waiter()
        if not waiter.done():
            for key, offset in offsets.items():
                if offset > self._offsets.get(key, -1):
                    self._offsets[key] = offset
        return waiter

    def committed(self) -> asyncio.Future[None]:
        """Resolve once every record sent before the call is in a committed transaction.

        For writes that consumed nothing (an activity's result, a reply). Raises through the
        future as ``commit_offsets`` does.
        """
        return self._waiter()

    def _outcome(self, outcome: str, seconds: float | None = None) -> None:
        if self._on_outcome is not None:
            self._on_outcome(outcome, seconds)

    def close(self, timeout: float = 10.0) -> None:
        """Abort what nobody waits for, fail what waits, stop (blocks up to ``timeout``).

        Synchronous, as the runtime's close hooks are: a transaction still open here holds
        records whose inputs were not committed, so aborting it is right; they are redone.
        Use ``aclose`` from a coroutine to let pending commits finish first.
        """
        if self._closing and self._committer is None:
            return
        self._closing = True
        if self._committer is not None:
            self._committer.cancel()
            self._committer = None
        closed = TransactionAborted("the transactional publisher closed before the transaction committed")
        self._fail_waiters(self._take_waiters(), closed)
        self._fail_held(closed)
        if self._open and self._failure is None and not self._in_call and self._produced:
            try:
                self._producer.abort_transaction(timeout)
                self.aborts += 1
                self._outcome("aborted")
            except KafkaException as exc:
                # The next process with this id aborts it at start, or the broker at timeout.
                log.warning("aborting the open transaction at close failed: %s", exc)
        self._open = False
        self._stopping.set()
        self._thread.join(timeout)
        self._calls.close()

    async def aclose(self, timeout: float = 10.0) -> None:
        """Let the waiting commits finish (up to ``timeout``), then ``close``."""
        deadline = time.monotonic() + timeout
        while (self._waiters or self._in_call) and self._failure is None and self._committer is not None:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.005)
        if self._in_call:
            # Abort only between blocking calls; librdkafka refuses a conflicting one.
            while self._in_call and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        self.close(max(deadline - time.monotonic(), 1.0))

    # -- internals -------------------------------------------------------------------------

    def _waiter(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._failure is not None:
            waiter.set_exception(self._failure)
            return waiter
        if self._closing:
            waiter.set_exception(BrokerError("the transactional publisher is closed"))
            return waiter
        self._waiters.append(waiter)
        if self._wake is not None:
            self._wake.set()
        return waiter

    def _produce(
        self, records: Sequence[Outgoing], batch: _Batch, future: asyncio.Future[list[Delivered]]
    ) -> None:
        """Produce into the open transaction; a refused produce dooms or kills it."""
        try:
            produce_records(self._producer, records, batch)
        except BrokerError as exc:
            error = _error_of(exc.__cause__)
            if error is not None and (error.fatal() or error.code() == KafkaError._FATAL):
                failure = self._fatal(exc.__cause__, "producing")
                settle_future(future, None, failure)
                raise failure from exc.__cause__
            if error is not None and error.code() == KafkaError._STATE:
                # A write of this transaction failed at the broker, so librdkafka takes no
                # more until it is aborted. The records before this one went into it.
                self._doom()
                settle_future(future, None, TransactionAborted(f"the transaction is failing: {exc}"))
                return
            raise
        if not self._produced and not self._waiters and self._wake is not None:
            # Nothing may wait for these records (an activity's result, journaled with no
            # input offsets): commit them within MAX_OPEN_S anyway, well inside the
            # transaction timeout, after which the broker would abort them.
            asyncio.get_running_loop().call_later(MAX_OPEN_S, self._wake.set)
        self._produced += len(records)
        self._sends.append(future)

    def _doom(self) -> None:
        self._doomed = True
        self._open = False
        if self._wake is not None:
            self._wake.set()

    def _release_held(self) -> None:
        """Produce the sends held during a commit, in order, into the transaction just begun."""
        self._open = True
        while self._held and self._open:
            records, batch, future = self._held.pop(0)
            try:
                self._produce(records, batch, future)
            except BrokerError as exc:
                # The send already returned: its future carries the failure.
                settle_future(future, None, exc)

    def _take_waiters(self) -> list[asyncio.Future[None]]:
        waiters, self._waiters = self._waiters, []
        return waiters

    @staticmethod
    def _fail_waiters(waiters: list[asyncio.Future[None]], error: BaseException) -> None:
        for waiter in waiters:
            settle_future(waiter, None, error)

    def _fail_held(self, error: BaseException) -> None:
        held, self._held = self._held, []
        for _, _, future in held:
            settle_future(future, None, error)

    async def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run one blocking transaction call in a thread (librdkafka allows one at a time)."""
        self._in_call = True
        try:
            return await self._calls.run(function, *args)
        finally:
            self._in_call = False

    async def _commit_loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not (self._waiters or self._doomed or self._produced):
                continue
            # At most one commit per interval: waiters arriving meanwhile share it.
            pause = self._last_commit + self._interval - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                await self._commit()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the committer die silently: waiters would hang
                log.exception("the transaction committer failed")
                failure = self._fatal(exc, "committing")
                self._fail_waiters(self._take_waiters(), failure)
            if self._failure is not None:
                self._fail_waiters(self._take_waiters(), self._failure)
                self._fail_held(self._failure)
                return
            if self._waiters or self._doomed:
                self._wake.set()

    async def _commit(self) -> None:
        """Commit the open transaction with its waiters' offsets, then begin the next."""
        waiters, offsets = self._take_waiters(), self._offsets
        self._offsets = {}
        produced, self._produced = self._produced, 0
        sends, self._sends = self._sends, []
        self._last_commit = time.monotonic()
        if not self._doomed and not produced and not offsets:
            # An empty transaction: nothing to make visible, no round trip to pay.
            for waiter in waiters:
                settle_future(waiter, None, None)
            return
        self._open = False  # from here librdkafka refuses produce: hold sends
        begun = False
        if self._doomed:
            failure: BrokerError | None = TransactionAborted("a write of the transaction failed, so Kafka aborts it")
        else:
            failure, begun = await self._finish(offsets, sends)
        if failure is None:
            self.commits += 1
            self._outcome("committed", time.monotonic() - self._last_commit)
            for waiter in waiters:
                settle_future(waiter, None, None)
        else:
            group_fenced = isinstance(failure, Fenced) and self._failure is None
            failure = await self._abort(failure)
            self._fail_waiters(waiters, failure)
            if group_fenced and failure is not self._failure:
                # Told after the abort: nothing of the zombie's transaction is pending now.
                self._notify(failure)
        if self._failure is not None:
            return
        if not begun:
            try:
                await self._call(self._producer.begin_transaction)
            except KafkaException as exc:
                self._fatal(exc, "beginning a transaction")
                return
        self._doomed = False
        self._release_held()

    async def _finish(
        self, offsets: Mapping[tuple[str, int], int], sends: list[asyncio.Future[list[Delivered]]]
    ) -> tuple[BrokerError | None, bool]:
        """Send the offsets and commit; return why the transaction must be aborted, if so, and
        whether the next transaction is begun already.

        The usual commit is one call in the transaction thread: the offsets, the commit and
        the next begin. Each hop back to the event loop waits for the batch it is deciding
        (measured under load: a commit of four hops took 58 ms, most of it waiting for the
        loop). The calls stay separate when the records are not all acknowledged after the
        offsets' round trip: ``commit_transaction`` flushes first, and librdkafka's flush
        sleeps in 10 ms polls while our thread serves the delivery reports it waits for
        (an idle commit took 11 ms instead of 1), so those acks are awaited on the loop.
        Retriable errors are retried until the transaction timeout.
        """
        deadline = time.monotonic() + self._call_timeout
        sent = self._offsets_to_send(offsets)
        if isinstance(sent, BrokerError):
            return sent, False
        stage, error = await self._call(self._commit_at_once, sent)
        if stage == "begun":
            return None, True
        if stage == "committed":
            return None, False  # begin failed: the caller begins again (and says why if it fails)
        if stage == "offsets":
            assert error is not None
            failure = self._classify(error, "sending the offsets", deadline)
            if failure is not None:
                return failure, False
            await asyncio.sleep(0.05)
            acked = asyncio.ensure_future(_settled(sends, self._call_timeout))
            try:
                failure = await self._send_offsets(offsets, deadline)
            finally:
                await acked
            if failure is not None:
                return failure, False
        elif stage == "acks":
            await _settled(sends, self._call_timeout)
        elif error is not None:  # the commit failed
            failure = self._classify(error, "committing", deadline)
            if failure is not None:
                return failure, False
            await asyncio.sleep(0.05)
        while True:
            try:
                await self._call(self._producer.commit_transaction, self._call_timeout)
                return None, False
            except KafkaException as exc:
                failure = self._classify(exc, "committing", deadline)
                if failure is not None:
                    return failure, False
            await asyncio.sleep(0.05)

    def _commit_at_once(self, sent: tuple[list[TopicPartition], object] | None) -> tuple[str, KafkaException | None]:
        """In the transaction thread: the offsets, the commit and the next begin, as far as
        they go. Returns the stage reached: ``"begun"`` (all done), ``"committed"`` (the
        begin failed), ``"acks"`` (offsets sent, records still unacknowledged: nothing
        committed), or the stage that raised (``"offsets"``, ``"commit"``) with its error."""
        producer = self._producer
        try:
            if sent is not None:
                producer.send_offsets_to_transaction(sent[0], sent[1], self._call_timeout)
        except KafkaException as exc:
            return "offsets", exc
        # No new produce can come in: sends are held while a commit runs. ``len`` counts the
        # records queued, in flight, and acknowledged with their report not yet served.
        if len(producer) > 0:
            return "acks", None
        try:
            producer.commit_transaction(self._call_timeout)
        except KafkaException as exc:
            return "commit", exc
        try:
            producer.begin_transaction()
        except KafkaException:
            return "committed", None
        return "begun", None

    def _offsets_to_send(self, offsets: Mapping[tuple[str, int], int]) -> tuple[list[TopicPartition], object] | None | BrokerError:
        """The offsets to send with the transaction and the group metadata now; None for none."""
        try:
            metadata = self._group_metadata()
        except Exception as exc:  # the consumer is gone: we cannot prove we own the input
            return self._group_fenced(exc, "reading the consumer group's metadata")
        sent = offsets or (self._fence_offsets(metadata) if self._fence_offsets else {})
        if not sent:
            return None
        return [TopicPartition(topic, partition, offset) for (topic, partition), offset in sent.items()], metadata

    async def _send_offsets(self, offsets: Mapping[tuple[str, int], int], deadline: float) -> BrokerError | None:
        while True:
            sent = self._offsets_to_send(offsets)
            if isinstance(sent, BrokerError):
                return sent
            if sent is None:
                return None
            try:
                await self._call(
                    self._producer.send_offsets_to_transaction, sent[0], sent[1], self._call_timeout
                )
                return None
            except KafkaException as exc:
                failure = self._classify(exc, "sending the offsets", deadline)
                if failure is not None:
                    return failure
            await asyncio.sleep(0.05)

    def _classify(self, exc: KafkaException, doing: str, deadline: float) -> BrokerError | None:
        """Map a transaction call's error to the failure of its waiters; None means retry."""
        error = _error_of(exc)
        if error is None:
            return self._fatal(exc, doing)
        if error.code() in GROUP_FENCING:
            return self._group_fenced(exc, doing)
        if error.fatal() or error.code() in PRODUCER_FENCING:
            return self._fatal(exc, doing)
        if error.txn_requires_abort():
            return TransactionAborted(f"{doing} failed, the transaction is aborted: {error}")
        if error.retriable() and time.monotonic() < deadline:
            log.info("%s failed, retrying: %s", doing, error)
            return None
        if error.retriable():
            return TransactionAborted(f"{doing} kept failing, the transaction is aborted: {error}")
        # librdkafka: treat any other error of these calls as fatal.
        return self._fatal(exc, doing)

    def _group_fenced(self, exc: BaseException, doing: str) -> Fenced:
        """The group moved on: the transaction is aborted, the worker told, the producer kept."""
        fenced = Fenced(f"{doing}: the consumer group fenced this worker: {exc}")
        fenced.__cause__ = exc
        return fenced

    def _fatal(self, exc: BaseException | None, doing: str) -> BrokerError:
        """The producer cannot go on (fenced by a newer one, or a fatal error): stop it."""
        if self._failure is not None:
            return self._failure
        fenced = Fenced(f"{doing}: the transactional producer was fenced or failed fatally: {exc}")
        fenced.__cause__ = exc
        self._failure = fenced
        self._open = False
        self._notify(fenced)
        return fenced

    def _notify(self, fenced: BrokerError) -> None:
        try:
            self._on_fenced(fenced)
        except Exception:
            log.exception("on_fenced failed")

    async def _abort(self, failure: BrokerError) -> BrokerError:
        """Abort the transaction; return the failure its waiters get."""
        if self._failure is not None:
            return self._failure
        try:
            await self._call(self._producer.abort_transaction, self._call_timeout)
        except KafkaException as exc:
            return self._fatal(exc, "aborting")
        self.aborts += 1
        self._outcome("aborted")
        return failure

    def _serve(self) -> None:
        while not self._stopping.is_set():
            self._producer.poll(0.05)


async def _settled(futures: list[asyncio.Future[list[Delivered]]], timeout: float) -> None:
    """Wait until every future is done (failed ones too), or ``timeout``."""
    pending = [future for future in futures if not future.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)


def _error_of(exc: BaseException | None) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None
