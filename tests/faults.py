"""A test-only fault injector for every backend kind (VAD, STT, turn, LLM, TTS).

:func:`inject` wraps the real engines of a process; each wrapper calls the real model unless a
fault of its kind is armed, and then fails (or, for the LLM, is late) exactly as many times as
armed.  Arming is thread-safe: the wrapped calls run in the backends' executors.

    faults = Faults()
    engines = inject(real_engines, faults)
    faults.arm("stt")                      # the next transcription raises
    faults.arm("tts", after=1)             # the next synthesis raises after its first chunk
    faults.arm("llm", delay_s=3.0)         # the next generation sends nothing for 3 s

Nothing here is used by the product: a fault is something a test asks for.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from voiceagent.backends.protocols import LlmEngine, LlmItem, LlmRequest, LlmStats, is_piece
from voiceagent.errors import EngineError
from voiceagent.pipeline.coalesce import Coalescer
from voiceagent.tools.spec import Message, Tool

KINDS = ("vad", "stt", "turn", "llm", "tts")


class InjectedFaultError(RuntimeError):
    """What an armed backend raises (the LLM raises :class:`EngineError`, as its engines do)."""


@dataclass
class Fault:
    after: int = 0
    """LLM and TTS: fail after this many pieces or chunks of output (0: before the first)."""
    delay_s: float = 0.0
    """LLM: hold the first piece this long instead of failing (a slow engine)."""


class Faults:
    """The armed faults, by backend kind, and how many have fired."""

    def __init__(self) -> None:
        self._armed: dict[str, collections.deque[Fault]] = {k: collections.deque() for k in KINDS}
        self._lock = threading.Lock()
        self.fired: collections.Counter[str] = collections.Counter()

    def arm(self, kind: str, times: int = 1, *, after: int = 0, delay_s: float = 0.0) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown backend kind {kind!r}")
        with self._lock:
            self._armed[kind].extend(Fault(after, delay_s) for _ in range(times))

    def take(self, kind: str) -> Fault | None:
        """The next armed fault of ``kind`` (consumed), or None."""
        with self._lock:
            if not self._armed[kind]:
                return None
            self.fired[kind] += 1
            return self._armed[kind].popleft()

    def check(self, kind: str) -> None:
        if self.take(kind) is not None:
            raise InjectedFaultError(f"injected {kind} fault")


class _Delegate:
    def __init__(self, inner: Any, faults: Faults) -> None:
        self._inner = inner
        self._faults = faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _VadStream(_Delegate):
    def process(self, pcm: Any) -> list[float]:
        self._faults.check("vad")
        return self._inner.process(pcm)  # type: ignore[no-any-return]


class FaultyVad(_Delegate):
    def stream(self) -> Any:
        return _VadStream(self._inner.stream(), self._faults)


class FaultySTT(_Delegate):
    def transcribe(self, audio: Any, language: str, prompt: str = "") -> str:
        self._faults.check("stt")
        return self._inner.transcribe(audio, language, prompt)  # type: ignore[no-any-return]

    def transcribe_batch(self, requests: Any) -> list[str]:
        self._faults.check("stt")
        return self._inner.transcribe_batch(requests)  # type: ignore[no-any-return]


class FaultyTurn(_Delegate):
    def completion_probability(self, audio: Any) -> float:
        self._faults.check("turn")
        return self._inner.completion_probability(audio)  # type: ignore[no-any-return]


class FaultyTts(_Delegate):
    @property
    def sample_rate(self) -> int:
        return self._inner.sample_rate  # type: ignore[no-any-return]

    def synthesize(self, text: str, speed: float) -> Iterator[Any]:
        fault = self._faults.take("tts")
        for n, chunk in enumerate(self._inner.synthesize(text, speed)):
            if fault is not None and n >= fault.after:
                raise InjectedFaultError("injected tts fault")
            yield chunk
        if fault is not None:
            raise InjectedFaultError("injected tts fault")


class FaultyLlm:
    """An :class:`LlmEngine` around a real one: an armed fault raises :class:`EngineError` after
    ``after`` pieces, or holds the first piece ``delay_s`` (then answers from the real engine).
    The engine's reports (admission, usage: not pieces) pass through as they come."""

    def __init__(self, inner: LlmEngine, faults: Faults) -> None:
        self.inner = inner
        self.faults = faults
        self.name = inner.name
        self.window = inner.window

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        return await self.inner.count_tokens(messages, tools)

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        fault = self.faults.take("llm")
        if fault is not None and fault.delay_s > 0:
            await asyncio.sleep(fault.delay_s)  # the fault itself: an engine this slow
            fault = None
        if fault is not None and fault.after == 0:
            raise EngineError("injected llm fault", retryable=True)
        n = 0
        pieces = self.inner.generate(request)
        try:
            async for item in pieces:
                if is_piece(item):
                    if fault is not None and n >= fault.after:
                        raise EngineError("injected llm fault mid-reply", retryable=True)
                    n += 1
                yield item
        finally:
            await pieces.aclose()

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        self.inner.prime(messages, tools)

    def stats(self) -> LlmStats:
        return self.inner.stats()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def close(self) -> None:
        self.inner.close()


def inject(engines: Any, faults: Faults) -> Any:
    """A copy of ``engines`` whose every backend goes through ``faults`` (the models are shared);
    every voice of the voice table too (sessions speak through ``engines.voice(name)``)."""
    tts = FaultyTts(engines.tts, faults)
    stt = FaultySTT(engines.stt, faults)
    wrapped = {id(engines.tts): tts}
    voices = {name: wrapped.setdefault(id(v), FaultyTts(v, faults)) for name, v in engines.voices.items()}
    return dataclasses.replace(
        engines,
        vad=FaultyVad(engines.vad, faults),
        stt=stt,
        stt_finals=Coalescer(stt.executor, stt.transcribe_batch, engines.stt_finals.max_batch) if engines.stt_finals else None,
        turn=FaultyTurn(engines.turn, faults) if engines.turn is not None else None,
        llm=FaultyLlm(engines.llm, faults),
        tts=tts,
        voices=voices,
    )
