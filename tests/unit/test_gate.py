"""GenerationGate: ordering work on two cores without ever blocking on stale work."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from voiceagent.pipeline.gate import GenerationGate
from voiceagent.pipeline.generation import GenerationScope


def test_wait_returns_once_opened(run: Callable[..., Any]) -> None:
    async def scenario() -> bool:
        gate = GenerationGate(timeout_s=30)
        waiter = asyncio.create_task(gate.wait(1))
        await asyncio.sleep(0)
        assert not waiter.done()
        gate.open(1)
        await asyncio.wait_for(waiter, 5)
        return True

    assert run(scenario(), 10)


def test_a_cancelled_generation_opens_its_gate(run: Callable[..., Any]) -> None:
    async def scenario() -> None:
        scope = GenerationScope()
        gen = scope.next()
        gate = GenerationGate(timeout_s=30, scope=scope)
        waiter = asyncio.create_task(gate.wait(gen))
        await asyncio.sleep(0)
        assert not waiter.done()
        scope.next()  # barge-in or retraction: nobody may wait on that generation any more
        await asyncio.wait_for(waiter, 5)
        await asyncio.wait_for(gate.wait(gen), 5)  # and later waits return at once

    run(scenario(), 10)


def test_timeout_bounds_the_wait_and_disabled_never_waits(run: Callable[..., Any]) -> None:
    async def scenario() -> None:
        await asyncio.wait_for(GenerationGate(timeout_s=0.01).wait(7), 5)
        await asyncio.wait_for(GenerationGate(enabled=False, timeout_s=30).wait(7), 5)

    run(scenario(), 10)
