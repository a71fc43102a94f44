"""Talk to a real in-process session from a WAV file (the ``talk`` CLI's driver), for tests."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

from tests.profile import profile_config
from voiceagent.config import Config
from voiceagent.session import Session
from voiceagent.talk.console import Console
from voiceagent.talk.conversation import Conversation, TalkResult
from voiceagent.talk.devices import FRAME_MS, FileMicrophone, FileSpeaker
from voiceagent.talk.local import talk_local


class FrameClock:
    """A microphone's real-time pace for the tests' scripted microphones: each :meth:`tick`
    returns when the next ``FRAME_MS`` frame is due, counted from the clock's making."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._n = 0

    async def tick(self) -> None:
        delay = self._t0 + self._n * FRAME_MS / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        self._n += 1


def talk_file(
    engines: Any, run: Any, wav: Path, out: Path, config: Config | None = None, timeout: float = 120
) -> tuple[TalkResult, str, Session]:
    """Play ``wav`` as the microphone to one session on ``config`` (the test profile's by default)
    until it ends; the agent's audio goes to ``out``.  Returns the talk's result, what it printed,
    and the (closed) session, whose counters and history stay readable."""
    printed = io.StringIO()
    sessions: list[Session] = []

    async def scenario() -> TalkResult:
        mic = FileMicrophone(wav)
        await mic.load()
        speaker = FileSpeaker(out, engines.tts.sample_rate)
        speaker.start()
        try:
            async with Session(engines, config or profile_config()) as session:
                sessions.append(session)
                return await talk_local(session, mic, Conversation(speaker, Console(printed, live=False)))
        finally:
            await speaker.close()

    result = run(scenario(), timeout)
    return result, printed.getvalue(), sessions[0]
