"""The limits at the edge (tidings.core.limits): every check, and the JSON scanner against json.loads."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tidings.core.aggregate import _EVENT_ID_NAMESPACE, event_id_for
from tidings.core.limits import (
    MAX_ID_BYTES,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_METADATA_BYTES,
    MAX_PAYLOAD_BYTES,
    check_id,
    check_json_text,
    check_metadata,
    check_optional_id,
    check_payload_size,
    check_reply_to,
    check_topic_name,
    clip_text,
    load_json,
)
from tidings.errors import LimitError, RecordError, SchemaError

LONE_SURROGATE = "s-\ud800"


def depth_of(value: Any) -> int:
    """Nesting depth as the scanner counts it: a scalar 0, ``[]`` 1, ``[[1]]`` 2."""
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


# -- ids ------------------------------------------------------------------------------------


def test_limit_error_is_a_schema_error_and_a_value_error() -> None:
    # Agents dead-letter it as a RecordError; callers of the client may catch ValueError.
    assert issubclass(LimitError, SchemaError) and issubclass(LimitError, RecordError)
    assert issubclass(LimitError, ValueError)


@pytest.mark.parametrize("value", ["a", "order-17", "ünïcödé/7", "x" * MAX_ID_BYTES, "é" * (MAX_ID_BYTES // 2)])
def test_a_valid_id_is_returned(value: str) -> None:
    assert check_id(value, "instance_id") == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "instance_id must not be empty"),
        (None, "instance_id must be a string, not NoneType"),
        (42, "instance_id must be a string, not int"),
        (b"bytes", "instance_id must be a string, not bytes"),
        (LONE_SURROGATE, r"instance_id 's-\\ud800' is not valid UTF-8: a lone surrogate at index 2"),
        ("x" * (MAX_ID_BYTES + 1), f"is {MAX_ID_BYTES + 1} bytes of UTF-8; the limit is {MAX_ID_BYTES}"),
        # 128 characters, but 256 bytes: the limit is in bytes, as Kafka and RocksDB count.
        ("é" * 128, f"is 256 bytes of UTF-8; the limit is {MAX_ID_BYTES}"),
    ],
)
def test_an_invalid_id_is_refused_with_a_precise_message(value: object, message: str) -> None:
    with pytest.raises(LimitError, match=message):
        check_id(value, "instance_id")


def test_a_huge_id_is_not_echoed_in_the_message() -> None:
    with pytest.raises(LimitError) as caught:
        check_id("c" * 300_000, "command_id")
    assert len(str(caught.value)) < 200
    assert "300000 bytes" in str(caught.value)


def test_an_optional_id_may_be_none_but_not_empty() -> None:
    assert check_optional_id(None, "causation_id") is None
    assert check_optional_id("c", "causation_id") == "c"
    with pytest.raises(LimitError, match="causation_id must not be empty"):
        check_optional_id("", "causation_id")


# -- sizes ----------------------------------------------------------------------------------


def test_a_payload_up_to_the_limit_passes_and_one_byte_more_is_refused() -> None:
    check_payload_size(None)
    check_payload_size(b"x" * MAX_PAYLOAD_BYTES)
    with pytest.raises(LimitError, match=f"payload is {MAX_PAYLOAD_BYTES + 1} bytes; the limit is {MAX_PAYLOAD_BYTES}"):
        check_payload_size(b"x" * (MAX_PAYLOAD_BYTES + 1))


def test_metadata_must_be_valid_utf8_strings_within_the_limit() -> None:
    check_metadata({"traceparent": "00-abc", "é": "ü"})
    with pytest.raises(LimitError, match="metadata value 's-\\\\ud800' is not valid UTF-8"):
        check_metadata({"k": LONE_SURROGATE})
    with pytest.raises(LimitError, match="metadata key"):
        check_metadata({LONE_SURROGATE: "v"})
    with pytest.raises(LimitError, match="must map strings to strings"):
        check_metadata({"k": 1})  # type: ignore[dict-item]
    with pytest.raises(LimitError, match=f"more than {MAX_METADATA_BYTES} bytes"):
        check_metadata({f"k{i}": "v" * 1000 for i in range(20)})


def test_clip_text_cuts_on_a_character_boundary_and_says_how_long_it_was() -> None:
    assert clip_text("short", 100) == "short"
    clipped = clip_text("é" * 100, 40)
    assert len(clipped.encode()) <= 40
    assert clipped.endswith("... (200 bytes in all)")
    assert clip_text(LONE_SURROGATE, 100) == "s-?"


# -- topic names and reply_to ---------------------------------------------------------------


@pytest.mark.parametrize("topic", ["app.replies", "a", "A-b_c.9", "x" * 249, "..."])
def test_a_valid_topic_name_passes(topic: str) -> None:
    assert check_topic_name(topic) == topic


@pytest.mark.parametrize(
    "topic", ["", ".", "..", "x" * 250, "not a topic!", "tab\tname", "nul\x00", "ünï", "a/b", "a\n", None, 7]
)
def test_an_invalid_topic_name_is_refused(topic: object) -> None:
    with pytest.raises(LimitError, match="reply_to"):
        check_topic_name(topic)


def test_reply_to_may_not_name_one_of_the_apps_own_topics() -> None:
    own = {"bank.aggregate.account.events", "bank.workflow.enrich.journal", "bank.deadletter"}
    assert check_reply_to("bank.replies", own) == "bank.replies"
    with pytest.raises(LimitError, match="'bank.aggregate.account.events' is one of the app's own topics"):
        check_reply_to("bank.aggregate.account.events", own)
    with pytest.raises(LimitError, match="not a Kafka topic name"):
        check_reply_to("bank events", own)


# -- JSON -----------------------------------------------------------------------------------


def nested(depth: int, *, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def test_json_up_to_the_depth_limit_loads_and_one_level_more_is_refused() -> None:
    assert depth_of(load_json(nested(MAX_JSON_DEPTH).encode())) == MAX_JSON_DEPTH
    with pytest.raises(LimitError, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        load_json(nested(MAX_JSON_DEPTH + 1).encode())


@pytest.mark.parametrize("depth", [3_000, 100_000])
def test_json_nested_thousands_deep_is_refused_without_recursion(depth: int) -> None:
    with pytest.raises(LimitError, match="deeper than"):
        load_json(nested(depth).encode())
    # json.loads itself would raise RecursionError here, which no caller catches.
    with pytest.raises(LimitError):
        load_json(("{\"a\":" * depth + "1" + "}" * depth).encode())
    # Unclosed openers recurse just as deep before json.loads fails.
    with pytest.raises(LimitError):
        load_json(b"[" * depth)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps(["[" * 500, {"k": "{{{{\\\"[[[[" * 100}, "\\" * 7 + "[[["])
    assert load_json(text) == json.loads(text)


def test_json_larger_than_the_limit_is_refused_before_parsing() -> None:
    load_json(b'"' + b"x" * (MAX_JSON_BYTES - 2) + b'"')
    with pytest.raises(LimitError, match=f"is {MAX_JSON_BYTES + 1} bytes"):
        load_json(b'"' + b"x" * (MAX_JSON_BYTES - 1) + b'"')
    with pytest.raises(LimitError, match="payload is 11 bytes; the limit is 10"):
        load_json(b"[1,2,3,4,5]", "payload", max_bytes=10)


@pytest.mark.parametrize("data", [b"\xff\xfe{}", b'{"a": "\xc3"}', "{}".encode("utf-16")])
def test_json_that_is_not_utf8_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        load_json(data)


def test_a_byte_order_mark_is_tolerated_as_json_loads_does() -> None:
    assert load_json(b"\xef\xbb\xbf[1]") == [1] == json.loads(b"\xef\xbb\xbf[1]")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(alphabet='[]{}"\\ab,:\n\u00e9'),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\k'), children, max_size=3),
    max_leaves=30,
)


@given(json_values, st.integers(min_value=0, max_value=6), st.booleans(), st.sampled_from([None, 0, 2]))
def test_the_scanner_accepts_exactly_the_json_within_the_depth(
    value: Any, max_depth: int, ascii_only: bool, indent: int | None
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    if depth_of(value) <= max_depth:
        assert load_json(text.encode(), max_depth=max_depth) == json.loads(text)
    else:
        with pytest.raises(LimitError):
            load_json(text.encode(), max_depth=max_depth)


@given(st.text(alphabet='[]{}"\\, :1a\u00e9\ud800', max_size=200), st.integers(min_value=0, max_value=8))
@example('"\\"[[[[', 2)
@example('[[["\\', 2)
@example("]" * 5 + "[" * 5, 2)
@example('["]"]', 1)
def test_the_scanner_never_lets_json_loads_recurse_deeper_than_the_limit(text: str, max_depth: int) -> None:
    try:
        expected: Any = json.loads(text)
    except ValueError:
        expected = ValueError
    try:
        loaded: Any = load_json(text, max_depth=max_depth)
    except LimitError:
        # Refused: only ever text that json.loads refuses too, or too deep.
        assert expected is ValueError or depth_of(expected) > max_depth
        return
    except ValueError:
        assert expected is ValueError
        return
    assert loaded == expected and depth_of(loaded) <= max_depth


@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_ever_raise_value_errors(data: bytes) -> None:
    try:
        load_json(data, max_depth=3)
    except ValueError:
        pass


def test_check_json_text_reads_text_and_bytes_alike() -> None:
    check_json_text(nested(5), max_depth=5)
    with pytest.raises(LimitError, match="payload nests"):
        check_json_text(nested(6).encode(), "payload", max_depth=5)


# -- event ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("command_id", ["c-1", "ünï", "x" * 300, ""])
def test_event_ids_are_the_uuid5_they_always_were(command_id: str) -> None:
    # Stored events carry these ids: computing them differently would change history.
    assert event_id_for(command_id, 3) == str(uuid.uuid5(_EVENT_ID_NAMESPACE, f"{command_id}#3"))


@given(st.text(st.characters(blacklist_categories=("Cs",))), st.integers(0, 10**6))
def test_every_event_id_is_the_uuid5_of_its_command_id_and_index(command_id: str, index: int) -> None:
    assert event_id_for(command_id, index) == str(uuid.uuid5(_EVENT_ID_NAMESPACE, f"{command_id}#{index}"))


def test_an_event_id_of_a_command_id_with_a_lone_surrogate_is_stable() -> None:
    first = event_id_for(LONE_SURROGATE, 0)
    assert first == event_id_for(LONE_SURROGATE, 0) != event_id_for(LONE_SURROGATE, 1)
    assert uuid.UUID(first).version == 5
