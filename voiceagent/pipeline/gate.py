"""One-shot gates per generation: the deliberate split of two CPU cores along the critical path.

On two cores, two model calls at once each run at about half speed, and llama.cpp's spinning
threads suffer most.  Work that is not on the path to the first audio byte waits for the work
that is:

* the turn model (is the turn complete?) waits until the LLM has its first token: confirming
  the turn is needed only by the time the first audio exists;
* after its first clause the LLM waits until TTS has that clause's first audio: the rest of the
  reply is not needed yet.

The producer ``open``s the gate for a generation; the waiter gives up after ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib

from voiceagent.pipeline.generation import Generations

__all__ = ["GenerationGate"]


class GenerationGate:
    """With a ``scope``, a cancelled generation's gate opens by itself (nobody waits on stale work)."""

    def __init__(self, enabled: bool = True, timeout_s: float = 2.0, scope: Generations | None = None) -> None:
        self.enabled = enabled
        self.timeout_s = timeout_s
        self._events: dict[int, asyncio.Event] = {}
        self._scope = scope
        if scope is not None:
            scope.subscribe(self._open_below)

    def _open_below(self, floor: int) -> None:
        for gen, ev in self._events.items():
            if gen < floor:
                ev.set()

    def _event(self, gen: int) -> asyncio.Event:
        ev = self._events.get(gen)
        if ev is None:
            # Keep only recent generations: an old one is never waited on again.
            for old in [g for g in self._events if g < gen - 8]:
                del self._events[old]
            ev = self._events[gen] = asyncio.Event()
        return ev

    def open(self, gen: int) -> None:
        """The awaited work of generation ``gen`` is done (or will not come)."""
        self._event(gen).set()

    async def wait(self, gen: int) -> None:
        """Wait until ``open(gen)`` or the timeout; cancellable like any wait."""
        if not self.enabled or (self._scope is not None and self._scope.is_stale(gen)):
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event(gen).wait(), self.timeout_s)
