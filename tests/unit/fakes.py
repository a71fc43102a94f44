"""Scripted fake backends (at the Protocol seams of ``voiceagent.backends.protocols``) and helpers
for driving a :class:`~voiceagent.session.Session` without models, sockets or network.

* :class:`FakeVad` — speech probability from the audio itself: a window whose RMS is at or above
  ``level`` is speech (``speech_prob``), anything else is silence.  A test "speaks" by appending
  :func:`tone` and "pauses" with :func:`silence`.
* :class:`FakeStt`, :class:`FakeTurn`, :class:`FakeLlm`, :class:`FakeTts` — scripted answers, each
  call recorded (with the thread it ran in) in a :class:`Recorder` that tests can wait on.

Every backend owns a single-thread executor, as the real ones do; :meth:`FakeEngines.close`
shuts them down.  Timeouts are multiplied by ``VOICEAGENT_TEST_TIMEOUT_SCALE``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from voiceagent.audio import Float32Array, Int16Array
from voiceagent.backends.llm_pool import LlmPool
from voiceagent.backends.protocols import SttRequest
from voiceagent.backends.registry import Engines
from voiceagent.events import Event, SoundHeard
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.session import Session
from voiceagent.tools.spec import Message, Tool, ToolCall

SCALE = float(os.environ.get("VOICEAGENT_TEST_TIMEOUT_SCALE", "1"))
RATE = 16_000
WINDOW = 512  # samples per VAD window (32 ms at 16 kHz), as Silero
WINDOW_MS = 32.0
DEADLINE = 5.0  # seconds, before scaling: how long a test waits for something that must happen

T = TypeVar("T")


def deadline(seconds: float = DEADLINE) -> float:
    return seconds * SCALE


# --------------------------------------------------------------------------- audio


def tone(ms: float, amplitude: int = 8000, rate: int = RATE, freq: float = 300.0) -> Int16Array:
    """A sine of ``ms`` milliseconds: "speech" for :class:`FakeVad`."""
    n = round(ms * rate / 1000)
    t = np.arange(n) / rate
    return (np.sin(2 * np.pi * freq * t) * amplitude).astype(np.int16)


def silence(ms: float, rate: int = RATE) -> Int16Array:
    return np.zeros(round(ms * rate / 1000), dtype=np.int16)


def frames(pcm: Int16Array, size: int = WINDOW) -> list[Int16Array]:
    return [pcm[i : i + size] for i in range(0, len(pcm), size)]


# --------------------------------------------------------------------------- recording


class Recorder:
    """A thread-safe log of calls that tests can wait on (from the event loop or a thread)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: list[Any] = []

    def record(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    @property
    def items(self) -> list[Any]:
        with self._cond:
            return list(self._items)

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def wait_count(self, n: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._items) >= n, timeout)

    async def wait(self, n: int, timeout: float = DEADLINE) -> list[Any]:
        """Wait (without blocking the loop) until at least ``n`` calls were recorded."""
        ok = await asyncio.to_thread(self.wait_count, n, deadline(timeout))
        assert ok, f"expected {n} calls, got {len(self)}: {self.items!r}"
        return self.items


def executor(name: str) -> Executor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)


# --------------------------------------------------------------------------- backends


class FakeVadStream:
    window_samples = WINDOW

    def __init__(self, level: float, speech_prob: float, silence_prob: float, threads: Recorder) -> None:
        self._level = level
        self._speech = speech_prob
        self._silence = silence_prob
        self._pending = np.zeros(0, dtype=np.float32)
        self._threads = threads
        self.probs: list[float] = []

    def process(self, pcm: Float32Array) -> list[float]:
        self._threads.record(threading.current_thread().name)
        buf = np.concatenate([self._pending, pcm.astype(np.float32)])
        n = len(buf) // WINDOW
        out: list[float] = []
        for i in range(n):
            window = buf[i * WINDOW : (i + 1) * WINDOW]
            rms = float(np.sqrt(np.mean(np.square(window))))
            out.append(self._speech if rms >= self._level else self._silence)
        self._pending = buf[n * WINDOW :]
        self.probs.extend(out)
        return out


class FakeVad:
    def __init__(self, level: float = 0.05, speech_prob: float = 0.9, silence_prob: float = 0.05) -> None:
        self.executor = executor("fake-vad")
        self.level = level
        self.speech_prob = speech_prob
        self.silence_prob = silence_prob
        self.threads = Recorder()
        self.streams: list[FakeVadStream] = []

    def stream(self) -> FakeVadStream:
        s = FakeVadStream(self.level, self.speech_prob, self.silence_prob, self.threads)
        self.streams.append(s)
        return s


@dataclass(frozen=True)
class SttCall:
    samples: int
    language: str
    thread: str
    prompt: str = ""


class FakeStt:
    """Returns the scripted texts in order (an exception in the script is raised), then ``default``."""

    def __init__(
        self, texts: Sequence[str | Exception] = (), default: str = "", respond: Callable[[Float32Array], str] | None = None
    ) -> None:
        self.executor = executor("fake-stt")
        self._script = list(texts)
        self._default = default
        self._respond = respond
        self._lock = threading.Lock()
        self.calls = Recorder()
        self.batches: list[int] = []
        """The size of each :meth:`transcribe_batch` call."""

    def transcribe(self, audio: Float32Array, language: str, prompt: str = "") -> str:
        self.calls.record(SttCall(len(audio), language, threading.current_thread().name, prompt))
        if self._respond is not None:
            return self._respond(audio)
        with self._lock:
            item = self._script.pop(0) if self._script else self._default
        if isinstance(item, Exception):
            raise item
        return item

    def transcribe_batch(self, requests: Sequence[SttRequest]) -> list[str]:
        self.batches.append(len(requests))
        return [self.transcribe(r.audio, r.language, r.prompt) for r in requests]


class FakeSoundStt(FakeStt):
    """A :class:`FakeStt` that also reads clips as sounds (``SoundReader``): ``margin(text)`` of
    the transcript it is given; each reading recorded as (samples, language, phrases, text, thread)."""

    def __init__(self, respond: Callable[[Float32Array], str], margin: Callable[[str], float | None]) -> None:
        super().__init__(respond=respond)
        self._margin = margin
        self.readings = Recorder()

    def read_as_sounds(self, audio: Float32Array, language: str, phrases: tuple[str, ...], text: str) -> float | None:
        self.readings.record((len(audio), language, phrases, text, threading.current_thread().name))
        return self._margin(text)


class FakeSound:
    """A sound-event model (``SoundBackend``): ``speech(samples)`` is the speech probability it
    hears; each reading recorded as (samples, thread).  ``speech`` may raise, as a model can."""

    def __init__(self, speech: Callable[[int], float], sound: str = "Cough") -> None:
        self.executor = executor("fake-sound")
        self._speech = speech
        self._sound = sound
        self.readings = Recorder()

    def hear(self, audio: Float32Array) -> SoundHeard:
        self.readings.record((len(audio), threading.current_thread().name))
        return SoundHeard(speech=self._speech(len(audio)), sound=self._sound, sound_p=0.5)


class FakeTurn:
    def __init__(self, prob: float = 0.9) -> None:
        self.executor = executor("fake-turn")
        self.prob = prob
        self.calls = Recorder()

    def completion_probability(self, audio: Float32Array) -> float:
        self.calls.record(len(audio))
        return self.prob


@dataclass(frozen=True)
class LlmCall:
    messages: tuple[Message, ...]
    max_tokens: int
    temperature: float
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"

    @property
    def user_text(self) -> str:
        """The last user message of the prompt."""
        return next(m.content for m in reversed(self.messages) if m.role == "user")


class FakeLlm:
    """A scripted LLM context.  Each ``stream`` call plays the next scripted reply: a list of text
    pieces and tool calls (an exception in the list is raised at that point, inside the
    executor), or an exception raised at once.  It keeps no sequence state (see
    :class:`SequenceCheckingLlm`)."""

    def __init__(self, replies: Sequence[Sequence[str | ToolCall | Exception] | Exception] = (), default: Sequence[str] = ("OK.",)) -> None:
        self.executor = PriorityExecutor("fake-llm")
        self._script = list(replies)
        self._default = list(default)
        self._lock = threading.Lock()
        self.calls = Recorder()
        self.closed = Recorder()  # one entry per generator whose clean-up ran (thread name)
        self.steps = Recorder()  # thread name of every step

    def set_threads(self, threads: int) -> None:
        self.threads = threads

    def stream(
        self, messages: Sequence[Message], max_tokens: int, temperature: float, tools: Sequence[Tool] = (), tool_choice: str = "auto"
    ) -> Iterator[str | ToolCall]:
        self.calls.record(LlmCall(tuple(messages), max_tokens, temperature, tuple(tools), tool_choice))
        with self._lock:
            reply = self._script.pop(0) if self._script else self._default
        return self._generate(reply)

    def _generate(self, reply: Sequence[str | ToolCall | Exception] | Exception) -> Iterator[str | ToolCall]:
        try:
            self.steps.record(threading.current_thread().name)
            if isinstance(reply, Exception):
                raise reply
            for piece in reply:
                if isinstance(piece, Exception):
                    raise piece
                yield piece
                self.steps.record(threading.current_thread().name)
        finally:
            self.closed.record(threading.current_thread().name)


class InterleavedError(AssertionError):
    """Two generations stepped on one context's sequence state."""


class SequenceCheckingLlm:
    """A fake LLM context that, like llama.cpp, holds the state of ONE sequence, and fails loudly
    when generations interleave on it.

    Starting a generation takes the context's state (the prompt is "evaluated"); each later step
    checks that the state still belongs to that generation.  A step of a generation whose state
    was taken over raises :class:`InterleavedError` (and records it in ``violations``): exactly
    the condition under which llama.cpp decodes on another sequence's KV cache.  Each step also
    reports the prompt it was started from, so replies show whose question they answer.
    """

    def __init__(self, name: str = "ctx", pieces: int = 4, step_s: float = 0.0) -> None:
        self.name = name
        self.pieces = pieces
        self.step_s = step_s  # blocking work per step (time in the executor thread, not the loop)
        self.owner: int | None = None  # which generation's sequence the state holds
        self._next = 0
        self.violations = Recorder()
        self.prompts = Recorder()  # the last user message of every generation started here
        self.prefills = Recorder()  # the last user message of every prefill run here
        self.prefill_prompts = Recorder()  # (system message, tool names) of every prefill run here
        self.threads = Recorder()  # set_threads calls

    def set_threads(self, threads: int) -> None:
        self.threads.record(threads)

    def stream(
        self, messages: Sequence[Message], max_tokens: int, temperature: float, tools: Sequence[Tool] = (), tool_choice: str = "auto"
    ) -> Iterator[str]:
        self._next += 1
        return self._generate(self._next, next(m.content for m in reversed(messages) if m.role == "user"))

    def prefill(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        """Evaluate a prompt ahead of its turn: like a generation's start, it takes the state (a
        generation still running here would then fail its next step)."""
        self._next += 1
        self.owner = self._next
        question = next(m.content for m in reversed(messages) if m.role == "user")
        self.prefills.record(question)
        self.prefill_prompts.record((messages[0].content, tuple(t.name for t in tools)))
        if self.step_s:
            threading.Event().wait(self.step_s)
        return len(question.split())

    def _generate(self, me: int, question: str) -> Iterator[str]:
        self.owner = me  # prompt evaluation: the context now holds this sequence
        self.prompts.record(question)
        for i in range(self.pieces):
            if self.owner != me:
                self.violations.record((self.name, me, self.owner))
                raise InterleavedError(f"context {self.name}: generation {me} stepped on the state of generation {self.owner}")
            if self.step_s:
                threading.Event().wait(self.step_s)
            yield f"{question} {i}. " if i == 0 else f"{i}. "


class FakeTts:
    """``ms_per_word`` of audio per word of the text, in one chunk per call (as Piper per sentence)."""

    def __init__(self, sample_rate: int = 24_000, ms_per_word: float = 125.0, amplitude: int = 1000, fail_on: str | None = None) -> None:
        self.executor = executor("fake-tts")
        self.sample_rate = sample_rate
        self.ms_per_word = ms_per_word
        self.amplitude = amplitude
        self.fail_on = fail_on
        self.calls = Recorder()

    def samples_for(self, text: str) -> int:
        return round(len(text.split()) * self.ms_per_word * self.sample_rate / 1000)

    def synthesize(self, text: str, speed: float) -> Iterator[Int16Array]:
        self.calls.record(text)
        if self.fail_on is not None and self.fail_on in text:
            raise RuntimeError(f"voice cannot say {self.fail_on!r}")
        n = self.samples_for(text)
        if n:
            yield np.full(n, self.amplitude, dtype=np.int16)


class FakeEngines:
    """The five fakes, and the :class:`Engines` a session takes."""

    def __init__(
        self,
        *,
        vad: FakeVad | None = None,
        stt: FakeStt | None = None,
        stt_partials: FakeStt | None = None,
        turn: FakeTurn | None = None,
        llm: FakeLlm | None = None,
        tts: FakeTts | None = None,
        contexts: Sequence[Any] | None = None,
        window: int | None = None,
        count: Callable[[Sequence[Message], Sequence[Tool]], int] | None = None,
        sound: FakeSound | None = None,
    ) -> None:
        """``contexts``: the LLM pool's contexts (default: ``llm`` alone), stepped on ``llm``'s
        executor; ``window`` and ``count``: the pool's context length and token counter (default:
        none, so the session estimates against ``llm.context``); ``stt_partials``: a second
        transcriber for partials (``stt.partial_model``), run on ``stt``'s executor as the registry
        runs it."""
        self.vad = vad or FakeVad()
        self.stt = stt or FakeStt(default="hello")
        self.turn = turn or FakeTurn()
        self.llm = llm or FakeLlm()
        self.tts = tts or FakeTts()
        self.pool = LlmPool(list(contexts) if contexts else [self.llm], self.llm.executor, name="fake", window=window, tokens=count)
        self.stt_partials = stt_partials
        if stt_partials is not None:
            stt_partials.executor.shutdown(wait=True)
            stt_partials.executor = self.stt.executor
        self.sound = sound
        self.engines = Engines(
            vad=self.vad, stt=self.stt, turn=self.turn, llm=self.pool, tts=self.tts, stt_partials=stt_partials, sound=sound
        )

    def close(self) -> None:
        for ex in (self.vad.executor, self.stt.executor, self.turn.executor, self.llm.executor, self.tts.executor):
            ex.shutdown(wait=True, cancel_futures=True)
        if self.sound is not None:
            self.sound.executor.shutdown(wait=True, cancel_futures=True)


# --------------------------------------------------------------------------- session driving


class EventLog:
    """Collects everything a session sends to its client; tests wait on it with deadlines."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.events: list[Event] = []
        self._cond = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._pump(), name="event-log")

    async def _pump(self) -> None:
        async for ev in self._session.events():
            async with self._cond:
                self.events.append(ev)
                self._cond.notify_all()

    async def finished(self) -> None:
        """Wait for ``events()`` to end (after the session closed)."""
        assert self._task is not None
        await asyncio.wait_for(self._task, deadline())

    def _find(self, pred: Callable[[Event], bool], after: int) -> int | None:
        for i in range(after, len(self.events)):
            if pred(self.events[i]):
                return i
        return None

    async def wait_for(self, pred: Callable[[Event], bool], *, after: int = 0, timeout: float = DEADLINE) -> int:
        """Index of the first event at or after ``after`` that matches ``pred``."""
        try:
            async with asyncio.timeout(deadline(timeout)), self._cond:
                await self._cond.wait_for(lambda: self._find(pred, after) is not None)
        except TimeoutError:
            raise AssertionError(f"no matching event after index {after}; got {self.describe()}") from None
        index = self._find(pred, after)
        assert index is not None
        return index

    async def wait_type(self, cls: type[T], *, after: int = 0, timeout: float = DEADLINE, **fields: Any) -> tuple[int, T]:
        """The first event of type ``cls`` (with the given field values) at or after ``after``."""

        def match(ev: Event) -> bool:
            return isinstance(ev, cls) and all(getattr(ev, k) == v for k, v in fields.items())

        index = await self.wait_for(match, after=after, timeout=timeout)
        ev = self.events[index]
        assert isinstance(ev, cls)
        return index, ev

    def of_type(self, cls: type[T]) -> list[T]:
        return [ev for ev in self.events if isinstance(ev, cls)]

    def describe(self) -> str:
        return ", ".join(type(ev).__name__ for ev in self.events)


async def until(ready: Callable[[], bool]) -> None:
    """Yield to the loop until ``ready()`` (state a stage or a model thread sets; bounded)."""
    for _ in range(1_000_000):
        if ready():
            return
        await asyncio.sleep(0)
    raise AssertionError("never ready")


async def speak(session: Session, ms: float, amplitude: int = 8000) -> None:
    """Append ``ms`` of loud audio in 32 ms frames."""
    for frame in frames(tone(ms, amplitude)):
        await session.append_audio(frame)


async def pause(session: Session, ms: float) -> None:
    """Append ``ms`` of digital silence in 32 ms frames."""
    for frame in frames(silence(ms)):
        await session.append_audio(frame)
