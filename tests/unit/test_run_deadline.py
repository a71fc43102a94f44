"""The ``run`` fixture's deadline (tests/conftest.py): a scenario past it fails with where it was."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.conftest import within


def test_a_scenario_within_its_deadline_returns_its_result() -> None:
    async def quick() -> int:
        await asyncio.sleep(0)
        return 7

    assert asyncio.run(within(quick(), 5.0)) == 7


def test_a_scenario_past_its_deadline_says_which_task_waited_where_and_is_cancelled() -> None:
    cancelled = []

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(asyncio.Event().wait(), name="a-helper")
        await within(stuck(), 0.1)

    with pytest.raises(TimeoutError) as info:
        asyncio.run(main())
    text = str(info.value)
    assert "not done within 0.1 s" in text and "a-helper" in text and "in stuck" in text
    assert "--- thread MainThread" in text
    assert cancelled == [True]


def test_a_blocked_event_loop_shows_as_a_late_deadline() -> None:
    async def blocks() -> None:
        time.sleep(0.6)  # noqa: ASYNC251 - a blocking call on the loop is what the report must reveal
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError) as info:
        asyncio.run(within(blocks(), 0.1))
    late = float(str(info.value).split("fired ")[1].split(" s late")[0])
    assert late >= 0.4
