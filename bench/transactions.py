"""The transactional publisher next to the plain one: records/s and an idle commit's round trip.

Not part of ``make bench`` (yet): ``python bench/transactions.py`` with TIDINGS_BOOTSTRAP set.
50,000 records of ~100 B in sends of 100 on fresh 4-partition topics; the transactional rows
register input offsets (``commit_offsets``) every 1, 10 or 50 sends, as an agent does per batch.
The idle rows time one record plus ``commit_offsets`` (and ``commit_offsets`` alone) 200 times.
"""
import asyncio, os, time, uuid
from confluent_kafka.admin import NewTopic
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.io import Outgoing
from tidings.shell.runtime.kafka import ConfluentPublisher
from tidings.shell.runtime.transactions import TransactionalPublisher

B = os.environ.get("TIDINGS_BOOTSTRAP", "127.0.0.1:39092"); N = 50_000; CHUNK = 100
CONNECTION = KafkaConnection.resolve(bootstrap=B)  # with the environment's TIDINGS_KAFKA_* properties
run = uuid.uuid4().hex[:8]
topics = {k: f"tbench{run}.{k}" for k in ("plain", "txn", "idle", "input")}
admin = CONNECTION.admin()
for f in admin.create_topics([NewTopic(t, 4, 1) for t in topics.values()]).values(): f.result()
consumer = CONNECTION.consumer(**{"group.id": f"tbench{run}", "enable.auto.commit": False})
consumer.subscribe([topics["input"]])
t0 = time.monotonic()
while not consumer.assignment() and time.monotonic() - t0 < 30: consumer.poll(0.2)

def records(topic):
    return [Outgoing(topic, f"k{i % 997}".encode(), b"x" * 100) for i in range(CHUNK)]

async def plain():
    p = ConfluentPublisher(CONNECTION); batch = records(topics["plain"])
    await p.publish(batch)  # warm up metadata
    start = time.perf_counter(); pending = []
    for i in range(N // CHUNK):
        pending.append(p.send(batch))
        if len(pending) >= 50: await asyncio.gather(*pending); pending = []
    await asyncio.gather(*pending); took = time.perf_counter() - start; p.close(); return N / took

async def txn(commit_every):
    p = TransactionalPublisher(CONNECTION, transactional_id=f"tbench{run}-{commit_every}", group_metadata=consumer.consumer_group_metadata, on_fenced=print)
    await p.start(); batch = records(topics["txn"])
    await p.publish(batch); await p.committed()
    start = time.perf_counter(); pending = []
    for i in range(N // CHUNK):
        pending.append(p.send(batch))
        # an agent commits its input offsets after each batch it handled
        if i % commit_every == commit_every - 1:
            pending.append(p.commit_offsets({(topics["input"], 0): i}))
        if len(pending) >= 50: await asyncio.gather(*pending); pending = []
    pending.append(p.commit_offsets({(topics["input"], 0): N}))
    await asyncio.gather(*pending); took = time.perf_counter() - start
    commits = p.commits; await p.aclose(); return N / took, commits

async def idle():
    p = TransactionalPublisher(CONNECTION, transactional_id=f"tbench{run}-idle", group_metadata=consumer.consumer_group_metadata, on_fenced=print, commit_interval_ms=0)
    await p.start(); one = [Outgoing(topics["idle"], b"k", b"v", partition=0)]
    await p.publish(one); await p.commit_offsets({(topics["input"], 0): 1})
    rt, only = [], []
    for i in range(200):
        await asyncio.sleep(0.01)
        s = time.perf_counter(); p.send(one); await p.commit_offsets({(topics["input"], 0): i + 2}); rt.append(time.perf_counter() - s)
    for i in range(100):
        await asyncio.sleep(0.01)
        s = time.perf_counter(); await p.commit_offsets({(topics["input"], 0): i + 500}); only.append(time.perf_counter() - s)
    q = lambda xs, f: sorted(xs)[int(f * (len(xs) - 1))] * 1000
    await p.aclose()
    return (q(rt, .5), q(rt, .99)), (q(only, .5), q(only, .99))

async def main():
    print(f"ConfluentPublisher:          {await plain():9.0f} records/s")
    for every in (1, 10, 50):
        rate, commits = await txn(every)
        print(f"Transactional, commit_offsets every {every:>2} sends of {CHUNK}: {rate:9.0f} records/s ({commits} transactions)")
    (p50, p99), (o50, o99) = await idle()
    print(f"idle: send 1 record + commit_offsets: p50 {p50:.2f} ms p99 {p99:.2f} ms; commit_offsets alone: p50 {o50:.2f} ms p99 {o99:.2f} ms")
asyncio.run(main())
consumer.close()
admin.delete_topics(list(topics.values()))
