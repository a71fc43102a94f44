"""The pause of one generation's playout while speech over it is judged.

The conversation core decides (:class:`~voiceagent.conversation.effects.PausePlayout`,
:class:`~voiceagent.conversation.effects.ResumePlayout`); its shell sets this object and the
playout stage waits on it before each chunk it sends.  A pause names its generation, so a later
generation (the answer to an interruption) is never held by it.
"""

from __future__ import annotations

import asyncio

__all__ = ["PlayoutHold"]


class PlayoutHold:
    """At most one paused generation; on the event loop only."""

    def __init__(self) -> None:
        self._gen: int | None = None
        self._going = asyncio.Event()
        self._going.set()

    @property
    def paused(self) -> int | None:
        """The generation paused now, if any."""
        return self._gen

    def pause(self, gen: int) -> None:
        self._gen = gen
        self._going.clear()

    def resume(self, gen: int) -> None:
        """End the pause of ``gen`` (a pause of another generation stays)."""
        if self._gen == gen:
            self._gen = None
            self._going.set()

    async def wait(self, gen: int) -> None:
        """Return at once unless ``gen`` is paused; else once it is resumed.  Cancellation: the
        wait ends, nothing else changes."""
        while self._gen == gen:
            await self._going.wait()
