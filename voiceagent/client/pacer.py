"""Audio out at the pace of a microphone: each chunk leaves when its audio would have been spoken.

:class:`Pacer` cuts audio into ``chunk_ms`` chunks and hands each to an injected ``send`` at its
time on an injected clock (``clock``, ``sleep``: ``time.monotonic`` and ``asyncio.sleep`` unless
a test gives fakes).  Chunk *k*'s time is the stream's start plus the audio before it, divided by
``speed``; the stream is continuous across calls, so a caller can speak, then send silence, on
one clock.

Falling behind (a busy machine): with ``catch_up`` (default) late chunks go out at once until the
stream is back on its schedule, which keeps the audio's timeline (what a latency measurement
needs); without it the schedule restarts from now, so there is no burst (what a live microphone
does).  Either way each chunk is preceded by one ``sleep`` (of 0 when late), so a sender that has
fallen behind still lets the connection's reader run.

Cancellation: ``CancelledError`` from ``sleep`` or ``send`` propagates, never swallowed.  A chunk
cancelled while it waits is not sent, and the stream stays where it was: the next chunk given
takes its time slot.  A chunk cancelled inside ``send`` counts as not sent either (whether its
bytes left is ``send``'s matter).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from voiceagent.audio import Int16Array
from voiceagent.transports.realtime_wire import WIRE_RATE

__all__ = ["Pacer"]


class Pacer:
    """Paced audio out; see the module docstring.  ``start``: the stream's time origin on
    ``clock`` (None: when its first chunk is sent)."""

    def __init__(
        self,
        send: Callable[[Int16Array], Awaitable[None]],
        *,
        rate: int = WIRE_RATE,
        chunk_ms: int = 20,
        speed: float = 1.0,
        catch_up: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        start: float | None = None,
    ) -> None:
        if speed <= 0 or chunk_ms <= 0:
            raise ValueError(f"speed and chunk_ms must be positive (got {speed}, {chunk_ms})")
        self._send = send
        self.rate = rate
        self.step = rate * chunk_ms // 1000
        """Samples per chunk."""
        self.speed = speed
        self.catch_up = catch_up
        self._clock = clock
        self._sleep = sleep
        self._due = start
        self.sent_samples = 0
        """Samples sent so far."""

    async def chunk(self, pcm: Int16Array) -> float:
        """Send ``pcm`` (one chunk, of any length) at its time; returns the clock once it was sent."""
        due = self._clock() if self._due is None else self._due
        ahead = due - self._clock()
        await self._sleep(max(0.0, ahead))
        if ahead <= 0 and not self.catch_up:
            due = self._clock()
        await self._send(pcm)
        self._due = due + len(pcm) / self.rate / self.speed
        self.sent_samples += len(pcm)
        return self._clock()

    async def play(self, pcm: Int16Array) -> list[float]:
        """Send all of ``pcm`` in chunks of :attr:`step` samples; returns when each was sent."""
        return [await self.chunk(pcm[i : i + self.step]) for i in range(0, len(pcm), self.step)]
