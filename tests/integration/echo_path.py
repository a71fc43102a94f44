"""A room between ``voiceagent talk``'s speaker and its microphone, for the echo tests and
``benchmarks.echo`` (issue #70, item 2).

:class:`Room` is told every block the speaker plays (a speaker monitor) and adds it to what the
user says, as a laptop's microphone hears its own speakers: delayed (the output and input
buffers and the air), through a room's impulse response, at a level against the user's voice.
The impulse response is synthetic and said so: a direct path, then exponentially decaying noise
with the stated RT60 (no package here ships measured room responses), seeded, so every run hears
the same room.

:class:`TurnTakingMicrophone` says each question once the agent has finished its answer (the
speaker idle for ``gap_s``): a polite user who never talks over the agent, so any interruption
or extra user turn in the talk is the agent hearing itself.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.integration.local_talk import FrameClock
from voiceagent.audio import Int16Array, read_wav, resample, speech_level_db
from voiceagent.config import Config
from voiceagent.session import Session
from voiceagent.talk.console import Console
from voiceagent.talk.conversation import Conversation, TalkResult, Truncation
from voiceagent.talk.devices import FRAME_MS, FileSpeaker, Microphone
from voiceagent.talk.echo import cancel_echo
from voiceagent.talk.local import talk_local

RATE = 16000  # what a ``Microphone`` yields
FRAME = RATE * FRAME_MS // 1000


def room_response(rt60_s: float = 0.3, length_s: float = 0.25, seed: int = 7) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A synthetic room: a direct path, then a tail decaying 60 dB in ``rt60_s``; unit energy."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(length_s * RATE)) / RATE
    ir = rng.standard_normal(len(t)) * np.exp(-6.91 * t / rt60_s) * 0.3
    ir[0] += 1.0
    return np.asarray(ir / np.sqrt(np.sum(ir**2)))


class Room:
    """What the microphone hears of the speaker: ``played`` (a speaker monitor) → :meth:`echo`.

    ``gain_db`` scales the played signal (the response has unit energy); ``delay_s`` is the
    speaker-to-microphone delay."""

    def __init__(self, gain_db: float = -3.0, delay_s: float = 0.06, rt60_s: float = 0.3) -> None:
        self.ir = room_response(rt60_s)
        self.gain = 10 ** (gain_db / 20)
        self._played: list[np.ndarray[Any, np.dtype[np.float64]]] = [np.zeros(int(delay_s * RATE) + len(self.ir))]
        self._n_played = len(self._played[0])
        self._cursor = len(self._played[0]) - int(delay_s * RATE)  # first sample the microphone hears
        self._history = np.zeros(0)

    def played(self, pcm: Int16Array, rate: int) -> None:
        block = resample(pcm, rate, RATE).astype(np.float64) if rate != RATE else pcm.astype(np.float64)
        self._played.append(block)
        self._n_played += len(block)

    def echo(self, n: int) -> np.ndarray[Any, np.dtype[np.float64]]:
        """The next ``n`` samples of echo (zeros for what the speaker has not played yet)."""
        if len(self._played) > 1:
            self._history = np.concatenate([self._history, *self._played])
            self._played = []
        start = self._cursor - len(self.ir) + 1
        seg = self._history[max(0, start) : self._cursor + n]
        available = max(0, min(n, len(seg) - (len(self.ir) - 1)))
        out = np.zeros(n)
        if available:
            out[:available] = np.convolve(seg, self.ir, mode="valid")[:available] * self.gain
        self._cursor += available
        return out


class TurnTakingMicrophone:
    """Says ``questions`` one by one, each once the agent has been quiet for ``gap_s`` after it
    spoke (``busy``: a response in progress or audio playing; the first question at once), with
    ``room``'s echo of the speaker added to every frame (silence included); paced in real time.
    ``heard`` keeps every frame it yielded.  Once all are said and answered it yields silence, and
    ``exhausted`` turns true."""

    def __init__(self, questions: list[Path], busy: Callable[[], bool], room: Room | None, gap_s: float = 1.0) -> None:
        self._questions = [_at_rate(q) for q in questions]
        self._busy = busy
        self._room = room
        self._gap_frames = round(gap_s * 1000 / FRAME_MS)
        self.exhausted = False
        self.asked = 0
        """Questions begun so far."""
        self.speaking = False
        """True while a question's frames are being yielded."""
        self.heard: list[Int16Array] = []
        self.agent_only: list[Int16Array] = []
        """The frames heard while the agent's audio played and the user was silent: the echo."""
        self.user_level_db = speech_level_db(np.concatenate(self._questions).astype(np.float32) / 32768.0)

    def _frame(self, voice: Int16Array) -> Int16Array:
        mixed = voice.astype(np.float64) + (self._room.echo(len(voice)) if self._room is not None else 0.0)
        out = np.clip(mixed, -32768, 32767).astype(np.int16)
        self.heard.append(out)
        if not self.speaking and self._busy():
            self.agent_only.append(out)
        return out

    async def frames(self) -> AsyncIterator[Int16Array]:
        tick = FrameClock().tick  # real-time pacing, as a microphone delivers
        silence = np.zeros(FRAME, dtype=np.int16)

        for i, question in enumerate(self._questions):
            if i:
                spoke = idle = 0
                while not (spoke and idle >= self._gap_frames):  # the answer, then quiet
                    await tick()
                    if self._busy():
                        spoke, idle = 1, 0
                    else:
                        idle += 1
                    yield self._frame(silence)
            self.asked += 1
            self.speaking = True
            for start in range(0, len(question), FRAME):
                await tick()
                voice = question[start : start + FRAME]
                yield self._frame(np.concatenate([voice, np.zeros(FRAME - len(voice), dtype=np.int16)]))
            self.speaking = False
        self.exhausted = True
        while True:
            await tick()
            yield self._frame(silence)


def _at_rate(path: Path) -> Int16Array:
    pcm, rate = read_wav(path)
    return resample(pcm, rate, RATE) if rate != RATE else pcm


class _AfterCancelling:
    """The cancelled microphone, keeping what it yields while ``mic`` records echo alone."""

    def __init__(self, cancelled: Microphone, mic: TurnTakingMicrophone, busy: Callable[[], bool]) -> None:
        self._cancelled = cancelled
        self._mic = mic
        self._busy = busy
        self.agent_only: list[Int16Array] = []

    @property
    def exhausted(self) -> bool:
        return self._cancelled.exhausted

    async def frames(self) -> AsyncIterator[Int16Array]:
        async for pcm in self._cancelled.frames():
            if not self._mic.speaking and self._busy():
                self.agent_only.append(pcm)
            yield pcm


class _Watched(Conversation):
    """A conversation that tells when a barge-in cut a reply."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cut = asyncio.Event()

    def barge_in(self, item_id: str | None = None) -> list[Truncation]:
        cuts = super().barge_in(item_id)
        if cuts:
            self.cut.set()
        return cuts


@dataclass
class RoomTalk:
    """One talk through a room: what it printed, its result, and what the microphone heard."""

    result: TalkResult
    printed: str
    mic: TurnTakingMicrophone
    seconds: float
    left: list[Int16Array]
    """What the cancellation left of the echo alone (empty without cancellation)."""

    @property
    def self_interruptions(self) -> int:
        """Replies cut by a barge-in, plus user turns beyond the questions said: with a user who
        never talks over the agent, each is the agent hearing itself."""
        users = sum(1 for t in self.result.turns if t.role == "user")
        return len(self.result.truncations) + max(0, users - self.mic.asked)


async def talk_in_room(
    engines: Any,
    config: Config,
    questions: list[Path],
    *,
    room: Room | None,
    cancel: bool,
    out: Path,
    stop_at_first: bool = False,
    limit_s: float | None = None,
) -> RoomTalk:
    """``questions`` said to an in-process session through ``talk_local``, the speaker heard back
    through ``room`` (None: headphones), with the talk's echo cancellation on or off.
    ``stop_at_first``: end the talk at the first reply cut by a barge-in (without cancellation the
    agent would otherwise go on answering its own echo until the talk's tail runs out);
    ``limit_s``: end it then in any case (a benchmark's bound on a talk that answers itself)."""
    printed = io.StringIO()
    speaker = FileSpeaker(out, engines.tts.sample_rate)
    conv = _Watched(speaker, Console(printed, live=False))
    # The user waits for the whole answer, not for a gap in it: on a loaded machine a reply's
    # next clause can come more than ``gap_s`` after the last one ended.
    mic = TurnTakingMicrophone(questions, lambda: conv.responding() or speaker.busy(), room)
    if room is not None:
        speaker.monitors.append(room.played)
    after = _AfterCancelling(cancel_echo(mic, speaker), mic, speaker.busy) if cancel else None
    talk_mic: Microphone = after if after is not None else mic
    speaker.start()
    started = time.monotonic()
    try:
        async with Session(engines, config) as session:
            talk = asyncio.create_task(talk_local(session, talk_mic, conv, max_tail_s=30))
            ends = stop_at_first or limit_s is not None
            if ends:
                cut = asyncio.create_task(conv.cut.wait() if stop_at_first else asyncio.Event().wait())
                await asyncio.wait({talk, cut}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
                cut.cancel()
                talk.cancel()
            try:
                await talk
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not ends or (current is not None and current.cancelling()):
                    raise  # not (only) the cancel above
            result = conv.result
    finally:
        await speaker.close()
    return RoomTalk(result, printed.getvalue(), mic, time.monotonic() - started, after.agent_only if after is not None else [])
