"""The operator commands' pure parts: dead-letter lines, ``--since``, planning and confirming a move."""

from __future__ import annotations

import argparse
import base64
from datetime import UTC, datetime

import pytest

from tidings.cli.deadletters import _since
from tidings.inspection.deadletters import bytes_field, dead_letter_line
from tidings.cli.offsets import Move, PartitionOffsets, confirm, plan_moves, show_lines
from tidings.codec import avro
from tidings.core.records import CommandEnvelope, DeadLetter
from tidings.shell.runtime.admin import GroupDescription, GroupMember
from tidings.shell.runtime.io import Incoming

TOPIC = "bank.aggregate.account.commands"


def stored(value: bytes | None, *, key: bytes | None = b"k") -> Incoming:
    return Incoming("bank.deadletter", 2, 40, key, value, {"h": b"\xffx"}, 1_700_000_000_000)


def test_a_dead_letter_line_names_its_origin_and_keeps_bytes_that_are_not_utf8_as_base64() -> None:
    value = b"\xc3\x01 an Avro command"
    letter = DeadLetter(TOPIC, 3, 17, b"alice", value, "corrupt record", "DecodeError", 1_700_000_000_123,
                        {"content-type": "avro"})

    line, written_ms = dead_letter_line(stored(avro.encode(letter)))

    assert written_ms == 1_700_000_000_123
    assert line == {
        "reason": "corrupt record",
        "error_type": "DecodeError",
        "origin": {"topic": TOPIC, "partition": 3, "offset": 17},
        "timestamp": "2023-11-14T22:13:20.123Z",
        "key": "alice",
        "key_encoding": "utf-8",
        "value": base64.b64encode(value).decode(),
        "value_encoding": "base64",
        "original_size": len(value),
        "truncated": False,
        "headers": {"content-type": "avro"},
        "letter": {"partition": 2, "offset": 40},
    }


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "tombstone"),
        (b"\xc3\x01" + bytes(8) + b"garbage", "fingerprint"),
        (avro.encode(CommandEnvelope("c-1", "c-1", "alice", "Open", b"{}", 0)), "expected a DeadLetter"),
        (b'{"type": "Deposit"}', "Avro"),
        (avro.encode(DeadLetter(TOPIC, 0, 0, None, None, "r", "E", 0)) + b"\x00", "trailing"),
    ],
)
def test_a_record_that_is_not_a_dead_letter_is_an_unreadable_line_not_an_error(value: bytes | None, why: str) -> None:
    line, written_ms = dead_letter_line(stored(value, key=None))

    assert why in line["unreadable"]
    assert line["letter"] == {"partition": 2, "offset": 40} and written_ms == 1_700_000_000_000
    assert (line["key"], line["key_encoding"]) == (None, None)
    assert line["headers"] == {"h": "\ufffdx"}


def test_a_truncated_value_cut_inside_a_character_is_still_text() -> None:
    cut = "prix: 3 €".encode()[:-1]  # the euro sign is three bytes; two are kept

    assert bytes_field("value", cut, partial=True) == {"value": "prix: 3 ", "value_encoding": "utf-8"}
    assert bytes_field("value", cut)["value_encoding"] == "base64"
    assert base64.b64decode(bytes_field("value", cut)["value"]) == cut


def test_since_takes_a_duration_back_from_now_or_an_iso_time() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    hour_ago = int(datetime(2026, 11, 30, 11, 0, tzinfo=UTC).timestamp() * 1000)

    assert _since("1h", now=now) == _since("60m", now=now) == _since("3600s", now=now) == hour_ago
    assert _since("2026-11-30T11:00:00Z") == _since("2026-11-30T11:00:00") == hour_ago
    assert _since("2026-11-30T12:00:00+01:00") == hour_ago
    with pytest.raises(argparse.ArgumentTypeError, match="neither a duration"):
        _since("yesterday")


def test_a_shift_moves_from_the_committed_offset_and_stays_inside_the_log() -> None:
    positions = [(TOPIC, 0), (TOPIC, 1)]
    ranges = {(TOPIC, 0): (10, 20), (TOPIC, 1): (10, 20)}

    moves = plan_moves(positions, {(TOPIC, 0): 12, (TOPIC, 1): 19}, ranges, shift=3)

    assert moves == [Move(TOPIC, 0, 12, 15, 10, 20), Move(TOPIC, 1, 19, 20, 10, 20, "22 is outside the log")]
    assert moves[0].describe() == f"  {TOPIC}/0: 12 -> 15 (skips 3 records, log 10..20)"
    back = plan_moves(positions[:1], {(TOPIC, 0): 12}, ranges, shift=-5)
    assert back[0].after == 10 and "reads 2 records again" in back[0].describe()


def test_a_move_to_earliest_latest_or_an_offset_needs_no_committed_offset() -> None:
    ranges = {(TOPIC, 0): (10, 20)}

    assert plan_moves([(TOPIC, 0)], {}, ranges, to="earliest")[0].after == 10
    assert plan_moves([(TOPIC, 0)], {}, ranges, to="latest")[0].after == 20
    assert plan_moves([(TOPIC, 0)], {}, ranges, to=14)[0].describe() == f"  {TOPIC}/0: none -> 14 (log 10..20)"
    assert not plan_moves([(TOPIC, 0)], {(TOPIC, 0): 14}, ranges, to=14)[0].changes
    with pytest.raises(SystemExit, match="no committed offset to shift from"):
        plan_moves([(TOPIC, 0)], {}, ranges, shift=1)


def test_only_an_answer_starting_with_y_confirms() -> None:
    def no_input(question: str) -> str:
        raise EOFError

    assert confirm("?", ask=lambda question: "Yes")
    assert not confirm("?", ask=lambda question: "")
    assert not confirm("?", ask=lambda question: "no")
    assert not confirm("?", ask=no_input)


def test_show_names_each_partition_s_member_by_its_number_in_the_member_list() -> None:
    member = GroupMember("m-1", "faust", "/10.0.0.7", "worker-0", ((TOPIC, 1),))
    rows = [PartitionOffsets(TOPIC, 0, None, 0, 4, None), PartitionOffsets(TOPIC, 1, 3, 0, 5, 1)]

    lines = show_lines(GroupDescription("bank", "STABLE", (member,)), rows)

    assert lines[:2] == ["group bank: STABLE, 1 member", "  #1 m-1 on /10.0.0.7 instance worker-0, 1 partition"]
    assert [line.split() for line in lines[-2:]] == [
        [TOPIC, "0", "-", "0", "4", "-", "-"],
        [TOPIC, "1", "3", "0", "5", "2", "#1"],
    ]
