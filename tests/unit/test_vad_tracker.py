"""stages.vad.VadTracker: hysteresis over window probabilities (pure, no loop)."""

from __future__ import annotations

from collections.abc import Sequence

from voiceagent.stages.vad import VadTracker, VoiceEvent

W = 32.0
THRESHOLD = 0.5
MIN_SPEECH = 96.0  # three windows
STOP = 96.0


def feed_all(tracker: VadTracker, probs: Sequence[float], first_window: int = 0) -> list[tuple[int, VoiceEvent]]:
    """Feed windows ``first_window, first_window+1, ...``; returns (window index, event) pairs."""
    out: list[tuple[int, VoiceEvent]] = []
    for i, p in enumerate(probs, start=first_window):
        for ev in tracker.feed(p, (i + 1) * W, THRESHOLD, MIN_SPEECH, STOP):
            out.append((i, ev))
    return out


def only(events: list[tuple[int, VoiceEvent]], *kinds: str) -> list[tuple[int, VoiceEvent]]:
    return [(i, ev) for i, ev in events if ev.kind in kinds]


def test_start_after_min_speech_with_the_first_speech_window_start() -> None:
    tracker = VadTracker(W)
    events = feed_all(tracker, [0.1, 0.1, 0.9, 0.8, 0.6, 0.9])
    assert events == [(4, VoiceEvent("start", 2 * W))]  # decided at window 4, speech began at window 2's start
    assert tracker.in_speech


def test_no_start_before_min_speech() -> None:
    tracker = VadTracker(W)
    assert feed_all(tracker, [0.1, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1]) == []
    assert not tracker.in_speech


def test_candidate_needs_a_window_above_threshold_to_begin() -> None:
    tracker = VadTracker(W)
    assert feed_all(tracker, [0.4, 0.45, 0.4, 0.4]) == []  # above the stop level, below the start level


def test_a_short_dip_does_not_restart_the_candidate_and_does_not_count() -> None:
    tracker = VadTracker(W)
    # Two windows of dip (64 ms) inside a word: the candidate that began at window 0 goes on, and
    # the dip windows do not count towards the 96 ms, so the start is decided at window 4.
    events = feed_all(tracker, [0.9, 0.9, 0.1, 0.2, 0.9, 0.9])
    assert events == [(4, VoiceEvent("start", 0.0))]


def test_windows_between_the_stop_and_start_levels_extend_a_candidate() -> None:
    tracker = VadTracker(W)
    events = feed_all(tracker, [0.2, 0.6, 0.4, 0.6])
    assert events == [(3, VoiceEvent("start", 1 * W))]


def test_a_real_gap_restarts_the_candidate_from_the_next_speech_window() -> None:
    tracker = VadTracker(W)
    events = feed_all(tracker, [0.9, 0.9, 0.2, 0.1, 0.2, 0.9, 0.9, 0.9])
    assert events == [(7, VoiceEvent("start", 5 * W))]


def test_barge_in_length_is_reached_through_dips_whatever_their_alignment() -> None:
    # The shape silero gives a spoken word at some window alignments: strong, one low window, on.
    # A 320 ms requirement is met after 10 counted windows (3-6, 8, 10-14), not restarted at a dip.
    probs = [0.0, 0.2, 0.3, 1.0, 1.0, 1.0, 1.0, 0.0, 0.4, 0.2] + [1.0] * 10
    tracker = VadTracker(W)
    events = []
    for i, p in enumerate(probs):
        events += [(i, ev) for ev in tracker.feed(p, (i + 1) * W, THRESHOLD, 320.0, STOP)]
    assert events == [(14, VoiceEvent("start", 3 * W))]


def test_zero_min_speech_starts_on_the_first_speech_window() -> None:
    tracker = VadTracker(W)
    assert tracker.feed(0.9, W, THRESHOLD, 0.0, STOP) == [VoiceEvent("start", 0.0)]


def test_stop_after_stop_ms_of_silence_carries_the_end_of_the_last_speech_window() -> None:
    tracker = VadTracker(W)
    # windows 0-3 speech (start at 0), 4-6 silence: the stop comes with window 6
    events = feed_all(tracker, [0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1])
    assert events == [
        (2, VoiceEvent("start", 0.0)),
        (4, VoiceEvent("pause", 4 * W)),  # the first silent window announces the stop to come ...
        (6, VoiceEvent("stop", 4 * W)),  # ... at the same position
        (6, VoiceEvent("silence", 7 * W, 3 * W)),
    ]
    assert not tracker.in_speech


def test_pause_then_resume_when_speech_comes_back_before_the_stop() -> None:
    tracker = VadTracker(W)
    events = feed_all(tracker, [0.9, 0.9, 0.9, 0.1, 0.1, 0.9, 0.1, 0.9])
    assert events == [
        (2, VoiceEvent("start", 0.0)),
        (3, VoiceEvent("pause", 3 * W)),
        (5, VoiceEvent("resume", 5 * W)),  # the start of the window where speech came back
        (6, VoiceEvent("pause", 6 * W)),
        (7, VoiceEvent("resume", 7 * W)),
    ]
    assert tracker.in_speech


def test_short_dip_does_not_stop_speech() -> None:
    tracker = VadTracker(W)
    events = feed_all(tracker, [0.9, 0.9, 0.9, 0.1, 0.1, 0.9, 0.1, 0.1, 0.9])
    assert only(events, "start", "stop", "silence") == [(2, VoiceEvent("start", 0.0))]
    assert tracker.in_speech


def test_silence_ticks_after_stop_grow_until_speech_resumes() -> None:
    tracker = VadTracker(W)
    feed_all(tracker, [0.9, 0.9, 0.9])
    events = feed_all(tracker, [0.0] * 6, first_window=3)
    ticks = [ev for _, ev in events if ev.kind == "silence"]
    assert only(events, "stop", "silence")[0] == (5, VoiceEvent("stop", 3 * W))
    assert [t.silence_ms for t in ticks] == [96.0, 128.0, 160.0, 192.0]
    assert [t.audio_ms for t in ticks] == [6 * W, 7 * W, 8 * W, 9 * W]
    # speech again: a new start, and no more ticks once in speech
    events = feed_all(tracker, [0.9, 0.9, 0.9, 0.9, 0.9], first_window=9)
    assert events[-1] == (11, VoiceEvent("start", 9 * W))
    assert all(ev.kind == "silence" for _, ev in events[:-1])


def test_silence_ticks_stop_after_four_seconds() -> None:
    tracker = VadTracker(W)
    feed_all(tracker, [0.9, 0.9, 0.9])
    events = feed_all(tracker, [0.0] * 200, first_window=3)
    ticks = [ev.silence_ms for _, ev in events if ev.kind == "silence"]
    assert ticks[-1] <= 4000.0
    assert ticks[-1] > 4000.0 - W
    assert ticks == sorted(ticks)


def test_no_silence_ticks_before_any_speech() -> None:
    tracker = VadTracker(W)
    assert feed_all(tracker, [0.0] * 20) == []


def test_hysteresis_keeps_speech_above_threshold_minus_015() -> None:
    tracker = VadTracker(W)
    feed_all(tracker, [0.9, 0.9, 0.9])
    # 0.4 is below the threshold (0.5) but above threshold - 0.15 (0.35): still speech.
    events = feed_all(tracker, [0.4] * 10, first_window=3)
    assert events == []  # not even a pause
    assert tracker.in_speech
    # 0.3 is below 0.35: silence; the stop carries the end of the last 0.4 window.
    events = feed_all(tracker, [0.3, 0.3, 0.3], first_window=13)
    assert only(events, "pause", "stop") == [(13, VoiceEvent("pause", 13 * W)), (15, VoiceEvent("stop", 13 * W))]


def test_hysteresis_does_not_start_speech_below_threshold() -> None:
    tracker = VadTracker(W)
    assert feed_all(tracker, [0.45] * 10) == []
    assert not tracker.in_speech


def test_reset_forgets_everything() -> None:
    tracker = VadTracker(W)
    feed_all(tracker, [0.9, 0.9, 0.9, 0.0, 0.0, 0.0])
    tracker.reset()
    assert not tracker.in_speech
    assert tracker.window_ms == W
    assert feed_all(tracker, [0.0] * 5, first_window=6) == []  # no ticks: the stop was forgotten


def test_low_level_noise_between_dips_does_not_add_up_to_a_start() -> None:
    # One clear window, then windows just above the stop level between 64 ms dips (echo, hum):
    # the candidate lives on, but less than half of it is clear speech, so it never starts.
    tracker = VadTracker(W)
    probs = [0.6] + [0.1, 0.1, 0.36] * 9
    assert [ev for p_i, p in enumerate(probs) for ev in tracker.feed(p, (p_i + 1) * W, THRESHOLD, 320.0, STOP)] == []
    assert not tracker.in_speech


def test_no_silence_ticks_while_a_start_candidate_lives() -> None:
    tracker = VadTracker(W)
    events = feed_all(tracker, [0.9] * 5 + [0.1] * 6 + [0.6, 0.4, 0.1, 0.6])
    starts = [i for i, ev in events if ev.kind == "start"]
    assert len(starts) == 2
    # The second candidate began at window 11: no silence is reported from then until its start,
    # which is placed at that window, so the endpointer never counts speech as silence.
    assert events[-1] == (14, VoiceEvent("start", 11 * W))
    assert not [i for i, ev in events if ev.kind == "silence" and i >= 11]
