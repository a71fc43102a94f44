"""Echo cancellation (voiceagent/echo.py, and voiceagent/talk/echo.py for the talk) on WebRTC's
real module: the echo of a room goes, the user's voice over it stays, a phone line with no echo is
judged so and passed untouched, frames are carried whole, the reference queue is bounded, and the
talk's options decide when it runs.  No models."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.echo_path import FRAME, RATE, Room
from voiceagent.echo import FRAME as AEC_FRAME
from voiceagent.echo import EchoCanceller
from voiceagent.errors import MissingDependencyError
from voiceagent.talk import TalkOptions
from voiceagent.talk.echo import EchoCancelledMicrophone, cancel_echo


def _voice(seconds: float, seed: int, f0: float = 140.0) -> np.ndarray[Any, Any]:
    """A voice-like signal: a buzz at ``f0`` with harmonics, shaped into syllables of 200 ms."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    pitch = f0 * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    buzz = sum(np.sin(k * phase) / k for k in range(1, 20)) + 0.1 * rng.standard_normal(len(t))
    syllables = np.clip(np.sin(2 * np.pi * 2.5 * t), 0, None)
    return np.asarray(buzz * syllables * 4000)


def _db(x: np.ndarray[Any, Any]) -> float:
    return float(10 * np.log10(np.mean(np.asarray(x, dtype=np.float64) ** 2) + 1e-9))


Pcm = np.ndarray[Any, Any]


def _through_room(canceller: EchoCanceller | None, far: Pcm, near: Pcm, room: Room) -> Pcm:
    """20 ms at a time, as a sound card: the speaker plays ``far``, the microphone hears ``near``
    plus the room's echo of it; returns what the microphone (cancelled or not) gives."""
    out = []
    for i in range(0, len(far) - FRAME + 1, FRAME):
        block = far[i : i + FRAME].astype(np.int16)
        room.played(block, RATE)
        if canceller is not None:
            canceller.played(block, RATE)
        heard = np.clip(near[i : i + FRAME] + room.echo(FRAME), -32768, 32767).astype(np.int16)
        out.append(canceller.heard(heard) if canceller is not None else heard)
    return np.concatenate(out)


def test_the_rooms_echo_is_removed_and_the_users_voice_over_it_stays() -> None:
    far = _voice(8.0, seed=1)
    near = np.zeros_like(far)
    user = slice(5 * RATE, 7 * RATE)
    near[user] = _voice(2.0, seed=2, f0=220.0) * 0.7
    room = Room(gain_db=-3.0, delay_s=0.06)
    raw = _through_room(None, far, near, Room(gain_db=-3.0, delay_s=0.06))
    clean = _through_room(EchoCanceller(), far, near, room)
    assert len(clean) == len(raw)
    echo_only = slice(2 * RATE, 5 * RATE)  # after two seconds to converge, before the user speaks
    assert _db(raw[echo_only]) - _db(clean[echo_only]) >= 20, (_db(raw[echo_only]), _db(clean[echo_only]))
    # Over the echo, the user's voice comes through within a few dB; the echo alone did not.
    assert _db(clean[user]) >= _db(near[user]) - 10, (_db(clean[user]), _db(near[user]))
    assert _db(clean[user]) - _db(clean[echo_only]) >= 10


def test_a_microphone_read_late_and_in_bursts_keeps_its_echo_removed() -> None:
    """A busy event loop reads the microphone late: its blocks wait, then come in a burst, while
    the speaker's reference went on arriving in real time.  The two stay in step by their frame
    counts: handing the module all the reference queued at each read (the first version) left 5-7
    dB of the echo's 29 removed with stalls of 1-1.5 s."""
    far = _voice(12.0, seed=1)
    room = Room(gain_db=-3.0, delay_s=0.06)
    raw_room = Room(gain_db=-3.0, delay_s=0.06)
    canceller = EchoCanceller()
    raw, clean, waiting = [], [], []
    for n, i in enumerate(range(0, len(far) - FRAME + 1, FRAME), start=1):
        block = far[i : i + FRAME].astype(np.int16)
        room.played(block, RATE)
        raw_room.played(block, RATE)
        canceller.played(block, RATE)
        waiting.append(np.clip(room.echo(FRAME), -32768, 32767).astype(np.int16))
        raw.append(np.clip(raw_room.echo(FRAME), -32768, 32767).astype(np.int16))
        if n > 100 and n % 150 < 50:  # after 2 s, a 1 s stall every 3 s
            continue
        clean += [canceller.heard(h) for h in waiting]
        waiting = []
    echo = slice(3 * RATE, 11 * RATE)
    removed = _db(np.concatenate(raw)[echo]) - _db(np.concatenate(clean)[echo])
    assert removed >= 20, removed


def test_a_line_that_returns_nothing_is_judged_so_and_the_callers_voice_then_passes_untouched(caplog: pytest.LogCaptureFixture) -> None:
    """A phone line with no echo (a handset): the agent talks for a second with nothing coming
    back, the line is judged ``none``, and a caller interrupting 5 s in (the syllables of this
    voice leave it loud a quarter of the time) is passed as it came.  On the canceller alone (the
    control) the same interruption comes through damped: AEC3 has not learnt yet that nothing
    comes back."""
    far = _voice(8.0, seed=1)
    near = np.zeros_like(far)
    caller = slice(5 * RATE, 7 * RATE)
    near[caller] = _voice(2.0, seed=2, f0=220.0) * 0.7
    line = EchoCanceller(line=True, label="twilio stream MZ1")
    assert line.verdict is None
    with caplog.at_level(logging.INFO, logger="voiceagent.echo"):
        passed = _through_room(line, far, near, Room(gain_db=-200.0, delay_s=0.06))
    assert line.verdict == "none"
    assert [r.getMessage() for r in caplog.records] == ["twilio stream MZ1: no echo on the line"]
    expected = np.clip(near, -32768, 32767).astype(np.int16)[: len(passed)]
    assert np.array_equal(passed[caller], expected[caller])
    damped = _through_room(EchoCanceller(), far, near, Room(gain_db=-200.0, delay_s=0.06))
    assert _db(damped[caller]) < _db(expected[caller]) - 1, (_db(damped[caller]), _db(expected[caller]))


def test_a_callers_yeah_over_the_agents_first_second_does_not_make_the_line_an_echoing_one() -> None:
    """Found in a fresh clone's Twilio barge-in test: a backchannel early in the story made the
    line ``echo`` (ten loud frames were enough then), and the canceller, still learning, damped the
    caller's interruption after it."""
    far = _voice(10.0, seed=1)
    near = np.zeros_like(far)
    near[int(0.4 * RATE) : int(0.9 * RATE)] = _voice(0.5, seed=3, f0=200.0) * 0.7  # "yeah"
    caller = slice(7 * RATE, 9 * RATE)
    near[caller] = _voice(2.0, seed=2, f0=220.0) * 0.7
    line = EchoCanceller(line=True)
    passed = _through_room(line, far, near, Room(gain_db=-200.0, delay_s=0.06))
    assert line.verdict == "none"
    assert np.array_equal(passed[caller], np.clip(near, -32768, 32767).astype(np.int16)[caller])


def test_the_judges_correlation_finds_a_late_copy_and_not_another_voice() -> None:
    from voiceagent.echo import _peak_correlation

    ref = _voice(0.7, seed=1)
    late = np.zeros(3200)
    late[:] = ref[-3200 - 1600 : -1600] * 0.3  # what played 100 ms before, quieter
    other = _voice(0.2, seed=4, f0=230.0)[:3200]
    assert _peak_correlation(late, ref) > 0.99
    assert _peak_correlation(other, ref) < 0.3


def test_a_line_that_echoes_is_judged_so_and_its_echo_is_removed(caplog: pytest.LogCaptureFixture) -> None:
    far = _voice(5.0, seed=1)
    room = Room(gain_db=-6.0, delay_s=0.06)
    line = EchoCanceller(line=True, label="sip call c1")
    raw = _through_room(None, far, np.zeros_like(far), Room(gain_db=-6.0, delay_s=0.06))
    with caplog.at_level(logging.INFO, logger="voiceagent.echo"):
        clean = _through_room(line, far, np.zeros_like(far), room)
    assert line.verdict == "echo"
    assert [r.getMessage() for r in caplog.records] == ["sip call c1: echo on the line, cancelled"]  # once a call
    echo_only = slice(2 * RATE, 5 * RATE - FRAME)
    assert _db(raw[echo_only]) - _db(clean[echo_only]) >= 20, (_db(raw[echo_only]), _db(clean[echo_only]))


def test_a_line_is_not_judged_while_the_agent_is_quiet_and_a_microphone_is_never_judged() -> None:
    line = EchoCanceller(line=True)
    quiet = np.zeros(RATE * 3, dtype=np.int16)
    _through_room(line, quiet, quiet, Room(gain_db=-200.0, delay_s=0.06))
    assert line.verdict is None  # three seconds with nothing played: nothing to judge by
    assert EchoCanceller().verdict == "echo"


def test_frames_are_carried_whole_across_blocks_of_any_length() -> None:
    canceller = EchoCanceller()
    pcm = (_voice(0.1, seed=3)).astype(np.int16)
    outs = [canceller.heard(pcm[:150]), canceller.heard(pcm[150:170]), canceller.heard(pcm[170:])]
    assert [len(o) for o in outs] == [0, 160, len(pcm) - 160 - len(pcm) % AEC_FRAME]
    # The reference is resampled to 16 kHz and framed the same way, whatever the device's rate.
    canceller.played(np.zeros(24000, dtype=np.int16), 24000)  # 1 s at 24 kHz: 100 frames, less the resampler's delay
    assert 95 <= len(canceller._reference) <= 100, len(canceller._reference)


def test_a_microphone_nobody_reads_does_not_grow_the_reference_without_bound() -> None:
    canceller = EchoCanceller()
    for _ in range(700):  # 7 s of 10 ms blocks, and nothing heard
        canceller.played(np.zeros(AEC_FRAME, dtype=np.int16), RATE)
    assert len(canceller._reference) == 500 and canceller.dropped_reference == 200
    assert len(canceller.heard(np.zeros(AEC_FRAME, dtype=np.int16))) == AEC_FRAME
    assert len(canceller._reference) == 0


class _Mic:
    def __init__(self, blocks: list[np.ndarray[Any, Any]]) -> None:
        self._blocks = blocks
        self.exhausted = False

    async def frames(self) -> AsyncIterator[np.ndarray[Any, Any]]:
        for block in self._blocks:
            yield block
        self.exhausted = True


class _Speaker:
    def __init__(self) -> None:
        self.monitors: list[Any] = []


def test_cancel_echo_wires_the_speakers_monitor_and_keeps_the_microphones_end() -> None:
    speaker = _Speaker()
    mic = _Mic([np.zeros(320, dtype=np.int16)] * 3)
    wrapped = cancel_echo(mic, speaker)  # type: ignore[arg-type]
    assert isinstance(wrapped, EchoCancelledMicrophone) and speaker.monitors == [wrapped.canceller.played]

    async def read() -> list[int]:
        return [len(b) async for b in wrapped.frames()]

    assert asyncio.run(read()) == [320, 320, 320] and wrapped.exhausted


def test_echo_cancellation_is_on_for_the_sound_card_and_off_for_files_unless_asked() -> None:
    assert TalkOptions().cancels_echo()
    assert not TalkOptions(input=Path("q.wav")).cancels_echo() and not TalkOptions(output=Path("a.wav")).cancels_echo()
    assert TalkOptions(input=Path("q.wav"), echo_cancellation="on").cancels_echo()
    assert not TalkOptions(echo_cancellation="off").cancels_echo()
    with pytest.raises(ValueError, match="auto, on or off"):
        TalkOptions(echo_cancellation="yes").cancels_echo()


def test_without_livekit_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = importlib.import_module

    def no_livekit(name: str, package: str | None = None) -> Any:
        if name.startswith("livekit"):
            raise ModuleNotFoundError(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", no_livekit)
    with pytest.raises(MissingDependencyError, match=r"voiceagent\[clients\]"):
        EchoCanceller()
