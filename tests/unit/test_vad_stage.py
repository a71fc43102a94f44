"""stages.vad: the audio goes on to STT in frames of 50 ms or more, always before the events about it."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.unit.fakes import FakeVad
from voiceagent.clock import VirtualClock
from voiceagent.config import load_config
from voiceagent.errors import StageError
from voiceagent.events import AudioFrame, Event, InputCommit, Silence, SpeechStarted
from voiceagent.pipeline import Channel, GenerationScope, StageContext
from voiceagent.settings import settings_from_config
from voiceagent.stages.vad import FORWARD_SAMPLES, VadOptions, VadPorts, VadStage

Run = Callable[..., Any]


def _frame(start_ms: float, loud: bool, samples: int = 320) -> AudioFrame:
    pcm = np.full(samples, 8000 if loud else 0, dtype=np.int16)
    return AudioFrame(t=0.0, gen=0, pcm=pcm, start_ms=start_ms)


async def _run_stage(frames: list[Event], manual: bool = False) -> list[Event]:
    config = load_config(env={})
    settings = settings_from_config(config)
    if manual:
        settings = dataclasses.replace(settings, turn_detection=None)
    scope = GenerationScope()

    async def notify(event: Event) -> None:
        pass

    async def report(err: StageError, gen: int) -> None:
        raise AssertionError(f"the stage failed: {err}")

    ctx = StageContext("sess", VirtualClock(), scope, notify, report)
    inbox: Channel[Event] = Channel("vad", 512, scope)
    out: Channel[Event] = Channel("stt", 512, scope)
    ports = VadPorts(backend=FakeVad(), settings=lambda: settings, agent_active=lambda: False)
    stage = VadStage(ctx, inbox, out, ports, VadOptions(stop_ms=160, min_speech_ms=96, barge_in_ms=96))
    task = asyncio.create_task(stage.run())
    for f in frames:
        await inbox.put(f)
    while stage.handled < len(frames):  # noqa: ASYNC110 - the stage's counter is the only completion signal
        await asyncio.sleep(0.001)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    got = []
    while len(out):
        got.append(await out.get())
    return got


def test_audio_goes_on_in_bigger_frames_always_before_the_events_about_it(run: Run) -> None:
    frames: list[Event] = [_frame(20.0 * k, loud=5 <= k < 30) for k in range(60)]  # 20 ms messages: 0.5 s of speech
    got = run(_run_stage(frames), 10)
    audio = [e for e in got if isinstance(e, AudioFrame)]
    # Every sample went on, in order, none twice.
    assert [a.start_ms for a in audio] == sorted(a.start_ms for a in audio)
    assert sum(len(a.pcm) for a in audio) == 60 * 320
    for a, b in itertools.pairwise(audio):
        assert abs(a.end_ms - b.start_ms) < 1e-6
    # Fewer trips than messages: frames of 50 ms or more, except those cut short by an event.
    assert len(audio) < 30
    starts = [i for i, e in enumerate(got) if isinstance(e, SpeechStarted)]
    assert len(starts) == 1
    started = got[starts[0]]
    assert isinstance(started, SpeechStarted)
    # Before the start event, STT has every sample up to the window that started it.
    before = [e for e in got[: starts[0]] if isinstance(e, AudioFrame)]
    assert before and before[-1].end_ms >= started.audio_ms + 96
    # Only a speech event (start, pause, resume, stop) cuts a frame short; silence ticks do not.
    speech_events = [e for e in got if not isinstance(e, AudioFrame | Silence)]
    short = [a for a in audio[:-1] if len(a.pcm) < FORWARD_SAMPLES]
    assert len(short) <= len(speech_events)
    assert any(isinstance(e, Silence) for e in got)


def test_held_audio_goes_before_any_other_event(run: Run) -> None:
    frames: list[Event] = [_frame(0.0, loud=False), _frame(20.0, loud=False), InputCommit(t=0.0, gen=0)]
    got = run(_run_stage(frames, manual=True), 10)
    assert [type(e).__name__ for e in got] == ["AudioFrame", "InputCommit"]
    first = got[0]
    assert isinstance(first, AudioFrame) and len(first.pcm) == 640
