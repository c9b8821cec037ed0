"""The intake commits a partition read by several feeds only as far as every one of them completed."""

from __future__ import annotations

import asyncio
from typing import Any

from tidings.shell.runtime.intake import Intake
from tidings.shell.runtime.connection import KafkaConnection


async def _nothing(batch: Any) -> Any:
    async def finish() -> None:
        return None

    return finish


def _intake() -> tuple[Intake, Any, Any, Any]:
    intake = Intake(KafkaConnection("127.0.0.1:1"), "g", on_assigned=lambda p: None, on_revoked=lambda p: None)
    one = intake.add(["events"], _nothing, "projection one")
    two = intake.add(["events"], _nothing, "projection two")
    other = intake.add(["commands"], _nothing, "aggregate")
    return intake, one, two, other


def test_a_shared_partition_is_committed_up_to_the_least_completed_feed() -> None:
    async def scenario() -> list[dict[tuple[str, int], int]]:
        intake, one, two, other = _intake()
        await intake._assign([("events", 0), ("commands", 0)])
        return [
            intake._complete(one, {("events", 0): 10}),  # two has completed nothing yet
            intake._complete(two, {("events", 0): 4}),
            intake._complete(two, {("events", 0): 12}),
            intake._complete(other, {("commands", 0): 7}),  # read by one feed: at once
            intake._complete(one, {("events", 0): 10}),  # nothing new
        ]

    assert asyncio.run(scenario()) == [{}, {("events", 0): 4}, {("events", 0): 10},
                                       {("commands", 0): 7}, {}]


def test_offsets_of_a_revoked_partition_are_never_committed() -> None:
    async def scenario() -> dict[tuple[str, int], int]:
        intake, _, _, other = _intake()
        await intake._assign([("commands", 0)])
        await intake._revoke([("commands", 0)])
        return intake._complete(other, {("commands", 0): 3})

    assert asyncio.run(scenario()) == {}
