"""Speech over the agent that was dismissed, kept a moment to be judged again with what follows.

Speech over a paused reply is judged by its transcript, one VAD segment at a time.  A short real
interruption with a comma in it ("Hey, wait.", "Hold on, please.") is often cut at the comma into
two segments, and Whisper hears each half alone worse than the whole: "Hey" and "wait" came out
as single words under the doubt threshold, each dismissed, and the reply went on.  So a dismissed
segment is kept here; when the next segment over the agent starts within :data:`JOIN_GAP_S` of it,
the two (and any before) are joined into one clip, its gaps as silence, and that clip is
transcribed again and judged instead of the new segment alone.  A listener's "Yeah, yeah. Right."
stays backchannels when joined; what changes is that split words are heard together.

Pure: the caller transcribes (:func:`join` gives the clip) and decides when to :meth:`clear`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Float32Array
from voiceagent.events import TranscriptSegment

__all__ = ["JOIN_GAP_S", "Dismissed", "join"]

JOIN_GAP_S = 1.0
"""Segments further apart than this (from the end of one, its tail padding included, to the start
of the next, its prefix padding included) are judged apart: a pause that long ends a phrase."""


def join(segments: list[tuple[float, float, Float32Array]]) -> Float32Array:
    """The audio of ``segments`` ((start ms, end ms, audio), in order) as one clip from the
    first's start: gaps as silence, overlaps once.  After a pause shorter than the prefix padding
    plus the tail (~400 ms) a segment's padding reaches back into audio the clip already holds,
    sometimes the end of the last word: kept twice, Whisper would hear that word twice."""
    parts: list[Float32Array] = []
    end = segments[0][0]
    for start, stop, audio in segments:
        if start >= end:
            gap = int((start - end) * PIPELINE_RATE / 1000)
            if gap:
                parts.append(np.zeros(gap, dtype=np.float32))
        else:
            audio = audio[int((end - start) * PIPELINE_RATE / 1000) :]
        parts.append(audio)
        end = max(end, stop)
    return np.concatenate(parts)


class Dismissed:
    """The dismissed segments over the agent that the next one may join (one session's)."""

    def __init__(self) -> None:
        self._held: list[TranscriptSegment] = []

    def with_held(self, seg: TranscriptSegment) -> TranscriptSegment | None:
        """``seg`` joined after the held segments it follows closely (its text still ``seg``'s:
        the caller transcribes the clip); None when none is held within :data:`JOIN_GAP_S`
        (those held are then forgotten)."""
        if self._held and seg.start_ms - self._held[-1].end_ms > JOIN_GAP_S * 1000:
            self._held = []
        if not self._held:
            return None
        segments = [*self._held, seg]
        levels = [s.level_db for s in segments if s.level_db is not None]
        clip = join([(s.start_ms, s.end_ms, s.audio) for s in segments])
        return dataclasses.replace(seg, audio=clip, start_ms=segments[0].start_ms, level_db=max(levels) if levels else None)

    def hold(self, seg: TranscriptSegment) -> None:
        """``seg`` was dismissed: keep it (a joined one replaces the segments it holds)."""
        if self._held and seg.start_ms <= self._held[0].start_ms:
            self._held = []
        self._held.append(seg)

    def clear(self) -> None:
        """The user took the turn, or nothing is judged any more: nothing is held."""
        self._held = []

    @property
    def held(self) -> int:
        return len(self._held)
