"""The agent's audio on its way into a call, and which of it the caller has heard.

The server sends audio ahead of time, each chunk followed by a named mark; PJSIP's clock thread
pulls one 20 ms frame at a time.  A mark is *passed* once every sample written before it has been
pulled: that is when the caller hears it (PJSIP's own jitter and the network add a few tens of
milliseconds, as on any phone line), and the gateway then echoes it to the server, as Twilio
does, so the server knows what was heard.  ``clear`` (a barge-in) drops what has not been pulled
and returns its marks, which are echoed too: the server ignores echoes of discarded audio.

Thread safety: ``write``/``clear`` come from the event loop's thread, ``pull`` from PJSIP's clock
thread; one lock guards the queue.  Nothing here blocks or allocates per sample.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from voiceagent.audio import Int16Array

__all__ = ["Playout"]


class Playout:
    """A FIFO of int16 samples at the call's rate, with marks at positions in it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chunks: deque[Int16Array] = deque()
        self._at = 0  # samples of the first chunk already pulled
        self._written = 0  # samples ever written (positions are counted in these)
        self._pulled = 0
        self._marks: deque[tuple[int, str]] = deque()  # (position after which it passes, name)

    def write(self, pcm: Int16Array) -> None:
        if len(pcm):
            with self._lock:
                self._chunks.append(pcm)
                self._written += len(pcm)

    def mark(self, name: str) -> None:
        """Mark the current end of what was written."""
        with self._lock:
            self._marks.append((self._written, name))

    def pull(self, n: int) -> tuple[Int16Array, list[str]]:
        """The next ``n`` samples (silence where nothing is queued) and the marks now passed."""
        out = np.zeros(n, dtype=np.int16)
        i = 0
        with self._lock:
            while i < n and self._chunks:
                chunk = self._chunks[0]
                take = min(n - i, len(chunk) - self._at)
                out[i : i + take] = chunk[self._at : self._at + take]
                i += take
                self._at += take
                if self._at == len(chunk):
                    self._chunks.popleft()
                    self._at = 0
            self._pulled += i
            passed = []
            while self._marks and self._marks[0][0] <= self._pulled:
                passed.append(self._marks.popleft()[1])
        return out, passed

    def clear(self) -> list[str]:
        """Drop every sample not yet pulled; returns the marks that will never pass by playing."""
        with self._lock:
            self._chunks.clear()
            self._at = 0
            self._written = self._pulled
            dropped = [name for _, name in self._marks]
            self._marks.clear()
        return dropped

    @property
    def queued(self) -> int:
        """Samples written and not yet pulled."""
        with self._lock:
            return self._written - self._pulled
