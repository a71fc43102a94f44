"""The listener's heard clock: where playback is, and the silence inside a reply."""

from __future__ import annotations

import pytest

from voiceagent.playback import ListenerTimeline


def test_chunks_sent_ahead_play_back_to_back_without_a_gap() -> None:
    tl = ListenerTimeline()
    assert tl.schedule(0.0, 1.0) == 0.0
    assert tl.schedule(0.6, 1.0) == 1.0  # sent 0.4 s before the first ended: it follows it
    assert tl.schedule(1.6, 0.5) == 2.0
    assert tl.gaps_ms == 0.0
    assert tl.heard_ms(2.5) == pytest.approx(2500.0)


def test_a_chunk_sent_after_the_one_before_ended_counts_the_silence() -> None:
    tl = ListenerTimeline()
    tl.schedule(0.0, 1.0)
    assert tl.schedule(1.25, 1.0) == 1.25  # the audio was late: 250 ms of silence
    tl.schedule(2.0, 0.5)  # in time again
    assert tl.gaps_ms == pytest.approx(250.0)
    assert tl.heard_ms(3.0) == pytest.approx(2500.0)


def test_heard_ms_agrees_with_summing_every_segment_at_any_instant() -> None:
    """The binary search gives what adding up the segments one by one gives, gaps included."""
    tl = ListenerTimeline()
    sends = [(0.0, 0.5), (0.1, 0.5), (0.2, 0.25), (2.0, 0.5), (2.1, 0.02), (5.0, 1.0)]  # (sent at, seconds)
    for now, dur in sends:
        tl.schedule(now, dur)

    def summed(now: float) -> float:
        return sum(min(now - start, dur) for start, dur in tl.segments if now > start) * 1000.0

    for k in range(0, 700):
        now = k / 100.0
        assert abs(tl.heard_ms(now) - summed(now)) < 1e-6, now
    assert tl.heard_ms(100.0) == tl.sent_ms
