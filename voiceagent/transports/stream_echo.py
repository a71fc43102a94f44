"""Echo cancellation for a phone stream the server only sends into (Twilio Media Streams).

The server never sees the phone's clock, but the stream carries it: the caller's audio comes in
20 ms frames on the media server's clock, and what the server sent plays out of that media
server's buffer on the same clock, from the moment it arrived.  So :class:`StreamEcho` keeps a
copy of that buffer: every sample sent is queued (:meth:`~StreamEcho.sent`), every sample heard
takes as many off its head, silence when it is empty, as the reference of what was playing
meanwhile (:meth:`~StreamEcho.heard`), and ``clear`` empties it (:meth:`~StreamEcho.cleared`), as
the media server empties its own.  The network's delay before that buffer is one fixed offset
more, which AEC3's delay estimation takes up.  The canceller judges the line as the SIP
gateway's does (:class:`~voiceagent.echo.EchoCanceller` with ``line=True``).

Sans-I/O; one per stream, called from the stream's one task (sent, heard and cleared in the
order they happen).  The queue holds at most what the media server would: the server sends a
reply a few seconds ahead at most (``playout.lead_ms``), and more than :data:`_MAX_QUEUED_S` is
dropped from the head, as stale.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.echo import EchoCanceller

__all__ = ["StreamEcho"]

_MAX_QUEUED_S = 60.0


class StreamEcho:
    """See the module docstring."""

    def __init__(self, label: str = "stream") -> None:
        self._canceller = EchoCanceller(line=True, label=label)  # it logs the line's verdict under ``label``, once
        self._queue: deque[Int16Array] = deque()
        self._queued = 0
        self._resampler: StreamResampler | None = None

    @property
    def verdict(self) -> str | None:
        """The line's verdict so far (:attr:`~voiceagent.echo.EchoCanceller.verdict`)."""
        return self._canceller.verdict

    def sent(self, pcm: Int16Array, rate: int) -> None:
        """``pcm`` (mono int16 at ``rate``) went to the media server, after all sent before it."""
        if rate != PIPELINE_RATE:
            if self._resampler is None or self._resampler.src_rate != rate:
                self._resampler = StreamResampler(rate, PIPELINE_RATE, quality="LQ")  # low delay: the reference stays close to the line
            pcm = self._resampler.process(pcm)
        if len(pcm):
            self._queue.append(pcm)
            self._queued += len(pcm)
        while self._queued > _MAX_QUEUED_S * PIPELINE_RATE:
            self._queued -= len(self._queue.popleft())

    def cleared(self) -> None:
        """The media server was told to drop what it has not played (``clear``)."""
        self._queue.clear()
        self._queued = 0

    def heard(self, pcm: Int16Array) -> Int16Array:
        """The caller's ``pcm`` (mono int16 at 16 kHz, as it came) → the same without the echo of
        what played meanwhile (whole 10 ms frames: see :meth:`EchoCanceller.heard`)."""
        self._canceller.played(self._take(len(pcm)), PIPELINE_RATE)
        return self._canceller.heard(pcm)

    def _take(self, n: int) -> Int16Array:
        out = np.zeros(n, dtype=np.int16)
        at = 0
        while at < n and self._queue:
            head = self._queue[0]
            take = min(n - at, len(head))
            out[at : at + take] = head[:take]
            at += take
            if take == len(head):
                self._queue.popleft()
            else:
                self._queue[0] = head[take:]
        self._queued -= at
        return out
