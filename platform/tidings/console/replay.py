"""Whether a dead letter may be sent back to where it came from, and what would be sent. Pure.

Anyone the ACLs let write the dead-letter topic can write a "dead letter" naming any topic,
so a letter's recorded origin is checked, not trusted: it must be one of the app's own input
topics (an aggregate's commands, a workflow's or saga's inbox, a flow's source), on a
partition that topic has, and for the app's own topics on the partition its key belongs to
(where a worker would have read it). A letter that is unreadable, whose value was truncated
or is absent, or whose key or value is not given exactly (base64 or UTF-8), is refused:
sending back part of a record would be a different record.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.partitioning import partition_for
from ..errors import ReplayRefused

#: The roles of an app's topics a worker reads as input (``{app}.{kind}.{name}.{role}``).
INPUT_ROLES = ("commands", "inbox")


@dataclass(frozen=True, slots=True)
class Input:
    """One input topic of the app: what it is, its partitions, whether keys decide partitions."""

    topic: str
    what: str
    partitions: int
    keyed: bool  # the app's own topic: a record's key decides its partition (murmur2)


@dataclass(frozen=True, slots=True)
class Replay:
    """What sending the letter back produces: these bytes to this topic partition."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]

    def json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "key_bytes": None if self.key is None else len(self.key),
                "value_bytes": len(self.value), "headers": [name for name, _ in self.headers]}


def input_topics(app_name: str, specs: Mapping[str, int], flow_sources: Mapping[str, int]) -> dict[str, Input]:
    """The app's input topics by name.

    Args:
        app_name: The app's name.
        specs: Every topic of the app and its partition count (``app.topic_specs()``).
        flow_sources: Each flow's source topic (external) and its partition count, or 0 when unknown.
    """
    inputs: dict[str, Input] = {}
    prefix = f"{app_name}."
    for topic, partitions in specs.items():
        parts = topic[len(prefix):].split(".") if topic.startswith(prefix) else []
        if len(parts) == 3 and parts[2] in INPUT_ROLES:
            kind, name, role = parts
            what = f"the {role} of {kind} {name}"
            inputs[topic] = Input(topic, what, partitions, keyed=True)
    for topic, partitions in flow_sources.items():
        inputs.setdefault(topic, Input(topic, "a flow's source", partitions, keyed=False))
    return inputs


def _bytes(line: Mapping[str, Any], name: str) -> bytes | None:
    data = line.get(name)
    encoding = line.get(f"{name}_encoding")
    if data is None:
        return None
    if not isinstance(data, str):
        raise ReplayRefused(f"the letter's {name} is not text")
    if encoding == "utf-8":
        return data.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ReplayRefused(f"the letter's {name} is not base64") from None
    raise ReplayRefused(f"the letter's {name} has no known encoding")


def replay_of(line: Mapping[str, Any], inputs: Mapping[str, Input]) -> Replay:
    """What sending the dead letter ``line`` (``dead_letter_line``'s object) back produces.

    Raises:
        ReplayRefused: it may not be sent back (unreadable, truncated, no value, not one of the
            app's input topics, a partition the topic has not or its key does not own).
    """
    if "unreadable" in line:
        raise ReplayRefused("this record of the dead-letter topic is not a dead letter; nothing to send back")
    if line.get("truncated"):
        raise ReplayRefused("only the first bytes of this record were kept (truncated): send it again from its producer")
    origin = line.get("origin") or {}
    topic, partition = origin.get("topic"), origin.get("partition")
    found = inputs.get(topic) if isinstance(topic, str) else None
    if found is None:
        raise ReplayRefused(f"its origin {str(topic)[:200]!r} is not one of the app's input topics (commands, inboxes, "
                      "a flow's source); a letter from a journal or events topic is never sent back")
    if not isinstance(partition, int) or partition < 0 or (found.partitions and partition >= found.partitions):
        raise ReplayRefused(f"its origin partition {partition!r} is not a partition of {topic} "
                      f"({found.partitions or 'unknown'} partitions)")
    key = _bytes(line, "key")
    value = _bytes(line, "value")
    if value is None:
        raise ReplayRefused("the letter holds no value to send back")
    if found.keyed:
        try:
            owner = partition_for((key or b"").decode("utf-8"), found.partitions)
        except UnicodeDecodeError:
            raise ReplayRefused("its key is not UTF-8, so no worker of the app would read it") from None
        if owner != partition:
            raise ReplayRefused(f"its key belongs on partition {owner} of {topic}, not {partition}: "
                          "the recorded origin is not where a worker read it")
    headers = line.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise ReplayRefused("the letter's headers are not a map")
    return Replay(found.topic, partition, key, value, [(str(n), str(v).encode("utf-8")) for n, v in headers.items()])
