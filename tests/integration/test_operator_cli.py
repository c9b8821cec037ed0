"""The operator's commands on the real broker: ``tidings deadletters`` and ``tidings offsets``.

Each command runs as a child process, as an operator would run it, against the test App
(``tests.integration.apps``, named by ``TEST_APP_ID``); committed offsets are checked with
Kafka's AdminClient, not with the command under test.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from tidings import App
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.apps import Add, Added, Read, Total
from tests.workers import ROOT, Workers, test_app, workers  # noqa: F401 - fixtures
from tests.kafka_clients import kafka

APP = "tests.integration.apps:app"


def tidings(bootstrap: str, app_id: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``tidings ARGS`` for the test App and return what it did (never a traceback)."""
    done = subprocess.run(
        [sys.executable, "-m", "tidings.cli.main", *args],
        input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "TIDINGS_BOOTSTRAP": bootstrap, "TEST_APP_ID": app_id},
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def json_lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def letter(source_topic: str, offset: int, value: bytes, *, timestamp_ms: int) -> DeadLetter:
    return DeadLetter(
        source_topic=source_topic, partition=1, offset=offset, key=b"k-1", value=value,
        reason="written by the test", error_type="SchemaError", timestamp_ms=timestamp_ms,
        headers={"content-type": "application/json"},
    )


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as Kafka's AdminClient reads them."""
    admin = kafka(bootstrap).admin()
    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result().topic_partitions if tp.offset >= 0}


def group_state(bootstrap: str, group: str) -> str:
    admin = kafka(bootstrap).admin()
    (future,) = admin.describe_consumer_groups([group], request_timeout=10).values()
    return str(future.result().state.name)


# -- tidings deadletters -----------------------------------------------------------------------


def test_deadletters_prints_what_a_worker_dead_lettered_and_what_others_wrote_as_json_lines(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    workers.start()
    commands = f"{test_app.name}.aggregate.tally.commands"
    deadletters = f"{test_app.name}.deadletter"
    not_avro = b"\x00\xc3 not avro, not UTF-8"
    broken_json = b'{"command_id": "c-1", "aggregate_id": "t-1", "type": "Add", "payl'
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    producer.produce(commands, not_avro, b"t-1")
    producer.produce(commands, broken_json, b"t-1", headers=[("content-type", b"application/json")])
    producer.flush(10)
    # The same instance's next command is decided after both bad records were dead-lettered.
    assert asyncio.run(test_app.client(kafka_bootstrap).send("tally", "t-1", Add(amount=1))) == Added(amount=1)
    assert_eventually(lambda: len(read_topic(kafka_bootstrap, deadletters)) == 2, timeout=30, interval=0.3)
    # Any producer may write to the dead-letter topic: a letter of its own, and bytes that are none.
    old = letter(commands, 99, "déjà vu".encode(), timestamp_ms=1_700_000_000_000)
    producer.produce(deadletters, avro.encode(old), b"handmade")
    producer.produce(deadletters, b"hello, not a dead letter", b"stray")
    producer.flush(10)

    lines = json_lines(tidings(kafka_bootstrap, test_app.name, "deadletters", APP))

    assert len(lines) == 4, lines
    by_value = {line.get("origin", {}).get("offset"): line for line in lines if "unreadable" not in line}
    home = partition_for("t-1", test_app.partitions)
    first, second = by_value[0], by_value[1]
    assert first["origin"] == {"topic": commands, "partition": home, "offset": 0}
    assert first["error_type"] == "DecodeError" and first["reason"]
    assert first["value_encoding"] == "base64" and base64.b64decode(first["value"]) == not_avro
    assert (first["key"], first["key_encoding"]) == ("t-1", "utf-8")
    assert (first["original_size"], first["truncated"]) == (len(not_avro), False)
    assert first["timestamp"].endswith("Z") and first["letter"]["offset"] >= 0
    assert second["origin"] == {"topic": commands, "partition": home, "offset": 1}
    assert (second["value"], second["value_encoding"]) == (broken_json.decode(), "utf-8")
    assert second["headers"] == {"content-type": "application/json"} and second["reason"]
    handmade = by_value[99]
    assert (handmade["value"], handmade["reason"]) == ("déjà vu", "written by the test")
    assert handmade["timestamp"] == "2023-11-14T22:13:20.000Z"
    (stray,) = [line for line in lines if "unreadable" in line]
    assert "Avro" in stray["unreadable"]
    assert (stray["key"], stray["value"], stray["value_encoding"]) == ("stray", "hello, not a dead letter", "utf-8")

    assert len(json_lines(tidings(kafka_bootstrap, test_app.name, "deadletters", APP, "--limit", "1"))) == 1
    recent = json_lines(tidings(kafka_bootstrap, test_app.name, "deadletters", APP, "--since", "1h"))
    assert sorted(line.get("origin", {}).get("offset", -1) for line in recent) == [-1, 0, 1]  # not the 2023 one


def test_deadletters_follow_prints_new_letters_until_ctrl_c_and_exits_0(
    kafka_bootstrap: str, test_app: App
) -> None:
    deadletters = f"{test_app.name}.deadletter"
    producer = kafka(kafka_bootstrap).producer()
    producer.produce(deadletters, avro.encode(letter("in", 1, b"one", timestamp_ms=1)), b"k")
    producer.flush(10)
    follower = subprocess.Popen(
        [sys.executable, "-m", "tidings.cli.main", "deadletters", APP, "--follow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap, "TEST_APP_ID": test_app.name},
    )
    lines: queue.Queue[str] = queue.Queue()
    stdout = follower.stdout
    assert stdout is not None

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        assert json.loads(lines.get(timeout=60))["value"] == "one"
        producer.produce(deadletters, avro.encode(letter("in", 2, b"two", timestamp_ms=2)), b"k")
        producer.flush(10)
        assert json.loads(lines.get(timeout=60))["value"] == "two"
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 0
    finally:
        follower.kill()
        follower.wait()
    stderr = follower.stderr.read() if follower.stderr else ""
    assert "Traceback" not in stderr, stderr


def test_deadletters_of_an_app_without_topics_says_to_apply_them(kafka_bootstrap: str, app_id: str) -> None:
    done = tidings(kafka_bootstrap, app_id, "deadletters", APP)

    assert done.returncode == 1 and done.stdout == ""
    assert f"{app_id}.deadletter" in done.stderr and "tidings topics apply" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# -- tidings offsets ---------------------------------------------------------------------------


def test_offsets_show_the_committed_offsets_and_move_them_with_yes_or_a_confirmation(
    kafka_bootstrap: str, test_app: App
) -> None:
    group = test_app.name
    topic = f"{test_app.name}.aggregate.tally.commands"
    producer = kafka(kafka_bootstrap).producer()
    for partition in range(test_app.partitions):
        for n in range(5):
            producer.produce(topic, b"record %d" % n, b"k", partition=partition)
    producer.flush(10)
    # A consumer of the group reads some records, commits where it got to, and leaves.
    consumer = kafka(kafka_bootstrap).consumer(**{"group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 2), TopicPartition(topic, 2, 0)],
                    asynchronous=False)
    consumer.close()

    shown = json_lines(tidings(kafka_bootstrap, group, "offsets", "show", APP, "--json"))[0]
    assert (shown["group"], shown["state"], shown["members"]) == (group, "EMPTY", [])
    assert [(p["partition"], p["committed"], p["start"], p["end"], p["lag"]) for p in shown["partitions"]] == [
        (0, 5, 0, 5, 0), (1, 2, 0, 5, 3), (2, 0, 0, 5, 5), (3, None, 0, 5, None)
    ]
    table = tidings(kafka_bootstrap, group, "offsets", "show", APP).stdout.splitlines()
    assert table[0] == f"group {group}: EMPTY, no members"
    assert [cell for cell in table[-3].split()] == [topic, "1", "2", "0", "5", "3", "-"]

    skip = tidings(kafka_bootstrap, group, "offsets", "move", APP, topic, "--partition", "1", "--shift", "1", "--yes")
    assert skip.returncode == 0, skip.stderr
    assert f"{topic}/1: 2 -> 3 (skips 1 record" in skip.stdout
    assert committed(kafka_bootstrap, group) == {(topic, 0): 5, (topic, 1): 3, (topic, 2): 0}

    declined = tidings(kafka_bootstrap, group, "offsets", "move", APP, topic, "--to", "earliest", stdin="n\n")
    assert declined.returncode == 1 and "nothing moved" in declined.stderr
    assert committed(kafka_bootstrap, group) == {(topic, 0): 5, (topic, 1): 3, (topic, 2): 0}

    confirmed = tidings(kafka_bootstrap, group, "offsets", "move", APP, topic, "--to", "latest", stdin="y\n")
    assert confirmed.returncode == 0, confirmed.stderr
    assert f"{topic}/3: none -> 5" in confirmed.stdout and "moved 3 committed offsets" in confirmed.stdout
    assert committed(kafka_bootstrap, group) == {(topic, p): 5 for p in range(4)}

    for move in (["--partition", "2", "--to", "4"], ["--partition", "0", "--shift", "-10"]):
        assert tidings(kafka_bootstrap, group, "offsets", "move", APP, topic, *move, "--yes").returncode == 0
    # -10 from 5 is before the log's start: clamped to it.
    assert committed(kafka_bootstrap, group) == {(topic, 0): 0, (topic, 1): 5, (topic, 2): 4, (topic, 3): 5}

    unknown = tidings(kafka_bootstrap, group, "offsets", "move", APP, f"{topic}x", "--to", "0", "--yes")
    assert unknown.returncode == 1 and "offsets show" in unknown.stderr


def test_offsets_move_is_refused_while_a_worker_runs_and_once_it_stopped_a_shift_skips_a_command(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    group = test_app.name
    topic = f"{test_app.name}.aggregate.tally.commands"
    home = partition_for("t-9", test_app.partitions)
    worker = workers.start()
    client = test_app.client(kafka_bootstrap)
    assert asyncio.run(client.send("tally", "t-9", Add(amount=1))) == Added(amount=1)
    # The worker commits its offsets every half second: wait until the command is committed.
    assert_eventually(lambda: committed(kafka_bootstrap, group).get((topic, home)) == 1, timeout=30, interval=0.3)

    shown = json_lines(tidings(kafka_bootstrap, group, "offsets", "show", APP, "--json"))[0]
    assert shown["state"] == "STABLE" and len(shown["members"]) == 1
    assert {"topic": topic, "partition": home} in shown["members"][0]["partitions"]
    refused = tidings(kafka_bootstrap, group, "offsets", "move", APP, topic, "--to", "earliest", "--yes")
    assert refused.returncode == 1 and refused.stdout == ""
    assert "1 member" in refused.stderr and "Stop every worker" in refused.stderr
    assert committed(kafka_bootstrap, group)[(topic, home)] == 1

    worker.stop()
    assert_eventually(lambda: group_state(kafka_bootstrap, group) == "EMPTY", timeout=30, interval=0.3)
    # A command the operator wants skipped (a stand-in for one a worker cannot get past).
    producer = kafka(kafka_bootstrap).producer()
    envelope = (b'{"command_id": "skip-me", "aggregate_id": "t-9", "type": "Add", "payload": {"amount": 100},'
                b' "reply_to": "%s"}' % test_app.replies_topic.encode())
    producer.produce(topic, envelope, b"t-9", partition=home, headers=[("content-type", b"application/json")])
    producer.flush(10)

    moved = tidings(kafka_bootstrap, group, "offsets", "move", APP, topic,
                    "--partition", str(home), "--shift", "+1", "--yes")
    assert moved.returncode == 0, moved.stderr
    assert committed(kafka_bootstrap, group)[(topic, home)] == 2

    workers.start("w1-again", data_dir=worker.data_dir)
    assert asyncio.run(client.send("tally", "t-9", Read())) == Total(value=1), workers.log_tail()
