"""Silero VAD v6 on onnxruntime (the ONNX file from the ``silero-vad`` package, or a path or hub id
to a Silero ONNX model; no torch)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort

from voiceagent.audio import Float32Array
from voiceagent.backends.gpu import onnx_providers
from voiceagent.backends.protocols import VadStream
from voiceagent.models.source import resolve
from voiceagent.pipeline.scheduler import name_os_thread

__all__ = ["SileroStream", "SileroVad"]

_WINDOW = 512  # samples at 16 kHz (32 ms): the window the model was trained on
_CONTEXT = 64  # the model expects the previous window's last 64 samples in front of each window


class SileroStream:
    """Recurrent state and carry-over samples of one audio stream."""

    window_samples = _WINDOW

    def __init__(self, session: ort.InferenceSession) -> None:
        self._session = session
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)
        self._sr = np.array(16000, dtype=np.int64)

    def process(self, pcm: Float32Array) -> list[float]:
        buf = np.concatenate([self._pending, pcm.astype(np.float32)])
        probs: list[float] = []
        n = len(buf) // _WINDOW
        for i in range(n):
            window = buf[i * _WINDOW : (i + 1) * _WINDOW]
            x = np.concatenate([self._context, window])[np.newaxis, :]
            out, self._state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
            probs.append(float(out[0][0]))
            self._context = window[-_CONTEXT:]
        self._pending = buf[n * _WINDOW :]
        return probs


class SileroVad:
    """The shared model.  ``stream()`` makes per-session state.

    ``model``: ``vad.model``'s value (catalog name, path or hub id), resolved and checked by
    :func:`voiceagent.models.source.resolve` (an ONNX model without Silero's inputs is refused)."""

    def __init__(self, device: str = "cpu", model: str = "silero", cache_dir: Path | None = None) -> None:
        path = resolve("vad", model, cache_dir).path
        opts = ort.SessionOptions()
        # One thread: a 32 ms window costs ~0.2 ms; more threads only add contention with STT/LLM.
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), sess_options=opts, providers=onnx_providers(device))
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vad", initializer=name_os_thread, initargs=("vad",))

    def stream(self) -> SileroStream:
        return SileroStream(self._session)

    def process_many(self, jobs: Sequence[tuple[VadStream, Float32Array]]) -> list[list[float]]:
        """``stream.process(pcm)`` for every job, the streams' windows in one model call per
        round (round k: the k-th new window of every stream that has one), each stream's own
        recurrent state carried.  Gives the probabilities of the one-by-one calls (to float
        rounding).  Streams not made by this model are processed one by one.  Executor only."""
        results: list[list[float]] = [[] for _ in jobs]
        batched: list[tuple[int, SileroStream, Float32Array]] = []
        for i, (stream, pcm) in enumerate(jobs):
            if isinstance(stream, SileroStream) and stream._session is self._session:
                batched.append((i, stream, np.concatenate([stream._pending, pcm.astype(np.float32)])))
            else:
                results[i] = stream.process(pcm)
        rounds = max((len(buf) // _WINDOW for _, _, buf in batched), default=0)
        sr = np.array(16000, dtype=np.int64)
        for r in range(rounds):
            now = [(i, stream, buf[r * _WINDOW : (r + 1) * _WINDOW]) for i, stream, buf in batched if len(buf) >= (r + 1) * _WINDOW]
            x = np.empty((len(now), _CONTEXT + _WINDOW), dtype=np.float32)
            state = np.empty((2, len(now), 128), dtype=np.float32)
            for k, (_, stream, window) in enumerate(now):
                x[k, :_CONTEXT] = stream._context
                x[k, _CONTEXT:] = window
                state[:, k, :] = stream._state[:, 0, :]
            out, new_state = self._session.run(None, {"input": x, "state": state, "sr": sr})
            for k, (i, stream, window) in enumerate(now):
                results[i].append(float(out[k][0]))
                stream._state = np.ascontiguousarray(new_state[:, k : k + 1, :])
                stream._context = window[-_CONTEXT:]
        for _, stream, buf in batched:
            stream._pending = buf[(len(buf) // _WINDOW) * _WINDOW :]
        return results
