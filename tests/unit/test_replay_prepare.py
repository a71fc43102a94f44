"""voiceagent.replay: a file is read, segmented and resampled off the event loop, so several
replays on one loop do not starve each other's opening handshakes (the 8-client soak lost 1-3
connections to the client's own loop before this)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from voiceagent import replay
from voiceagent.audio import write_wav


class PreparedError(Exception):
    pass


def test_a_file_is_prepared_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[threading.Thread] = []

    def prepare(*args: Any) -> Any:
        seen.append(threading.current_thread())
        raise PreparedError  # stop before any connection: only where this ran is tested

    monkeypatch.setattr(replay, "_prepare", prepare)
    with pytest.raises(PreparedError):
        asyncio.run(replay.replay_file("ws://127.0.0.1:9/v1/realtime", "unused.wav"))
    assert seen and seen[0] is not threading.main_thread()


def test_prepare_gives_the_turns_and_the_audio_at_the_wire_rate(tmp_path: Path) -> None:
    rate = 16000
    tone = (np.sin(np.arange(rate) * 2 * np.pi * 220 / rate) * 8000).astype(np.int16)
    pcm = np.concatenate([np.zeros(rate // 2, np.int16), tone, np.zeros(rate * 2, np.int16), tone, np.zeros(rate // 2, np.int16)])
    path = tmp_path / "two.wav"
    write_wav(path, pcm, rate)
    turns, out = replay._prepare(path, tail_s=1.0, turn_gap_s=1.5)
    assert len(turns) == 2
    assert len(out) == round(len(pcm) * replay.WIRE_RATE / rate) + replay.WIRE_RATE


def test_a_noisy_file_takes_its_turns_from_the_clean_one_it_was_mixed_from(tmp_path: Path) -> None:
    from benchmarks.common.noise import mix

    rate = 16000
    tone = (np.sin(np.arange(rate) * 2 * np.pi * 220 / rate) * 8000).astype(np.int16)
    clean = np.concatenate([np.zeros(rate // 2, np.int16), tone, np.zeros(rate * 2, np.int16), tone, np.zeros(rate // 2, np.int16)])
    rng = np.random.default_rng(3)
    noisy = mix(clean, (rng.standard_normal(rate * 3) * 3000).astype(np.int16), rate, 5.0)
    write_wav(tmp_path / "clean.wav", clean, rate)
    write_wav(tmp_path / "noisy.wav", noisy, rate)
    own, _ = replay._prepare(tmp_path / "noisy.wav", tail_s=0.0, turn_gap_s=1.5)
    truth, out = replay._prepare(tmp_path / "noisy.wav", tail_s=0.0, turn_gap_s=1.5, truth=tmp_path / "clean.wav")
    assert len(own) == 1  # the noise fills the gap: one long "turn"
    assert [(round(a, 1), round(b, 1)) for a, b in truth] == [(0.5, 1.5), (3.5, 4.5)]
    assert len(out) == round(len(noisy) * replay.WIRE_RATE / rate)  # the noisy audio is what is sent
