"""Dead letters are bounded: whatever a record held, its letter fits the dead-letter topic."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from tidings.codec import decode
from tidings.core.limits import MAX_REASON_BYTES
from tidings.core.records import DeadLetter
from tidings.errors import DecodeError, SchemaError
from tidings.shell.runtime.deadletters import (
    DEAD_LETTER_HEADER_BYTES,
    DEAD_LETTER_KEY_BYTES,
    DEAD_LETTER_VALUE_BYTES,
    MAX_DEAD_LETTER_VALUE_BYTES,
    dead_letter,
)
from tidings.shell.runtime.io import Incoming

#: Well under the broker's default max.message.bytes (1 MiB): room for its own overhead.
FITS = 900 * 1024
MEGABYTE = 1024 * 1024


def letter_of(record: Incoming, error: BaseException, **options: int) -> tuple[bytes, DeadLetter]:
    outgoing = dead_letter(record, error, "app.deadletter", 1_700, **options)
    assert outgoing.topic == "app.deadletter"
    assert outgoing.value is not None
    letter = decode(outgoing.value)
    assert isinstance(letter, DeadLetter)
    return outgoing.value, letter


def test_a_small_record_is_kept_whole_and_not_marked_truncated() -> None:
    record = Incoming("app.x.commands", 2, 41, b"k-1", b"\x00garbage", {"content-type": b"avro/binary"}, 5)
    outgoing = dead_letter(record, DecodeError("no magic"), "app.deadletter", 1_700)
    assert outgoing.key == b"app.x.commands/2/41"
    assert decode(outgoing.value) == DeadLetter(  # type: ignore[arg-type]
        source_topic="app.x.commands", partition=2, offset=41, key=b"k-1", value=b"\x00garbage",
        reason="no magic", error_type="DecodeError", timestamp_ms=1_700,
        headers={"content-type": "avro/binary"}, original_size=8, truncated=False,
    )


def test_a_one_megabyte_value_is_cut_to_the_default_limit_with_its_original_size() -> None:
    value = bytes(range(256)) * (MEGABYTE // 256)
    encoded, letter = letter_of(Incoming("t", 0, 1, b"k", value), DecodeError("bad"))
    assert letter.value == value[:DEAD_LETTER_VALUE_BYTES]
    assert (letter.original_size, letter.truncated) == (MEGABYTE, True)
    assert len(encoded) < DEAD_LETTER_VALUE_BYTES + 1024


def test_the_value_limit_is_configurable_within_a_bound() -> None:
    value = b"v" * 300_000
    _, letter = letter_of(Incoming("t", 0, 1, None, value), DecodeError("bad"), value_limit=200_000)
    assert (len(letter.value or b""), letter.original_size, letter.truncated) == (200_000, 300_000, True)
    _, whole = letter_of(Incoming("t", 0, 1, None, value), DecodeError("bad"), value_limit=300_000)
    assert (whole.value, whole.truncated) == (value, False)
    with pytest.raises(ValueError, match="value_limit"):
        dead_letter(Incoming("t", 0, 1, None, value), DecodeError("bad"), "dl", 0, value_limit=MAX_DEAD_LETTER_VALUE_BYTES + 1)


def test_a_one_megabyte_key_is_cut() -> None:
    key = b"k" * MEGABYTE
    encoded, letter = letter_of(Incoming("t", 0, 1, key, b"v"), DecodeError("bad"))
    assert letter.key == key[:DEAD_LETTER_KEY_BYTES]
    assert (letter.value, letter.original_size, letter.truncated) == (b"v", 1, True)
    assert len(encoded) < 4 * 1024


def test_huge_and_countless_headers_are_bounded_and_made_valid_utf8() -> None:
    headers = {f"h{i}": b"\xff" + b"x" * 100_000 for i in range(20)}
    headers["s-\ud800"] = b"ok"
    encoded, letter = letter_of(Incoming("t", 0, 1, b"k", b"v", headers), DecodeError("bad"))
    assert letter.truncated
    assert sum(len(k.encode()) + len(v.encode()) for k, v in letter.headers.items()) <= DEAD_LETTER_HEADER_BYTES
    assert letter.headers["h0"].startswith("\ufffdxxx")
    assert len(encoded) < DEAD_LETTER_HEADER_BYTES + 1024


def test_a_reason_that_echoes_a_huge_input_is_cut() -> None:
    class Amounts(BaseModel):
        amounts: list[int]

    with pytest.raises(ValidationError) as caught:
        Amounts.model_validate({"amounts": ["x" * 1000] * 5000})
    assert len(str(caught.value)) > 100 * MAX_REASON_BYTES
    _, letter = letter_of(Incoming("t", 0, 1, b"k", b"v"), SchemaError(str(caught.value)))
    assert len(letter.reason.encode()) <= MAX_REASON_BYTES
    assert letter.reason.startswith("5000 validation errors for Amounts")
    assert letter.truncated


def test_a_reason_with_a_lone_surrogate_still_encodes() -> None:
    _, letter = letter_of(Incoming("t", 0, 1, b"k", b"v"), SchemaError("unknown type s-\ud800"))
    assert letter.reason == "unknown type s-?"


def test_an_error_whose_message_cannot_be_rendered_still_gets_a_letter() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    _, letter = letter_of(Incoming("t", 0, 1, b"k", b"v"), Broken())
    assert letter.error_type == "Broken"
    assert "could not be rendered" in letter.reason


def test_a_tombstone_has_no_original_size() -> None:
    _, letter = letter_of(Incoming("t", 0, 1, b"k", None), DecodeError("a tombstone"))
    assert (letter.value, letter.original_size, letter.truncated) == (None, None, False)


def test_a_letter_fits_whatever_the_record_held_at_the_largest_value_limit() -> None:
    record = Incoming(
        "t" * 249, 2**31 - 1, 2**63 - 1, b"k" * MEGABYTE, b"v" * MEGABYTE,
        {f"header-{i}-" + "n" * 1000: b"x" * 50_000 for i in range(100)},
    )
    error = SchemaError("reason " * 200_000)
    encoded, letter = letter_of(record, error, value_limit=MAX_DEAD_LETTER_VALUE_BYTES)
    assert len(encoded) < FITS
    assert letter.truncated and letter.original_size == MEGABYTE
    # With the default value limit, as docs/limits.md says: under 90 KiB.
    encoded, _ = letter_of(record, error)
    assert len(encoded) < 90 * 1024
