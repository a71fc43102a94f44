"""Noise suppression of a session's input audio, before the VAD and the transcriber hear it.

A Realtime session asks for it with ``audio.input.noise_reduction`` (``{"type": "near_field"}``
or ``{"type": "far_field"}``; null, the default, for none), and a server makes it every new
session's default with ``vad.noise_reduction``.  Both types run the same suppressor: WebRTC's
(the audio processing module's noise suppressor and its high-pass filter, as the ``livekit``
wheel ships it; the module :mod:`voiceagent.echo` also uses).  It has one strength, so the
two types differ only in name: the field is honoured, not tuned per microphone distance.

:class:`NoiseSuppressor` is sans-I/O and stateful (the suppressor learns the noise as it goes):
one per session, fed that session's audio in order from one task.  Audio goes through in 10 ms
frames (the module's unit); a block that is not a whole number of frames keeps its remainder
for the next call, so :meth:`~NoiseSuppressor.process` returns up to 10 ms less or more than it
was given, and adds no other delay.  It costs about 0.1 ms of CPU per 10 ms of audio, the order
of the input's resampling beside it, so it runs in line on the caller's task.

Where it pays is measured, not assumed: ``python -m benchmarks.noise`` (docs/benchmarks.md).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array
from voiceagent.errors import MissingDependencyError

__all__ = [
    "FRAME",
    "NEEDS_LIVEKIT",
    "NOISE_REDUCTION_TYPES",
    "Frames",
    "NoiseSuppressor",
    "apm_frame",
    "livekit_rtc",
    "suppressor_installed",
]

FRAME = PIPELINE_RATE // 100
"""Samples in the module's 10 ms frame at the pipeline's rate."""

NOISE_REDUCTION_TYPES = ("near_field", "far_field")
"""The Realtime ``noise_reduction.type`` values; both run :class:`NoiseSuppressor`."""

NEEDS_LIVEKIT = "noise reduction needs the livekit package, which this server lacks: pip install 'voiceagent[clients]'"
"""Why noise reduction cannot run here: a session's ``error`` and a start-up's one line say it."""


def livekit_rtc(extra: str = "clients") -> Any:
    """``livekit.rtc``, or a :class:`~voiceagent.errors.MissingDependencyError` naming ``extra``
    (one of the extras that install it: ``clients`` for the talk, ``sip`` for the gateway)."""
    try:
        return importlib.import_module("livekit.rtc")
    except ModuleNotFoundError:
        raise MissingDependencyError("livekit", extra) from None


def suppressor_installed() -> bool:
    """Whether :class:`NoiseSuppressor` can be made here (``livekit`` is installed)."""
    return importlib.util.find_spec("livekit") is not None


class Frames:
    """Blocks of any length in, whole 10 ms frames out: the module's unit.  What is left of a
    block waits for the next one (under 10 ms), so nothing is dropped and nothing is delayed
    longer than that."""

    def __init__(self) -> None:
        self._pending = np.zeros(0, dtype=np.int16)

    def whole(self, pcm: Int16Array) -> Int16Array:
        """What was left over, then ``pcm``, up to the last whole frame (a multiple of :data:`FRAME`)."""
        buf = np.concatenate([self._pending, pcm]) if len(self._pending) else pcm
        whole = len(buf) // FRAME * FRAME
        self._pending = buf[whole:].copy()
        return buf[:whole]


def apm_frame(frame_type: Any, pcm: Int16Array) -> Any:
    """One :data:`FRAME` of ``pcm`` as the module's ``AudioFrame`` (``frame_type``), which it
    processes in place: its ``data`` is a copy."""
    return frame_type(bytearray(pcm.astype(np.int16).tobytes()), PIPELINE_RATE, 1, FRAME)


class NoiseSuppressor:
    """See the module docstring.  Raises :class:`~voiceagent.errors.MissingDependencyError`
    without ``livekit``."""

    def __init__(self) -> None:
        rtc = livekit_rtc()
        self._frame_type = rtc.AudioFrame
        self._apm = rtc.AudioProcessingModule(noise_suppression=True, high_pass_filter=True)
        self._frames = Frames()

    def process(self, pcm: Int16Array) -> Int16Array:
        """``pcm`` (mono int16 at 16 kHz) → the same with its noise suppressed, in whole 10 ms
        frames (the remainder waits for the next call)."""
        buf = self._frames.whole(pcm)
        out = np.empty(len(buf), dtype=np.int16)
        for i in range(0, len(buf), FRAME):
            frame = apm_frame(self._frame_type, buf[i : i + FRAME])
            self._apm.process_stream(frame)
            out[i : i + FRAME] = np.frombuffer(frame.data, dtype=np.int16)
        return out
