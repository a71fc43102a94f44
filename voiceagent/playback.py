"""What the listener has heard of one reply: the heard clock that barge-in and truncation read.

A leaf module: the reply that owns a :class:`ListenerTimeline` hands it to playout with its
release event, playout writes each chunk it sends into it, and the session reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ListenerTimeline"]


@dataclass
class ListenerTimeline:
    """Where the listener's playback is, assuming it plays each chunk as soon as it has it and the
    previous one has finished (so a late chunk shows up as a gap, not as heard audio)."""

    segments: list[tuple[float, float]] = field(default_factory=list)  # (start s, duration s)
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
        self.segments.append((start, dur_s))
        self.end_t = start + dur_s
        self.sent_ms += dur_s * 1000.0
        return start

    def heard_ms(self, now: float) -> float:
        """Milliseconds of this reply the listener has heard by ``now``."""
        total = 0.0
        for start, dur in self.segments:
            if now <= start:
                break
            total += min(now - start, dur)
        return total * 1000.0
