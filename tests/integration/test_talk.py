"""``voiceagent talk``: files in place of the sound card run the very code a microphone would.

* the CLI over a WebSocket to a real server, and the in-process driver, each answer a spoken file
  into an output file (checked by transcribing what was "played");
* barge-in on both drivers cuts the stored assistant turn to what the speaker's clock played;
* without a sound card the command says what is missing and exits 2;
* the sound-card classes run against a fake PortAudio (the one seam mocked): callbacks on a
  foreign thread, resampling, and playback positions from the device's DAC timestamps.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.integration.local_talk import FrameClock, talk_file
from tests.profile import profile_config
from voiceagent.audio import read_wav, resample
from voiceagent.config import Config, ServerConfig
from voiceagent.conversation.history import AssistantItem
from voiceagent.replay import speech_turns
from voiceagent.session import Session
from voiceagent.talk.console import Console
from voiceagent.talk.conversation import Conversation, TalkResult
from voiceagent.talk.devices import FRAME_MS, FileSpeaker, SoundCardMicrophone, SoundCardSpeaker
from voiceagent.talk.local import talk_local
from voiceagent.talk.remote import talk_remote
from voiceagent.transports.server import VoiceAgentServer

ROOT = Path(__file__).resolve().parents[2]
SCALE = float(os.environ.get("VOICEAGENT_TEST_TIMEOUT_SCALE", "1"))
models = pytest.mark.models


async def _until(predicate: Callable[[], bool], within_s: float) -> None:
    """Wait for a condition that no event announces (a device thread, another task), with a deadline."""
    deadline = time.monotonic() + within_s * SCALE
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {within_s * SCALE:.1f} s")
        await asyncio.sleep(0.01)


def _words(text: str) -> set[str]:
    return {w.strip(".,!?;:'\"").lower() for w in text.split() if len(w.strip(".,!?;:'\"")) > 2}


def _voiced_s(pcm: np.ndarray[Any, Any], rate: int) -> float:
    """Seconds of 10 ms frames above -45 dBFS."""
    return sum(e - s for s, e in speech_turns(pcm, rate, turn_gap_s=0.05))


def _transcribe(engines: Any, pcm: np.ndarray[Any, Any], rate: int) -> str:
    audio = resample(pcm, rate, 16000).astype(np.float32) / 32768.0
    return str(engines.stt.transcribe(audio.astype(np.float32), "en"))


_MIC_RATE = 16000  # what a ``Microphone`` yields
_FRAME = _MIC_RATE * FRAME_MS // 1000


class _CuedMicrophone:
    """A long question, silence until the answer has played for ``heard_s``, then a backchannel
    over it ("Yeah, yeah. Right.": the answer pauses and goes on), then the user talks over it.

    The answer's start is a cue, not a fixed pause: on a loaded machine the first audio once came
    13.5 s after the question, long after a fixed script had interrupted nothing.  Frames are paced
    in real time as a microphone delivers them; once the script is said it yields silence and
    ``exhausted`` turns true (the ``Microphone`` contract).  ``playing`` reads the speaker.
    """

    def __init__(self, speech: dict[str, Path], playing: Callable[[], bool], heard_s: float = 0.5) -> None:
        def said(name: str, silence_s: float) -> np.ndarray[Any, Any]:
            pcm, rate = read_wav(speech[name])
            pcm = resample(pcm, rate, _MIC_RATE)
            return np.concatenate([pcm, np.zeros(int(silence_s * _MIC_RATE), dtype=np.int16)])

        self._question = _framed(said("long_story", 0.0))
        self._rest = _framed(np.concatenate([said("backchannel", 0.5), said("capital", 1.0)]))
        self._playing = playing
        self._heard_frames = round(heard_s * 1000 / FRAME_MS)
        self.exhausted = False

    async def frames(self) -> AsyncIterator[np.ndarray[Any, Any]]:
        tick = FrameClock().tick  # real-time pacing, as a microphone delivers
        silence = np.zeros(_FRAME, dtype=np.int16)

        for frame in self._question:
            await tick()
            yield frame
        heard = 0
        while heard < self._heard_frames:  # silence until the answer has been heard for a while
            await tick()
            heard = heard + 1 if self._playing() else 0
            yield silence
        for frame in self._rest:
            await tick()
            yield frame
        self.exhausted = True
        while True:
            await tick()
            yield silence


def _framed(pcm: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
    """``pcm`` as 20 ms frames, the last one padded with silence."""
    padded = np.concatenate([pcm, np.zeros(-len(pcm) % _FRAME, dtype=np.int16)])
    return list(padded.reshape(-1, _FRAME))


def _server_config() -> Config:
    return dataclasses.replace(profile_config(), server=ServerConfig(port=0))


def _story_config(cfg: Config) -> Config:
    """A long answer: the agent must still be talking when the interruption is decided, after the
    backchannel's pause and the interruption's own words, however slow the machine is today."""
    story = "You are a storyteller. Always answer with a long story of at least six sentences."
    # 64 tokens are about 18 s of speech; the interruption starts about 3 s after the first audio
    # (``_CuedMicrophone``) and is decided within seconds of that.  The answer to the
    # interruption, which the talk waits for in real time, is as long: more tokens only make the
    # test slower (96 took 44 s).
    return dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, instructions=story, max_tokens=64))


# ---------------------------------------------------------------------- no sound card


def _has_sound_card() -> bool:
    try:
        import sounddevice as sd

        return any(d["max_input_channels"] or d["max_output_channels"] for d in sd.query_devices())
    except OSError:
        return False


@pytest.mark.skipif(_has_sound_card(), reason="this machine has a sound card")
def test_talk_without_sound_card_says_what_is_missing() -> None:
    cmd = [sys.executable, "-m", "voiceagent.cli", "talk"]
    for extra, missing in (([], "input"), (["--input", str(ROOT / "pyproject.toml")], None), (["--output", "/tmp/x.wav"], "input")):
        proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        if missing:
            assert f"no audio {missing} device found (PortAudio:" in proc.stderr and "use --input/--output files" in proc.stderr, (
                proc.stderr
            )
        else:  # not audio: ffmpeg cannot decode a TOML file
            assert "cannot decode" in proc.stderr, proc.stderr


# ---------------------------------------------------------------------- conversations


@models
def test_talk_cli_over_websocket(engines: Any, speech: dict[str, Path], run: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "reply.wav"
    question, q_rate = read_wav(speech["capital"])
    question_end_s = speech_turns(question, q_rate)[-1][1]

    async def scenario() -> tuple[int, str, str]:
        async with VoiceAgentServer(_server_config(), engines) as server:
            url = f"ws://127.0.0.1:{server.port}/v1/realtime"
            args = ["-m", "voiceagent.cli", "talk", "--url", url, "--input", str(speech["capital"]), "--output", str(out)]
            proc = await asyncio.create_subprocess_exec(sys.executable, *args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            stdout, stderr = await asyncio.wait_for(proc.communicate(), 90 * SCALE)
            return proc.returncode or 0, stdout.decode(), stderr.decode()

    rc, stdout, stderr = run(scenario(), timeout=120)
    assert rc == 0, (stdout, stderr)
    you = [line[5:] for line in stdout.splitlines() if line.startswith("you: ")]
    agent = [line[7:] for line in stdout.splitlines() if line.startswith("agent: ")]
    assert you and {"capital", "france"} & _words(you[0]), stdout
    assert agent and agent[0].strip() and "[" not in agent[0], stdout
    assert "first audio" in stdout  # the per-turn latency line
    pcm, rate = read_wav(out)
    assert rate == 24000
    # The speaker played in real time: silence while the question was asked, then the reply.
    voiced = speech_turns(pcm, rate, turn_gap_s=0.05)
    assert voiced and voiced[0][0] > question_end_s - 0.2, voiced
    assert _voiced_s(pcm, rate) > 0.8
    assert _words(_transcribe(engines, pcm, rate)) & _words(agent[0]), agent[0]


@models
def test_talk_in_process(engines: Any, speech: dict[str, Path], run: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "reply.mp3"  # any format ffmpeg writes
    result, text, _ = talk_file(engines, run, speech["weather"], out)
    user = [t for t in result.turns if t.role == "user"]
    agent = [t for t in result.turns if t.role == "assistant"]
    assert user and "moon" in _words(user[0].text), text
    assert agent and agent[0].status == "completed" and agent[0].text, text
    assert f"you: {user[0].text}" in text and f"agent: {agent[0].text}" in text
    assert agent[0].spans_ms.get("first_audio_sent", 0) > 0
    assert result.truncations == [] and result.errors == []
    pydub = pytest.importorskip("pydub")
    seg = pydub.AudioSegment.from_file(str(out)).set_channels(1).set_sample_width(2)
    pcm = np.frombuffer(seg.raw_data, dtype="<i2").astype(np.int16)
    assert _voiced_s(pcm, seg.frame_rate) > 0.8
    assert _words(_transcribe(engines, pcm, seg.frame_rate)) & _words(agent[0].text), agent[0].text


# ---------------------------------------------------------------------- barge-in


def _check_cut(result: TalkResult, item: Any) -> None:
    cut = result.truncations[0]
    assert isinstance(item, AssistantItem), item
    # Playback was cut mid-answer, and the stored turn holds exactly what the speaker played.  (The
    # reply pauses while the interruption's words are judged and the speaker plays out what it
    # holds, so the cut may fall at the end of what was sent; the rest of the answer never was.)
    assert 0 < cut.audio_end_ms <= item.audio_ms + 0.001, (cut, item.audio_ms)
    assert item.heard_ms is not None and abs(item.heard_ms - cut.audio_end_ms) <= 1.0, (item.heard_ms, cut)
    assert len(item.text) < len(item.full_text), (item.text, item.full_text)
    interrupted = next(t for t in result.turns if t.role == "assistant" and t.item_id == cut.item_id)
    assert interrupted.status == "cancelled" and interrupted.heard_ms == cut.audio_end_ms
    # The backchannel before the interruption made no turn of its own.
    assert not any("yeah" in t.text.lower() for t in result.turns if t.role == "user"), result.turns


@models
# Alone: beside two workers' models the story had sent only its first clause when the
# interruption came, so the cut fell at its end and nothing of the answer was left unheard.
@pytest.mark.serial
def test_talk_barge_in_in_process(engines: Any, speech: dict[str, Path], run: Callable[..., Any], tmp_path: Path) -> None:
    printed = io.StringIO()

    async def scenario() -> tuple[TalkResult, Any]:
        speaker = FileSpeaker(tmp_path / "out.wav", engines.tts.sample_rate)
        mic = _CuedMicrophone(speech, speaker.busy)
        speaker.start()
        try:
            async with Session(engines, _story_config(profile_config())) as session:
                result = await talk_local(session, mic, Conversation(speaker, Console(printed, live=False)))
                cut = result.truncations[0] if result.truncations else None
                return result, session.history.find(cut.item_id) if cut else None
        finally:
            await speaker.close()

    result, item = run(scenario(), timeout=150)
    assert len(result.truncations) == 1, printed.getvalue()
    _check_cut(result, item)
    assert "[interrupted after" in printed.getvalue()
    assert sum(1 for t in result.turns if t.role == "assistant" and t.status == "completed") >= 1, printed.getvalue()


@models
# Alone, as its browser, Twilio and Realtime siblings: beside two workers' models (first audio
# 2.8 s after the question) the backchannel's last word, "Right.", once became a turn of its own
# and cut the story; the cause is not found yet (the server logs at INFO were not captured).
@pytest.mark.serial
def test_talk_barge_in_over_websocket(engines: Any, speech: dict[str, Path], run: Callable[..., Any], tmp_path: Path) -> None:
    printed = io.StringIO()

    async def scenario() -> tuple[TalkResult, Any]:
        async with VoiceAgentServer(_story_config(_server_config()), engines) as server:
            speaker = FileSpeaker(tmp_path / "out.wav", 24000)
            mic = _CuedMicrophone(speech, speaker.busy)
            speaker.start()
            conv = Conversation(speaker, Console(printed, live=False))
            talk = asyncio.create_task(talk_remote(f"ws://127.0.0.1:{server.port}/v1/realtime", mic, conv))
            await _until(lambda: bool(server.sessions) or talk.done(), 20)
            sessions = list(server.sessions)  # the server's session object, to read its history
            try:
                result = await talk
            finally:
                await speaker.close()
            cut = result.truncations[0] if result.truncations else None
            return result, sessions[0].history.find(cut.item_id) if cut else None

    result, item = run(scenario(), timeout=150)
    assert len(result.truncations) == 1, printed.getvalue()
    _check_cut(result, item)


# ---------------------------------------------------------------------- sound card (fake PortAudio)


class _FakeStream:
    """Calls the callback from its own thread every block, as PortAudio does."""

    def __init__(self, kind: str, samplerate: int, blocksize: int | None = None, callback: Any = None, **_: Any) -> None:
        self.kind = kind
        self.samplerate = samplerate
        self.blocksize = blocksize or samplerate // 100
        self.callback = callback
        self.latency = 0.02
        self.played: list[np.ndarray[Any, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    @property
    def time(self) -> float:
        return time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            due = self._t0 + n * self.blocksize / self.samplerate
            time.sleep(max(0.0, due - time.monotonic()))
            if self.kind == "input":
                t = (np.arange(self.blocksize) + n * self.blocksize) / self.samplerate
                block = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).reshape(-1, 1)
                self.callback(block, self.blocksize, SimpleNamespace(inputBufferAdcTime=due), None)
            else:
                out = np.zeros((self.blocksize, 1), dtype=np.int16)
                self.callback(out, self.blocksize, SimpleNamespace(outputBufferDacTime=due + self.latency), None)
                self.played.append(out[:, 0].copy())
            n += 1


class _FakeSoundDevice:
    PortAudioError = type("PortAudioError", (Exception,), {})

    def __init__(self) -> None:
        self.streams: list[_FakeStream] = []

    def query_devices(self, kind: str) -> dict[str, Any]:
        return {"name": f"fake {kind}", "max_input_channels": 1, "max_output_channels": 1, "default_samplerate": 48000.0}

    def check_input_settings(self, samplerate: int, **_: Any) -> None:
        if samplerate != 48000:
            raise self.PortAudioError("Invalid sample rate")

    def InputStream(self, **kw: Any) -> _FakeStream:  # noqa: N802 - sounddevice's name
        self.streams.append(_FakeStream("input", **kw))
        return self.streams[-1]

    def OutputStream(self, **kw: Any) -> _FakeStream:  # noqa: N802 - sounddevice's name
        self.streams.append(_FakeStream("output", **kw))
        return self.streams[-1]


def test_sound_card_classes_with_fake_portaudio(run: Callable[..., Any]) -> None:
    sd: Any = _FakeSoundDevice()

    async def scenario() -> dict[str, Any]:
        mic = SoundCardMicrophone(sd)
        mic.open()
        got: list[np.ndarray[Any, Any]] = []
        async for frame in mic.frames():
            got.append(frame)
            if sum(len(f) for f in got) >= 16000:
                break
        mic.close()
        speaker = SoundCardSpeaker(sd)
        speaker.open()
        voice = (6000 * np.sin(2 * np.pi * 300 * np.arange(22050) / 22050)).astype(np.int16)  # 1 s at the voice's rate
        speaker.write("item_a", voice, 22050)
        await _until(lambda: speaker.played_ms("item_a") >= 400, 5)  # the fake device plays in real time on its thread
        cleared = speaker.clear()
        heard = speaker.played_ms("item_a")
        await _until(lambda: not speaker.busy(), 5)
        final = speaker.played_ms("item_a")
        speaker.close()
        return {"mic": np.concatenate(got), "rate": mic.rate, "cleared": cleared, "heard": heard, "final": final, "out": sd.streams[-1]}

    r = run(scenario(), timeout=20)
    assert r["rate"] == 48000  # 16 kHz refused: opened at the device rate, resampled by soxr
    spectrum = np.abs(np.fft.rfft(r["mic"][:16000].astype(np.float64)))
    assert abs(int(np.argmax(spectrum)) - 440) <= 2  # 1 s at 16 kHz: bin = Hz
    assert r["cleared"] == {"item_a"}
    # What was handed to the device before the clear still plays out; the position is the DAC's.
    assert 400 <= r["heard"] <= r["final"] <= 400 + 60, r
    played = np.concatenate(r["out"].played)
    assert abs(_voiced_s(played, 48000) * 1000 - r["final"]) < 30
