"""Bounded channels between stages.

A :class:`Channel` is an asyncio queue with a fixed capacity: ``put`` waits while it is full
(back-pressure, never silent loss).  Its one filter is generational: a
:class:`~voiceagent.events.ResponseEvent` whose generation the session has moved past is dropped
on ``get`` — that answer was cancelled, so nobody downstream may act on it.  Input events are never
dropped.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from voiceagent.events import Event, ResponseEvent
from voiceagent.pipeline.generation import Generations

__all__ = ["Channel"]

E = TypeVar("E", bound=Event)
T = TypeVar("T")


class _Queue(asyncio.Queue[T]):
    """An asyncio queue whose newest item can be read and replaced (through the ``_queue`` deque
    that asyncio.Queue's subclassing hooks, ``_init``/``_put``/``_get``, are written against)."""

    _queue: collections.deque[T]

    def newest(self) -> T | None:
        return self._queue[-1] if self._queue else None

    def replace_newest(self, item: T) -> None:
        self._queue[-1] = item


class Channel(Generic[E]):
    """A bounded FIFO of events.

    Cancellation: cancelling a waiting ``put`` leaves the channel unchanged (the item was not
    added); cancelling a waiting ``get`` loses no item (nothing was taken).
    """

    def __init__(
        self,
        name: str,
        capacity: int,
        scope: Generations,
        *,
        on_wait: Callable[[str, float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_wait(name, seconds)`` is told how long each item that ``get`` returns sat in the
        channel (metrics: a stage that falls behind shows here first)."""
        if capacity < 1:
            raise ValueError("a channel needs a capacity of at least 1")
        self.name = name
        self.capacity = capacity
        self._scope = scope
        self._on_wait = on_wait
        self._clock = clock
        self._queue: _Queue[tuple[float, E]] = _Queue(maxsize=capacity)
        self.dropped_stale = 0
        self.merged = 0

    def __len__(self) -> int:
        return self._queue.qsize()

    async def put(self, item: E) -> None:
        """Add ``item``, waiting while the channel is full."""
        await self._queue.put((self._clock(), item))

    async def put_or_merge(self, item: E, merge: Callable[[E, E], E | None]) -> None:
        """Fold ``item`` into the newest item still waiting in the channel when ``merge(newest,
        item)`` gives the two as one (which keeps the newest's place and time in the queue), else
        :meth:`put` it.  For user audio: while the next stage is busy, the messages that pile up
        behind it go on as one frame, not one trip through every stage each."""
        tail = self._queue.newest()
        if tail is not None:
            merged = merge(tail[1], item)
            if merged is not None:
                self._queue.replace_newest((tail[0], merged))
                self.merged += 1
                return
        await self.put(item)

    def put_nowait(self, item: E) -> None:
        """Add ``item`` or raise :class:`asyncio.QueueFull`."""
        self._queue.put_nowait((self._clock(), item))

    async def get(self) -> E:
        """Take the next item that is still current."""
        while True:
            t, item = await self._queue.get()
            if self._is_stale(item):
                self.dropped_stale += 1
                continue
            if self._on_wait is not None:
                self._on_wait(self.name, self._clock() - t)
            return item

    def drop_stale(self) -> int:
        """Remove stale response events now (frees room for current ones); returns how many."""
        keep: list[tuple[float, E]] = []
        dropped = 0
        while not self._queue.empty():
            entry = self._queue.get_nowait()
            if self._is_stale(entry[1]):
                dropped += 1
            else:
                keep.append(entry)
        for entry in keep:
            self._queue.put_nowait(entry)
        self.dropped_stale += dropped
        return dropped

    def _is_stale(self, item: E) -> bool:
        return isinstance(item, ResponseEvent) and self._scope.is_stale(item.gen)
