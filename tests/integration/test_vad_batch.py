"""Silero batched across sessions gives the VAD events of one call per session (real model, real speech)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiceagent.audio import int16_to_float, read_wav, resample
from voiceagent.backends.silero import SileroVad
from voiceagent.stages.vad import VadTracker, VoiceEvent

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

CLIPS = ("two_turns", "backchannel", "pause_mid")
FRAMES = (320, 480, 800)  # 20, 30 and 50 ms messages: the windows of the streams do not line up


def _frames(path: Path, size: int) -> list[np.ndarray]:
    pcm, rate = read_wav(path)
    audio = int16_to_float(resample(pcm, rate, 16000))
    return [audio[i : i + size] for i in range(0, len(audio), size)]


def _events(probs: list[float]) -> list[VoiceEvent]:
    tracker = VadTracker()
    out: list[VoiceEvent] = []
    for i, p in enumerate(probs):
        out += tracker.feed(p, (i + 1) * tracker.window_ms, 0.5, 96, 160)
    return out


def test_batched_sessions_get_the_probabilities_and_events_of_their_own_calls(speech: dict[str, Path]) -> None:
    vad = SileroVad()
    clips = [_frames(speech[name], size) for name, size in zip(CLIPS, FRAMES, strict=True)]
    alone = []
    for frames in clips:
        stream = vad.stream()
        alone.append([p for f in frames for p in stream.process(f)])
    streams = [vad.stream() for _ in clips]
    together: list[list[float]] = [[] for _ in clips]
    for k in range(max(len(f) for f in clips)):  # round k: every session still talking sends its k-th frame
        jobs = [(i, clips[i][k]) for i in range(len(clips)) if k < len(clips[i])]
        results = vad.process_many([(streams[i], frame) for i, frame in jobs])
        for (i, _), probs in zip(jobs, results, strict=True):
            together[i] += probs
    for i, name in enumerate(CLIPS):
        assert len(together[i]) == len(alone[i]) > 50, name
        np.testing.assert_allclose(together[i], alone[i], atol=1e-4, err_msg=name)
        events = _events(together[i])
        assert events == _events(alone[i]), name
        assert [e.kind for e in events].count("start") >= 1, name  # real speech was found
