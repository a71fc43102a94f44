"""What a model engine must provide; stages depend on these Protocols, never on a library.

Each backend owns a single-thread ``executor``.  Its methods are **blocking** and are called
only inside that executor (see :mod:`voiceagent.pipeline.offload`); generators it returns are
iterated there too.  A backend is loaded once per process and shared by every session, so
per-stream state (the VAD's recurrent state) lives in objects the caller holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Literal, Protocol

from voiceagent.audio import Float32Array, Int16Array

__all__ = ["LlmBackend", "Message", "SttBackend", "TtsBackend", "TurnBackend", "VadBackend", "VadStream"]


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["system", "user", "assistant"]
    content: str


class VadStream(Protocol):
    """Per-session VAD state."""

    def process(self, pcm: Float32Array) -> list[float]:
        """Feed 16 kHz float samples; returns one speech probability per complete window."""
        ...

    @property
    def window_samples(self) -> int: ...


class VadBackend(Protocol):
    executor: Executor

    def stream(self) -> VadStream:
        """A fresh per-session state (cheap; does not touch the model)."""
        ...


class SttBackend(Protocol):
    executor: Executor

    def transcribe(self, audio: Float32Array, language: str) -> str:
        """Whole-clip transcription of 16 kHz float audio (the lazy segments are consumed here)."""
        ...


class TurnBackend(Protocol):
    executor: Executor

    def completion_probability(self, audio: Float32Array) -> float:
        """P(the speaker has finished their turn) from the last seconds of 16 kHz audio."""
        ...


class LlmBackend(Protocol):
    executor: Executor

    def stream(self, messages: Sequence[Message], max_tokens: int, temperature: float) -> Iterator[str]:
        """Generate the assistant's reply as text pieces.  Closing the iterator stops generation."""
        ...


class TtsBackend(Protocol):
    executor: Executor

    @property
    def sample_rate(self) -> int: ...

    def synthesize(self, text: str, speed: float) -> Iterator[Int16Array]:
        """Speech for ``text`` as int16 chunks at ``sample_rate``, first chunk as early as possible."""
        ...
