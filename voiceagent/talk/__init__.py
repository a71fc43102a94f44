"""``voiceagent talk``: a spoken conversation from the terminal.

By default the models run in this process (:func:`~voiceagent.talk.local.talk_local`); with a
URL it talks to a running server over the Realtime protocol (:func:`~voiceagent.talk.remote.talk_remote`).
Audio comes from the sound card, or from files (``input``/``output``), through the very same code.

On the sound card's microphone and speaker the agent's own voice is taken out of what the
microphone hears (:mod:`voiceagent.talk.echo`), so a laptop with no headphones works.

Devices are checked before any model loads, so a machine without a sound card fails at once with
a :class:`~voiceagent.errors.DeviceError` that names what is missing.  With a file as input, the
talk ends once the file has been said and the agent has finished answering (``tail_s`` of quiet);
with a microphone it runs until interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from voiceagent.backends import auto_profile
from voiceagent.config import Config
from voiceagent.session import Session
from voiceagent.talk.console import Console
from voiceagent.talk.conversation import Conversation, TalkResult, Truncation, Turn
from voiceagent.talk.devices import (
    FileMicrophone,
    FileSpeaker,
    Microphone,
    SoundCardMicrophone,
    SoundCardSpeaker,
    Speaker,
    load_sounddevice,
)
from voiceagent.talk.echo import cancel_echo
from voiceagent.talk.local import talk_local
from voiceagent.talk.remote import WIRE_RATE, talk_remote

__all__ = ["TalkOptions", "TalkResult", "Truncation", "Turn", "run_talk"]


@dataclass(frozen=True)
class TalkOptions:
    url: str | None = None
    """A server's ``ws://…/v1/realtime``; None runs the models in this process."""
    input: Path | None = None
    """Audio file to say instead of the microphone."""
    output: Path | None = None
    """File to play the agent into instead of the speaker (format from its suffix)."""
    tail_s: float = 2.0
    max_wait_s: float = 90.0
    echo_cancellation: str = "auto"
    """``on``, ``off``, or ``auto``: on when both the microphone and the speaker are the sound card's
    (a file has no echo path)."""

    def cancels_echo(self) -> bool:
        if self.echo_cancellation not in ("auto", "on", "off"):
            raise ValueError(f"echo_cancellation must be auto, on or off, not {self.echo_cancellation!r}")
        if self.echo_cancellation == "auto":
            return self.input is None and self.output is None
        return self.echo_cancellation == "on"


async def run_talk(options: TalkOptions, config: Config | auto_profile.Plan, out: TextIO | None = None) -> TalkResult:
    """Hold one conversation; see the module docstring.  ``config``: the configuration, or the
    start-up plan (``profile = "auto"``'s candidates, :mod:`voiceagent.backends.auto_profile`) of the
    models to run here.  Raises VoiceAgentError on setup failures."""
    plan = config if isinstance(config, auto_profile.Plan) else auto_profile.Plan((("", config),))
    console = Console(out or sys.stdout)
    sd = load_sounddevice() if options.input is None or options.output is None else None
    mic: Microphone
    card_mic: SoundCardMicrophone | None = None
    card_speaker: SoundCardSpeaker | None = None
    file_speaker: FileSpeaker | None = None
    try:
        if options.input is not None:
            file_mic = FileMicrophone(options.input)
            await file_mic.load()
            mic = file_mic
        else:
            assert sd is not None
            card_mic = SoundCardMicrophone(sd)
            card_mic.open()
            mic = card_mic
        if options.output is None:
            assert sd is not None
            card_speaker = SoundCardSpeaker(sd)
            card_speaker.open()
        if options.url is not None:
            speaker = _speaker(card_speaker, options.output, WIRE_RATE)
            file_speaker = speaker if isinstance(speaker, FileSpeaker) else None
            mic = cancel_echo(mic, speaker) if options.cancels_echo() else mic
            console.info(f"connected to {options.url}" if options.input else f"talking to {options.url}; speak (Ctrl-C to stop)")
            return await talk_remote(options.url, mic, Conversation(speaker, console, tail_s=options.tail_s), max_tail_s=options.max_wait_s)
        console.info("loading models…")
        loop = asyncio.get_running_loop()
        started = await loop.run_in_executor(None, auto_profile.start, plan)
        engines, config = started.engines, started.config
        if started.choice:
            console.info(started.choice)
        try:
            speaker = _speaker(card_speaker, options.output, engines.tts.sample_rate)
            file_speaker = speaker if isinstance(speaker, FileSpeaker) else None
            mic = cancel_echo(mic, speaker) if options.cancels_echo() else mic
            console.info("ready" if options.input else "ready: speak (Ctrl-C to stop)")
            conv = Conversation(speaker, console, tail_s=options.tail_s)
            async with Session(engines, config) as session:
                return await talk_local(session, mic, conv, max_tail_s=options.max_wait_s)
        finally:
            engines.close()
    finally:
        if card_mic is not None:
            card_mic.close()
        if card_speaker is not None:
            card_speaker.close()
        if file_speaker is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await file_speaker.close()
            console.info(f"wrote {file_speaker.path}")


def _speaker(card: SoundCardSpeaker | None, output: Path | None, rate: int) -> Speaker:
    if card is not None:
        return card
    assert output is not None
    speaker = FileSpeaker(output, rate)
    speaker.start()
    return speaker
