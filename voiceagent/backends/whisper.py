"""Speech-to-text with faster-whisper (CTranslate2), Whisper tiny or base from packages.

Two decoding paths:

* ``window_s = 30``: faster-whisper's own ``transcribe`` — the encoder always sees a 30 s window,
  so one decode costs the same for 1 s or 10 s of speech (~0.3 s for tiny on 2 cores).
* ``window_s = 0`` (auto, the default) or 1..29: the clip is padded only to a short window
  (the clip plus 1 s, rounded up to 5 s, at least 10 s) and CTranslate2 encodes just that.  The
  encoder cost falls roughly in proportion (tiny: ~35 ms for 10 s instead of ~260 ms), and on the
  spoken fixtures the transcripts matched the 30 s path; ``scripts/bench_latency.py`` measures both.
"""

from __future__ import annotations

import math
from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.feature_extractor import FeatureExtractor

from voiceagent.audio import Float32Array
from voiceagent.catalog import get_spec, locate, prepare
from voiceagent.pipeline.scheduler import PriorityExecutor

__all__ = ["WhisperStt", "model_dir", "window_frames"]

_RATE = 16000
_HOP = 160
_NO_SPEECH = 0.6


def model_dir(name: str, cache_dir: Path) -> Path:
    """The CTranslate2 model directory for catalog entry ``stt.<name>`` (joined if split)."""
    spec = get_spec("stt", name)
    if spec.parts:
        return prepare(spec, cache_dir).parent
    return locate(spec, "model_dir")


def window_frames(samples: int, window_s: int) -> int:
    """Encoder frames (10 ms each) for a clip of ``samples``: see the module docstring."""
    if window_s >= 30:
        return 3000
    need = samples / _RATE + 1.0
    seconds = max(window_s, math.ceil(need)) if window_s > 0 else max(10, 5 * math.ceil(need / 5))
    return min(3000, seconds * 100)


class WhisperStt:
    """Whole-clip decoding, greedy by default.  Thread-confined to ``executor``."""

    def __init__(
        self, name: str, cache_dir: Path, threads: int, beam_size: int, window_s: int = 0, device: str = "cpu", compute_type: str = "auto"
    ) -> None:
        if compute_type == "auto":
            compute_type = "float16" if device == "cuda" else "int8"
        self._model = WhisperModel(
            str(model_dir(name, cache_dir)),
            device=device,
            compute_type=compute_type,
            cpu_threads=threads,
            num_workers=1,
            local_files_only=True,
        )
        self._beam_size = beam_size
        self._window_s = window_s
        self._features = FeatureExtractor(feature_size=self._model.feature_extractor.mel_filters.shape[0])
        tok = self._model.hf_tokenizer
        self._sot = [tok.token_to_id("<|startoftranscript|>")]
        self._multilingual = bool(self._model.model.is_multilingual)
        self._task = tok.token_to_id("<|transcribe|>")
        self._no_ts = tok.token_to_id("<|notimestamps|>")
        self._tokenizer = tok
        self.executor = PriorityExecutor("stt")

    def transcribe(self, audio: Float32Array, language: str) -> str:
        frames = window_frames(len(audio), self._window_s)
        if frames >= 3000:
            return self._transcribe_full(audio, language)
        return self._transcribe_window(audio, language, frames)

    def _transcribe_full(self, audio: Float32Array, language: str) -> str:
        segments, _info = self._model.transcribe(
            audio,
            language=language if self._multilingual else None,
            beam_size=self._beam_size,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            temperature=0.0,
        )
        # ``segments`` is lazy: the decoding happens in this loop, in the STT executor.
        return " ".join(seg.text.strip() for seg in segments).strip()

    def _transcribe_window(self, audio: Float32Array, language: str, frames: int) -> str:
        padded = np.zeros(frames * _HOP, dtype=np.float32)
        n = min(len(audio), len(padded))
        padded[:n] = audio[:n]
        feats = np.ascontiguousarray(self._features(padded, padding=0)[:, :frames][np.newaxis])
        prompt = list(self._sot)
        if self._multilingual:
            prompt += [self._tokenizer.token_to_id(f"<|{language}|>"), self._task]
        prompt.append(self._no_ts)
        encoded = self._model.model.encode(ctranslate2.StorageView.from_array(feats), to_cpu=False)
        (result,) = self._model.model.generate(
            encoded, [prompt], beam_size=self._beam_size, max_length=224, return_no_speech_prob=True, suppress_blank=True
        )
        if result.no_speech_prob > _NO_SPEECH:
            return ""
        return str(self._tokenizer.decode(result.sequences_ids[0])).strip()
