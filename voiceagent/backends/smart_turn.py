"""Smart Turn v3.2: P(turn complete) from the last 8 s of audio (ONNX, shipped in pipecat-ai, or a
Smart Turn v3 ONNX file given as a path or hub id)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from faster_whisper.feature_extractor import FeatureExtractor

from voiceagent.audio import Float32Array
from voiceagent.backends.gpu import onnx_providers
from voiceagent.models.source import resolve
from voiceagent.pipeline.scheduler import PriorityExecutor

__all__ = ["SmartTurn"]

_SECONDS = 8
_SAMPLES = 16000 * _SECONDS
_FRAMES = 800


class SmartTurn:
    """``model``: ``turn.model``'s value (catalog name, path or hub id), resolved and checked by
    :func:`voiceagent.models.source.resolve` (an ONNX model without Smart Turn's
    ``input_features`` is refused)."""

    def __init__(self, device: str = "cpu", model: str = "smart-turn-v3", cache_dir: Path | None = None) -> None:
        path = resolve("turn", model, cache_dir).path
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), sess_options=opts, providers=onnx_providers(device))
        self._features = FeatureExtractor(feature_size=80, chunk_length=_SECONDS)
        self.executor = PriorityExecutor("turn")

    def features(self, audio: Float32Array) -> Float32Array:
        """80 by 800 Whisper log-mel features of the last 8 s (left-padded with silence)."""
        x = audio[-_SAMPLES:].astype(np.float32)
        if len(x) < _SAMPLES:
            x = np.pad(x, (_SAMPLES - len(x), 0))
        # The model was trained on zero-mean, unit-variance audio (transformers' do_normalize).
        x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
        mel = self._features(x, padding=0)
        return np.asarray(mel[:, :_FRAMES], dtype=np.float32)

    def completion_probability(self, audio: Float32Array) -> float:
        feats = self.features(audio)[np.newaxis, :, :]
        (out,) = self._session.run(None, {"input_features": feats})
        return float(np.asarray(out).reshape(-1)[0])
