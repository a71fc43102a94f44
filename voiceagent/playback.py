"""What the listener has heard of one reply: the heard clock that barge-in and truncation read.

A leaf module: the reply that owns a :class:`ListenerTimeline` hands it to playout with its
release event, playout writes each chunk it sends into it, and the session reads it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["ListenerTimeline"]


@dataclass
class ListenerTimeline:
    """Where the listener's playback is, assuming it plays each chunk as soon as it has it and the
    previous one has finished (so a late chunk shows up as a gap, not as heard audio)."""

    segments: list[tuple[float, float]] = field(default_factory=list)  # (start s, duration s)
    _starts: list[float] = field(default_factory=list, repr=False)  # the segments' starts (ascending)
    _before: list[float] = field(default_factory=list, repr=False)  # seconds of audio before each segment
    end_t: float | None = None
    sent_ms: float = 0.0
    gaps_ms: float = 0.0
    """Silence inside the reply: each chunk that was sent after the one before it had finished
    playing adds the wait (the reply's audio was not ready in time)."""

    def schedule(self, now: float, dur_s: float) -> float:
        """Chunk of ``dur_s`` seconds sent at ``now``; returns when the listener starts it."""
        if self.end_t is not None and now > self.end_t:
            self.gaps_ms += (now - self.end_t) * 1000.0
        start = now if self.end_t is None else max(now, self.end_t)
        self._before.append(self.sent_ms / 1000.0)
        self._starts.append(start)
        self.segments.append((start, dur_s))
        self.end_t = start + dur_s
        self.sent_ms += dur_s * 1000.0
        return start

    def heard_ms(self, now: float) -> float:
        """Milliseconds of this reply the listener has heard by ``now`` (a binary search: the
        session asks for every message of user audio while a reply plays)."""
        i = bisect.bisect_left(self._starts, now) - 1  # the last segment started before now
        if i < 0:
            return 0.0
        start, dur = self.segments[i]
        return (self._before[i] + min(now - start, dur)) * 1000.0
