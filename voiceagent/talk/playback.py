"""What a speaker has played, by the speaker's own clock.

:class:`PlaybackBuffer` sits between the conversation (which writes reply audio, tagged with its
assistant item) and an output device (which pulls fixed blocks and says when each block reaches
the listener: the sound card's DAC time, or a file's virtual clock).  From those timestamps it
answers "how many ms of item X has the listener heard by time t", which is what a barge-in
truncates the history to.

Thread-safe: a sound card pulls from its own audio thread, so every method takes a short lock and
never blocks otherwise.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from voiceagent.audio import Int16Array

__all__ = ["PlaybackBuffer"]


@dataclass
class _Piece:
    item_id: str
    pcm: Int16Array
    at: int = 0


@dataclass
class _Block:
    dac: float  # device time at which the first sample reaches the listener
    item_id: str
    n: int


class PlaybackBuffer:
    """Queued reply audio at ``rate`` Hz, and a ledger of what the device took and when."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._lock = threading.Lock()
        self._queue: deque[_Piece] = deque()
        self._blocks: deque[_Block] = deque()
        self._settled: dict[str, int] = {}  # samples of blocks entirely in the past
        self._last_end = 0.0

    def write(self, item_id: str, pcm: Int16Array) -> None:
        """Queue ``pcm`` (mono int16 at ``rate``) of assistant item ``item_id`` after what is queued."""
        if len(pcm):
            with self._lock:
                self._queue.append(_Piece(item_id, pcm))

    def pull(self, out: Int16Array, dac: float) -> None:
        """Fill ``out`` (the device's next block, played from device time ``dac``); silence when dry."""
        n = len(out)
        i = 0
        with self._lock:
            while i < n and self._queue:
                piece = self._queue[0]
                take = min(n - i, len(piece.pcm) - piece.at)
                out[i : i + take] = piece.pcm[piece.at : piece.at + take]
                self._blocks.append(_Block(dac + i / self.rate, piece.item_id, take))
                piece.at += take
                i += take
                if piece.at == len(piece.pcm):
                    self._queue.popleft()
            if i:
                self._last_end = max(self._last_end, dac + i / self.rate)
        out[i:] = 0

    def clear(self) -> set[str]:
        """Drop everything not yet handed to the device; returns the items that lost audio."""
        with self._lock:
            items = {p.item_id for p in self._queue}
            self._queue.clear()
        return items

    def played_ms(self, item_id: str, now: float) -> float:
        """Milliseconds of ``item_id`` that reached the listener by device time ``now``."""
        with self._lock:
            while self._blocks and self._blocks[0].dac + self._blocks[0].n / self.rate <= now:
                done = self._blocks.popleft()
                self._settled[done.item_id] = self._settled.get(done.item_id, 0) + done.n
            samples = float(self._settled.get(item_id, 0))
            for block in self._blocks:
                if block.dac >= now:
                    break
                if block.item_id == item_id:
                    samples += min(block.n, (now - block.dac) * self.rate)
        return samples * 1000.0 / self.rate

    def busy(self, now: float) -> bool:
        """True while audio is queued or the device has not finished playing what it took."""
        with self._lock:
            return bool(self._queue) or self._last_end > now
