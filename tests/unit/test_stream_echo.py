"""Echo cancellation of a Twilio stream (voiceagent/transports/stream_echo.py) on WebRTC's real
module: a stand-in media server plays what the server sent from its buffer, 20 ms per frame the
caller sends, and a speakerphone returns it; the copy of that buffer keeps the reference in step,
``clear`` empties both, and a line that returns nothing passes untouched.  And the codec tells
the copy every sample it sends.  No models."""

from __future__ import annotations

import base64
import json
from collections import deque
from typing import Any

import numpy as np
import pytest

from tests.integration.echo_path import Room
from tests.unit.test_echo import _voice as syllables
from voiceagent.audio import mulaw_decode
from voiceagent.events import AudioDelta, PlaybackCleared, ResponseCreated
from voiceagent.transports.stream_echo import StreamEcho
from voiceagent.transports.twilio_codec import TwilioCodec

pytest.importorskip("livekit.rtc", reason="the canceller's library (scripts/setup.sh installs it)")

RATE = 16000
FRAME = RATE // 50  # 20 ms, as the media server sends the caller's audio
Pcm = np.ndarray[Any, Any]


def _voice(seconds: float, seed: int, f0: float = 140.0) -> Pcm:
    """A voice-like signal: a buzz with harmonics, shaped into syllables, loud most of the time."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t))) / RATE
    buzz = sum(np.sin(k * phase) / k for k in range(1, 20)) + 0.1 * rng.standard_normal(len(t))
    return np.asarray(buzz * (0.4 + 0.6 * np.abs(np.sin(2 * np.pi * 2.5 * t))) * 4000)


def _db(x: Pcm) -> float:
    return float(10 * np.log10(np.mean(np.asarray(x, dtype=np.float64) ** 2) + 1e-9))


class MediaServer:
    """Twilio's side: plays what it was sent from a buffer, one frame per frame it sends, and its
    caller is a speakerphone (``room``) that also says ``near``."""

    def __init__(self, room: Room, near: Pcm) -> None:
        self.buffer: deque[int] = deque()
        self.room = room
        self.near = near
        self.at = 0

    def receive(self, pcm: Pcm) -> None:
        self.buffer.extend(int(s) for s in pcm)

    def clear(self) -> None:
        self.buffer.clear()

    def next_frame(self) -> Pcm:
        played = np.array([self.buffer.popleft() if self.buffer else 0 for _ in range(FRAME)], dtype=np.int16)
        self.room.played(played, RATE)
        near = self.near[self.at : self.at + FRAME] if self.at < len(self.near) else np.zeros(FRAME)
        self.at += FRAME
        return np.clip(near + self.room.echo(FRAME), -32768, 32767).astype(np.int16)


def _call(echo: StreamEcho | None, far: Pcm, near: Pcm, room: Room, burst_s: float = 2.0, clear_at_s: float | None = None) -> Pcm:
    """The server sends ``far`` ahead in bursts of ``burst_s`` (as a reply is sent ahead of its
    playout); returns the caller's audio as the conversation gets it."""
    phone = MediaServer(room, near)
    sent = 0
    out = []
    for n in range(len(near) // FRAME):
        if sent < len(far) and len(phone.buffer) < RATE * 0.5:  # the next burst, before the buffer runs dry
            chunk = far[sent : sent + int(burst_s * RATE)].astype(np.int16)
            phone.receive(chunk)
            if echo is not None:
                echo.sent(chunk, RATE)
            sent += len(chunk)
        if clear_at_s is not None and n == int(clear_at_s * 50):
            phone.clear()
            if echo is not None:
                echo.cleared()
            sent = len(far)  # nothing more is sent after the barge-in
        frame = phone.next_frame()
        out.append(echo.heard(frame) if echo is not None else frame)
    return np.concatenate(out)


def test_the_speakerphones_echo_is_removed_against_the_copy_of_the_playout_buffer() -> None:
    far = syllables(8.0, seed=1)  # the talk's test voice: the same 20 dB asked of the same module
    near = np.zeros(len(far))
    echo = StreamEcho()
    raw = _call(None, far, near, Room(gain_db=-6.0, delay_s=0.08))
    clean = _call(echo, far, near, Room(gain_db=-6.0, delay_s=0.08))
    assert echo.verdict == "echo"
    settled = slice(2 * RATE, 7 * RATE)
    assert _db(raw[settled]) - _db(clean[settled]) >= 20, (_db(raw[settled]), _db(clean[settled]))


def test_after_a_clear_the_reference_is_silence_as_the_media_server_plays_nothing() -> None:
    echo = StreamEcho()
    echo.sent(np.full(RATE * 3, 1000, dtype=np.int16), RATE)
    assert np.all(echo._take(FRAME) == 1000)
    echo.cleared()
    assert not np.any(echo._take(FRAME)) and echo._queued == 0


def test_a_handset_that_returns_nothing_passes_the_caller_untouched_once_judged() -> None:
    far = _voice(8.0, seed=1)
    near = np.zeros(len(far))
    caller = slice(4 * RATE, 6 * RATE)
    near[caller] = _voice(2.0, seed=2, f0=220.0) * 0.7
    echo = StreamEcho()
    out = _call(echo, far, near, Room(gain_db=-200.0, delay_s=0.08))
    assert echo.verdict == "none"
    expected = np.clip(near, -32768, 32767).astype(np.int16)
    assert np.array_equal(out[caller], expected[caller])


def test_audio_sent_at_the_lines_rate_is_taken_at_the_pipelines() -> None:
    echo = StreamEcho()
    echo.sent(np.zeros(8000, dtype=np.int16), 8000)  # 1 s of μ-law's rate
    assert RATE - 0.1 * RATE <= echo._queued <= RATE, echo._queued  # less the resampler's delay (60 ms)


def test_the_codec_tells_every_sample_it_sends_at_the_lines_rate() -> None:
    codec = TwilioCodec(22050)
    start = {"event": "start", "streamSid": "MZ1", "start": {"streamSid": "MZ1", "callSid": "CA1"}}
    codec.decode(json.dumps(start))
    told: list[tuple[Pcm, int]] = []
    codec.sent_audio = lambda pcm, rate: told.append((pcm, rate))
    codec.encode(ResponseCreated(t=0.0, gen=1, response_id="r1", item_id="i1"))
    delta = AudioDelta(t=0.0, gen=1, response_id="r1", item_id="i1", pcm=np.full(2205, 3000, dtype=np.int16), rate=22050, offset_ms=0.0)
    messages = codec.encode(delta)
    messages += codec.media(np.full(160, 2000, dtype=np.int16))  # a keypad tone's frame
    payloads = [mulaw_decode(base64.b64decode(m["media"]["payload"])) for m in messages if m["event"] == "media"]
    assert [rate for _, rate in told] == [8000, 8000]
    assert [len(pcm) for pcm, _ in told] == [len(p) for p in payloads]
    assert codec.encode(PlaybackCleared(t=0.0, gen=1, response_id="r1", item_id="i1", heard_ms=0.0)) == [
        {"event": "clear", "streamSid": "MZ1"}
    ]
