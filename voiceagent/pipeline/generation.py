"""The generation counter that scopes every attempt at answering.

Each new response (confirmed or speculative) and each cancellation moves the session to a new
generation.  Work tagged with an older generation is stale: channels drop it and stages cancel it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["GenerationScope", "Generations"]


class Generations(Protocol):
    """The read side of a session's generation counter: what stages, channels and gates get.

    Only the session's conversation core (:class:`voiceagent.conversation.core.ConversationCore`)
    moves the :class:`GenerationScope` on; a stage that needs a new generation asks the core."""

    @property
    def current(self) -> int: ...

    def is_stale(self, gen: int) -> bool: ...

    def subscribe(self, listener: Callable[[int], None]) -> None: ...


class GenerationScope:
    """A monotonically increasing generation number with listeners for each bump."""

    def __init__(self) -> None:
        self._current = 0
        self._floor = 0
        self._listeners: list[Callable[[int], None]] = []

    @property
    def current(self) -> int:
        return self._current

    def is_stale(self, gen: int) -> bool:
        """True when ``gen`` was cancelled (it is below the lowest live generation)."""
        return gen < self._floor

    def next(self) -> int:
        """Open a new generation and make every earlier one stale; listeners are told at once.
        A cancellation (barge-in, a withdrawn speculation) is a move like any other: nothing may
        go on working for the earlier generations."""
        self._current += 1
        self._floor = self._current
        for listener in list(self._listeners):
            listener(self._current)
        return self._current

    def subscribe(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(new_floor)`` synchronously on every bump."""
        self._listeners.append(listener)
