"""A hostile client's pace: at most so many frames a second, each client with its own pacer."""

from __future__ import annotations

import asyncio
import contextvars
import time


class Pacer:
    """A hostile client's pace: ``rate`` frames a second (0: as fast as it can), bursts of 0.2 s."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.t = 0.0

    async def __call__(self) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        self.t = max(self.t, now - 0.2) + 1.0 / self.rate
        if self.t > now:
            await asyncio.sleep(self.t - now)  # the client's own pace, not synchronisation


PACER: contextvars.ContextVar[Pacer | None] = contextvars.ContextVar("pacer", default=None)


async def pace() -> None:
    """Wait for this client's next frame slot."""
    pacer = PACER.get()
    if pacer is not None:
        await pacer()
