"""Phone calls recorded on the server's own disk (``server.recordings_dir``, off by default).

Per call, two files named ``call-ID-STAMP`` (the call's id, and when it began): ``.wav``, two
channels at 16 kHz (left the caller, right the agent), and ``.json``, the transcript with each
turn's timings (the user's speech by its place in the caller's audio; the agent's reply by when
its audio began, with the turn's latency spans).  Nothing leaves the machine: the folder is made
private to the server's user (0700, files 0600, never written through a link, never over another
file), and recordings older than ``server.recordings_keep_days`` are deleted at start-up and after
each call (only files named as recordings: the folder may hold others).

The call's clock starts with the caller's first audio (a SIP call rings before it has any), so a
call that was never answered leaves no recording.  The caller's channel is the audio as it
arrived, one chunk after the other; the agent's is placed at the moment each chunk went to the
phone, so the two line up.  On a barge-in the agent's channel holds what was sent, which is up to
``playout.lead_ms`` more than the caller heard before the phone cleared it.  A call longer than
``MAX_S`` keeps its first ``MAX_S`` seconds.  Files are written in an executor when the call has
ended, never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.clock import Clock
from voiceagent.errors import ConfigError
from voiceagent.events import (
    AudioDelta,
    Event,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDone,
    ResponseCreated,
    ResponseDone,
    TurnMetrics,
)

__all__ = ["MAX_S", "PREFIX", "CallRecorder", "check_folder", "prune"]

log = logging.getLogger(__name__)

MAX_S = 2 * 3600.0
"""A recording's longest: what memory holds for it (2 h: 460 MB at 16 kHz, two channels of 16 bits)."""
PREFIX = "call-"
"""Every recording's file name starts so; :func:`prune` deletes nothing else."""


@dataclass
class _Turn:
    role: str
    item_id: str
    text: str = ""
    start_ms: float | None = None
    end_ms: float | None = None
    status: str | None = None
    spans_ms: dict[str, float] = field(default_factory=dict)


class CallRecorder:
    """One call's recording (module docstring).  ``started``: the call's start on ``clock``."""

    def __init__(self, directory: Path, call_id: str, clock: Clock, started: float) -> None:
        self.directory = directory
        self.call_id = call_id
        self._clock = clock
        self._started = started
        self._wall = time.time()
        self.name = f"{PREFIX}{call_id}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(self._wall))}"
        self._voices: dict[str, StreamResampler] = {}  # a response's agent audio to 16 kHz, without a click between chunks
        self._caller: list[Int16Array] = []
        self._caller_n = 0
        self._agent = np.zeros(0, dtype=np.int16)
        self._agent_end = 0  # samples: where the agent's last chunk ended
        self._turns: list[_Turn] = []
        self._by_item: dict[str, _Turn] = {}
        self._by_response: dict[str, _Turn] = {}
        self._limit = int(MAX_S * PIPELINE_RATE)

    def _ms(self) -> float:
        return (self._clock.now() - self._started) * 1000.0

    def caller(self, pcm: Int16Array) -> None:
        """The caller's audio at 16 kHz, as it arrived."""
        room = self._limit - self._caller_n
        if room > 0 and len(pcm):
            chunk = pcm[:room].copy()
            self._caller.append(chunk)
            self._caller_n += len(chunk)

    def _agent_audio(self, ev: AudioDelta) -> None:
        if ev.rate != PIPELINE_RATE:
            voice = self._voices.get(ev.response_id)
            if voice is None:
                voice = self._voices[ev.response_id] = StreamResampler(ev.rate, PIPELINE_RATE)
            audio = voice.process(ev.pcm)
        else:
            audio = ev.pcm
        at = max(int((ev.t - self._started) * PIPELINE_RATE), self._agent_end, 0)
        end = min(at + len(audio), self._limit)
        if end <= at:
            return
        if end > len(self._agent):
            grown = np.zeros(min(max(end, 2 * len(self._agent)), self._limit), dtype=np.int16)
            grown[: len(self._agent)] = self._agent
            self._agent = grown
        self._agent[at:end] = audio[: end - at]
        self._agent_end = end

    def _turn(self, role: str, item_id: str, key: str | None = None) -> _Turn:
        turn = self._by_item.get(item_id)
        if turn is None:
            turn = self._by_item[item_id] = _Turn(role, item_id)
            self._turns.append(turn)
        if key is not None:
            self._by_response[key] = turn
        return turn

    def event(self, ev: Event) -> None:
        """A session event of the call: its audio and the transcript's turns."""
        if isinstance(ev, AudioDelta):
            self._agent_audio(ev)
            turn = self._by_response.get(ev.response_id)
            if turn is not None and turn.start_ms is None:
                turn.start_ms = round(self._ms(), 1)
        elif isinstance(ev, InputSpeechStarted):
            self._turn("caller", ev.item_id).start_ms = round(ev.audio_ms, 1)
        elif isinstance(ev, InputSpeechStopped):
            self._turn("caller", ev.item_id).end_ms = round(ev.audio_ms, 1)
        elif isinstance(ev, InputTranscriptDone):
            self._turn("caller", ev.item_id).text = ev.text
        elif isinstance(ev, ResponseCreated):
            self._turn("agent", ev.item_id, ev.response_id)
        elif isinstance(ev, ResponseDone):
            self._voices.pop(ev.response_id, None)
            turn = self._by_response.get(ev.response_id)
            if turn is not None:
                turn.text, turn.status = ev.text, str(ev.status.value)
                turn.end_ms = round(self._ms(), 1)
        elif isinstance(ev, TurnMetrics):
            turn = self._by_response.get(ev.response_id)
            if turn is not None:
                turn.spans_ms = dict(ev.spans)

    def transcript(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "started_at": round(self._wall, 3),
            "duration_s": round(self._ms() / 1000.0, 3),
            "channels": ["caller", "agent"],
            "rate": PIPELINE_RATE,
            "turns": [
                {
                    "role": t.role,
                    "text": t.text,
                    "start_ms": t.start_ms,
                    "end_ms": t.end_ms,
                    **({"status": t.status, "spans_ms": t.spans_ms} if t.role == "agent" else {}),
                }
                for t in self._turns
                if t.text or t.role == "agent"
            ],
        }

    async def save(self) -> tuple[Path, Path]:
        """Write ``NAME.wav`` and ``NAME.json`` (in an executor, with the joining of the audio);
        their paths."""
        caller, agent = list(self._caller), self._agent[: self._agent_end]
        transcript = self.transcript()
        return await asyncio.get_running_loop().run_in_executor(None, self._write, caller, agent, transcript)

    def _write(self, chunks: list[Int16Array], agent: Int16Array, transcript: dict[str, Any]) -> tuple[Path, Path]:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)  # a folder made before (by hand, or by an older server) is made private too
        caller = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
        frames = np.zeros((max(len(caller), len(agent)), 2), dtype="<i2")
        frames[: len(caller), 0] = caller
        frames[: len(agent), 1] = agent
        wav_path, json_path = self.directory / f"{self.name}.wav", self.directory / f"{self.name}.json"
        with _private(wav_path) as f, wave.open(f, "wb") as w:
            w.setnchannels(2)
            w.setsampwidth(2)
            w.setframerate(PIPELINE_RATE)
            w.writeframes(frames.data.cast("B"))  # the array's own buffer: no copy of a long call
        with _private(json_path) as f:
            f.write(json.dumps(transcript, indent=1).encode())
        return wav_path, json_path


def _private(path: Path) -> Any:
    """``path`` created for writing, readable by the server's user alone; never through a link
    and never over a file that is there (``FileExistsError``)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb")


def check_folder(folder: str | Path) -> None:
    """:class:`~voiceagent.errors.ConfigError` in one line unless ``folder`` (``~`` expanded) is
    a folder the server can make and write: ``serve`` asks before it loads its models, so a wrong
    ``server.recordings_dir`` is said at once, not after the first call is lost."""
    directory = Path(folder).expanduser()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"server.recordings_dir: cannot make {directory}: {exc.strerror or exc}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(f"server.recordings_dir: {directory} is not writable by this user")


def prune(folder: str | Path, keep_days: float, now: float | None = None) -> int:
    """Delete the recordings (``.wav``, ``.json``) in ``folder`` (``~`` expanded) older than
    ``keep_days``; how many files were deleted.  Blocking (file system): run it in an executor."""
    directory = Path(folder).expanduser()
    if not directory.is_dir():
        return 0
    cutoff = (time.time() if now is None else now) - keep_days * 86400.0
    gone = 0
    for path in directory.iterdir():
        if not (path.name.startswith(PREFIX) and path.suffix in (".wav", ".json")):
            continue  # not a recording: the folder may hold other files
        try:
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                gone += 1
        except FileNotFoundError:  # another call's prune took it first
            continue
    return gone
