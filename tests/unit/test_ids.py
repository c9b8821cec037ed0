"""Request ids drawn a block of ``os.urandom`` at a time (``shell.runtime.ids``)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from tidings.shell.runtime.ids import RandomIds


def test_ids_have_the_form_of_uuid4_hex() -> None:
    ids = RandomIds(block_ids=4)
    for _ in range(50):  # across several blocks
        text = ids.hex()
        parsed = uuid.UUID(hex=text)
        assert parsed.hex == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_ids_do_not_repeat_across_blocks_and_threads() -> None:
    ids = RandomIds(block_ids=8)
    drawn: list[list[str]] = [[] for _ in range(4)]

    def draw(into: list[str]) -> None:
        for _ in range(5_000):
            into.append(ids.hex())

    threads = [threading.Thread(target=draw, args=(into,)) for into in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [text for into in drawn for text in into]
    assert len(every) == 20_000
    assert len(set(every)) == len(every)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    ids = RandomIds()
    ids.hex()  # a block is drawn, most of it not handed out yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, "".join(ids.hex() for _ in range(10)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    parent = [ids.hex() for _ in range(10)]
    assert len(child) == 320
    assert not {child[i:i + 32] for i in range(0, 320, 32)} & set(parent)


def test_ids_are_drawn_without_a_system_call_per_id(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real = os.urandom

    def counted(n: int) -> bytes:
        reads.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", counted)
    ids = RandomIds(block_ids=100)
    for _ in range(1_000):
        ids.hex()
    assert reads == [1_600] * 10
