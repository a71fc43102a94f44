"""The audio ends of ``voiceagent talk``: the sound card (sounddevice/PortAudio) or files.

Both kinds offer the same two objects, so a conversation runs the same code either way:

* a **microphone**: ``frames()`` yields 20 ms blocks of mono int16 at 16 kHz, in real time;
  ``exhausted`` turns true once a file has been read to its end (it then yields silence);
* a **speaker**: ``write(item_id, pcm, rate)`` queues reply audio, ``clear()`` drops what is not
  yet played, ``played_ms(item_id)`` is how much of an item the listener heard, by the device's
  own clock (PortAudio's stream time for a sound card; a real-time virtual clock for a file);
  each of its ``monitors`` is called with every block the device plays, silence included, at the
  device's rate (on the device's thread): the reference of echo cancellation
  (:mod:`voiceagent.talk.echo`).

Sound-card callbacks run on PortAudio's thread: the microphone hands blocks to the event loop
with ``call_soon_threadsafe``; the speaker pulls from a :class:`PlaybackBuffer` under a short lock.
A missing sound card or PortAudio raises :class:`~voiceagent.errors.DeviceError` naming what is
missing.  Files are decoded and encoded by ffmpeg through pydub (any format ffmpeg knows); all
resampling is soxr's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler, resample
from voiceagent.errors import DeviceError, MissingDependencyError
from voiceagent.talk.playback import PlaybackBuffer

__all__ = [
    "FRAME_MS",
    "FileMicrophone",
    "FileSpeaker",
    "Microphone",
    "Monitor",
    "SoundCardMicrophone",
    "SoundCardSpeaker",
    "Speaker",
    "load_sounddevice",
]

FRAME_MS = 20
_FRAME = PIPELINE_RATE * FRAME_MS // 1000


class Microphone(Protocol):
    @property
    def exhausted(self) -> bool: ...

    def frames(self) -> AsyncIterator[Int16Array]: ...


Monitor = Callable[[Int16Array, int], None]
"""Told each block a speaker plays (mono int16, the device's rate), on the device's thread; it
must not block."""


class Speaker(Protocol):
    monitors: list[Monitor]

    def write(self, item_id: str, pcm: Int16Array, rate: int) -> None: ...

    def clear(self) -> set[str]: ...

    def played_ms(self, item_id: str) -> float: ...

    def busy(self) -> bool: ...


class _Resamplers:
    """One soxr stream per assistant item, so chunk edges never click."""

    def __init__(self, dst_rate: int) -> None:
        self.dst_rate = dst_rate
        self._by_item: dict[str, StreamResampler] = {}

    def __call__(self, item_id: str, pcm: Int16Array, rate: int) -> Int16Array:
        if rate == self.dst_rate:
            return pcm
        rs = self._by_item.get(item_id)
        if rs is None or rs.src_rate != rate:
            rs = self._by_item[item_id] = StreamResampler(rate, self.dst_rate)
        return rs.process(pcm)


# ---------------------------------------------------------------------- sound card


def load_sounddevice() -> ModuleType:
    """Import sounddevice, or explain what is missing (the package, or the PortAudio library)."""
    try:
        return importlib.import_module("sounddevice")
    except ModuleNotFoundError:
        raise MissingDependencyError("sounddevice", "clients") from None
    except OSError as exc:  # the package is there, libportaudio is not
        raise DeviceError(f"PortAudio is not available ({exc}); install libportaudio2, or use --input/--output files") from None


def _device(sd: ModuleType, kind: str) -> dict[str, Any]:
    try:
        info = sd.query_devices(kind=kind)
    except (sd.PortAudioError, ValueError) as exc:
        raise DeviceError(f"no audio {kind} device found (PortAudio: {exc}); use --input/--output files") from None
    if not isinstance(info, dict) or int(info.get(f"max_{kind}_channels", 0)) < 1:
        raise DeviceError(f"no audio {kind} device found (PortAudio reports none); use --input/--output files")
    return info


class SoundCardMicrophone:
    """The default input device, at 16 kHz when it can, else at its own rate resampled by soxr."""

    exhausted = False

    def __init__(self, sd: ModuleType) -> None:
        self._sd = sd
        self._stream: Any = None
        self._queue: asyncio.Queue[Int16Array] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.rate = PIPELINE_RATE

    def open(self) -> None:
        sd = self._sd
        info = _device(sd, "input")
        try:
            sd.check_input_settings(samplerate=PIPELINE_RATE, channels=1, dtype="int16")
        except (sd.PortAudioError, ValueError):
            self.rate = int(info["default_samplerate"])
        self._loop = asyncio.get_running_loop()
        try:
            self._stream = sd.InputStream(
                samplerate=self.rate, channels=1, dtype="int16", blocksize=self.rate * FRAME_MS // 1000, callback=self._callback
            )
            self._stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            raise DeviceError(f"cannot open the audio input device {info.get('name', '')!r} (PortAudio: {exc})") from None

    def _callback(self, indata: Any, frames: int, time_info: Any, status: Any) -> None:
        # PortAudio's thread: copy the block and hand it to the loop; never block here.
        block = np.array(indata[:, 0], dtype=np.int16)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed while the stream stopped
                loop.call_soon_threadsafe(self._queue.put_nowait, block)

    async def frames(self) -> AsyncIterator[Int16Array]:
        rs = StreamResampler(self.rate, PIPELINE_RATE, quality="LQ")
        while True:
            pcm = rs.process(await self._queue.get())
            if len(pcm):
                yield pcm

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class SoundCardSpeaker:
    """The default output device at its own rate; played positions come from PortAudio's stream time."""

    def __init__(self, sd: ModuleType) -> None:
        self._sd = sd
        self._stream: Any = None
        self.rate = 0
        self._buffer: PlaybackBuffer | None = None
        self._resample: _Resamplers | None = None
        self.monitors: list[Monitor] = []

    def open(self) -> None:
        sd = self._sd
        info = _device(sd, "output")
        self.rate = int(info["default_samplerate"])
        self._buffer = PlaybackBuffer(self.rate)
        self._resample = _Resamplers(self.rate)
        try:
            self._stream = sd.OutputStream(samplerate=self.rate, channels=1, dtype="int16", latency="low", callback=self._callback)
            self._stream.start()
        except (sd.PortAudioError, ValueError) as exc:
            raise DeviceError(f"cannot open the audio output device {info.get('name', '')!r} (PortAudio: {exc})") from None

    def _callback(self, outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        assert self._buffer is not None
        block = np.zeros(frames, dtype=np.int16)
        self._buffer.pull(block, float(time_info.outputBufferDacTime))
        outdata[:, 0] = block
        for monitor in self.monitors:
            monitor(block, self.rate)

    def _now(self) -> float:
        return float(self._stream.time) if self._stream is not None else float("inf")

    def write(self, item_id: str, pcm: Int16Array, rate: int) -> None:
        assert self._buffer is not None and self._resample is not None
        self._buffer.write(item_id, self._resample(item_id, pcm, rate))

    def clear(self) -> set[str]:
        assert self._buffer is not None
        return self._buffer.clear()

    def played_ms(self, item_id: str) -> float:
        assert self._buffer is not None
        return self._buffer.played_ms(item_id, self._now())

    def busy(self) -> bool:
        return self._buffer is not None and self._buffer.busy(self._now())

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


# ---------------------------------------------------------------------- files


def _pydub() -> Any:
    try:
        with warnings.catch_warnings():
            # pydub imports audioop, deprecated in 3.11 (the audioop-lts package stands in on 3.13+).
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module("pydub")
    except ModuleNotFoundError:
        raise MissingDependencyError("pydub", "clients") from None


class FileMicrophone:
    """Reads a file (any format ffmpeg reads) and yields it in real time, then silence forever."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.exhausted = False
        self._pcm: Int16Array | None = None

    async def load(self) -> None:
        """Decode the file (ffmpeg runs in a thread; the loop is not blocked)."""
        self._pcm = await asyncio.to_thread(self._decode)

    def _decode(self) -> Int16Array:
        pydub = _pydub()
        if not self.path.is_file():
            raise DeviceError(f"input file not found: {self.path}")
        try:
            seg = pydub.AudioSegment.from_file(str(self.path)).set_channels(1).set_sample_width(2)
        except Exception as exc:  # pydub raises several kinds (CouldntDecodeError, OSError, IndexError)
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
            raise DeviceError(f"cannot decode {self.path} with ffmpeg: {detail}") from None
        pcm = np.frombuffer(seg.raw_data, dtype="<i2").astype(np.int16)
        return resample(pcm, int(seg.frame_rate), PIPELINE_RATE)

    @property
    def duration_s(self) -> float:
        return 0.0 if self._pcm is None else len(self._pcm) / PIPELINE_RATE

    async def frames(self) -> AsyncIterator[Int16Array]:
        if self._pcm is None:
            await self.load()
        assert self._pcm is not None
        pcm = self._pcm
        t0 = time.monotonic()
        n = 0
        while True:
            delay = t0 + n * FRAME_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # real-time pacing, as a microphone delivers
            start = n * _FRAME
            if start >= len(pcm):
                self.exhausted = True
                yield np.zeros(_FRAME, dtype=np.int16)
            else:
                frame = pcm[start : start + _FRAME]
                yield frame if len(frame) == _FRAME else np.concatenate([frame, np.zeros(_FRAME - len(frame), dtype=np.int16)])
            n += 1


class FileSpeaker:
    """A virtual sound card that plays in real time into a file.

    A device task takes one 20 ms block per 20 ms of wall time (silence when nothing is queued),
    so the file is time-aligned with the conversation and a barge-in cuts exactly as a real
    speaker would.  ``close()`` writes the file (format from its suffix, via ffmpeg).
    """

    def __init__(self, path: str | Path, rate: int) -> None:
        self.path = Path(path)
        self.rate = rate
        self._buffer = PlaybackBuffer(rate)
        self._resample = _Resamplers(rate)
        self._blocks: list[Int16Array] = []
        self._task: asyncio.Task[None] | None = None
        self.monitors: list[Monitor] = []

    def start(self) -> None:
        self._task = asyncio.create_task(self._device(), name="file-speaker")

    async def _device(self) -> None:
        n = self.rate * FRAME_MS // 1000
        t0 = time.monotonic()
        k = 0
        while True:
            due = t0 + k * FRAME_MS / 1000
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the virtual device's real-time clock
            block = np.zeros(n, dtype=np.int16)
            self._buffer.pull(block, due)
            self._blocks.append(block)
            for monitor in self.monitors:
                monitor(block, self.rate)
            k += 1

    def write(self, item_id: str, pcm: Int16Array, rate: int) -> None:
        self._buffer.write(item_id, self._resample(item_id, pcm, rate))

    def clear(self) -> set[str]:
        return self._buffer.clear()

    def played_ms(self, item_id: str) -> float:
        return self._buffer.played_ms(item_id, time.monotonic())

    def busy(self) -> bool:
        return self._buffer.busy(time.monotonic())

    @property
    def audio(self) -> Int16Array:
        """Everything the virtual device played so far (silence included)."""
        return np.concatenate(self._blocks) if self._blocks else np.zeros(0, dtype=np.int16)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await asyncio.to_thread(self._export, self.audio)

    def _export(self, pcm: Int16Array) -> None:
        pydub = _pydub()
        seg = pydub.AudioSegment(data=pcm.astype("<i2").tobytes(), sample_width=2, frame_rate=self.rate, channels=1)
        fmt = self.path.suffix.lstrip(".").lower() or "wav"
        try:
            seg.export(str(self.path), format=fmt)
        except Exception as exc:  # pydub surfaces ffmpeg failures as several exception kinds
            raise DeviceError(f"cannot write {self.path} as {fmt!r} with ffmpeg: {exc}") from None
