"""A one-shot gate per generation: the deliberate split of two CPU cores around the first clause.

Right after the LLM stage hands its first clause to TTS, both would compete for the same cores:
the LLM decoding the rest of the reply (not needed yet) and TTS synthesising the first clause
(needed now, it decides the time to first audio).  The LLM stage waits on this gate after its
first clause; the TTS stage opens it once that clause's first audio exists (or it failed).
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["FirstAudioGate"]


class FirstAudioGate:
    def __init__(self, enabled: bool = True, timeout_s: float = 2.0) -> None:
        self.enabled = enabled
        self.timeout_s = timeout_s
        self._events: dict[int, asyncio.Event] = {}

    def _event(self, gen: int) -> asyncio.Event:
        ev = self._events.get(gen)
        if ev is None:
            # Keep only recent generations: an old one is never waited on again.
            for old in [g for g in self._events if g < gen - 8]:
                del self._events[old]
            ev = self._events[gen] = asyncio.Event()
        return ev

    def open(self, gen: int) -> None:
        """TTS: the first audio of generation ``gen`` exists (or will not come)."""
        self._event(gen).set()

    async def wait(self, gen: int) -> None:
        """LLM: wait until ``open(gen)`` or the timeout; cancellable like any wait."""
        if not self.enabled:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event(gen).wait(), self.timeout_s)
