"""The dismissed speech over the agent that the next segment joins (voiceagent/stages/dismissed.py)."""

from __future__ import annotations

import numpy as np

from voiceagent.audio import PIPELINE_RATE
from voiceagent.events import TranscriptSegment
from voiceagent.stages.dismissed import JOIN_GAP_S, Dismissed, join


def seg(start_ms: float, end_ms: float, value: float, level_db: float | None = -20.0) -> TranscriptSegment:
    samples = int((end_ms - start_ms) * PIPELINE_RATE / 1000)
    return TranscriptSegment(
        t=0.0, gen=0, text="x", audio=np.full(samples, value, dtype=np.float32), start_ms=start_ms, end_ms=end_ms, level_db=level_db
    )


def test_join_puts_silence_in_gaps_and_overlapping_padding_once() -> None:
    a, b = seg(1000, 1500, 0.1), seg(1700, 2000, 0.2)
    clip = join([(s.start_ms, s.end_ms, s.audio) for s in (a, b)])
    assert len(clip) == 1000 * PIPELINE_RATE // 1000  # 1.0 s to 2.0 s
    assert np.all(clip[:8000] == np.float32(0.1)) and np.all(clip[8000:11200] == 0) and np.all(clip[11200:] == np.float32(0.2))
    c = seg(1400, 1800, 0.3)  # its padding reaches 100 ms back into a
    clip = join([(s.start_ms, s.end_ms, s.audio) for s in (a, c)])
    assert len(clip) == 800 * PIPELINE_RATE // 1000 and np.all(clip[8000:] == np.float32(0.3))


def test_a_segment_joins_the_dismissed_ones_just_before_it_and_not_those_long_before() -> None:
    held = Dismissed()
    assert held.with_held(seg(0, 500, 0.1)) is None  # nothing held: judged alone
    held.hold(seg(0, 500, 0.1, level_db=-25.0))
    joined = held.with_held(seg(900, 1400, 0.2, level_db=-18.0))
    assert joined is not None and joined.start_ms == 0 and joined.end_ms == 1400 and joined.text == "x"
    assert len(joined.audio) == 1400 * PIPELINE_RATE // 1000 and joined.level_db == -18.0  # the louder: the user's voice
    held.hold(joined)  # dismissed again: it replaces the segments it holds
    assert held.held == 1
    late = seg(1400 + JOIN_GAP_S * 1000 + 1, 3000, 0.3)
    assert held.with_held(late) is None and held.held == 0  # too long after: a new phrase
    held.hold(late)
    held.clear()
    assert held.with_held(seg(3100, 3500, 0.1)) is None
