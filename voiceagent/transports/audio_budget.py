"""How far ahead of real time a client may send audio (``server.audio_burst_s``)."""

from __future__ import annotations

from voiceagent.clock import Clock
from voiceagent.errors import ProtocolError

__all__ = ["AudioBudget", "too_fast"]


def too_fast(burst_s: float, event_id: str | None = None) -> ProtocolError:
    """The error for a chunk of audio that :meth:`AudioBudget.allow` refused."""
    return ProtocolError(
        "input_audio_rate_exceeded",
        f"audio is arriving faster than real time (more than {burst_s:g} s ahead); this chunk was dropped",
        event_id=event_id,
    )


class AudioBudget:
    """Client audio counted against the time since the budget began (the session's clock)."""

    def __init__(self, clock: Clock, burst_s: float) -> None:
        """``burst_s``: how many seconds ahead of real time the client may be (0: no limit)."""
        self._clock = clock
        self._start = clock.now()
        self._burst_ms = burst_s * 1000.0
        self._ms = 0.0

    def allow(self, ms: float) -> bool:
        """Count ``ms`` of client audio; False (and not counted) if it would put the client more
        than ``burst_s`` ahead of real time since the budget began."""
        if self._burst_ms <= 0:
            return True
        elapsed_ms = (self._clock.now() - self._start) * 1000.0
        if self._ms + ms > elapsed_ms + self._burst_ms:
            return False
        self._ms += ms
        return True
