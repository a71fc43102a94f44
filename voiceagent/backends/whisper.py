"""Speech-to-text with faster-whisper (CTranslate2), Whisper tiny or base from packages."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from faster_whisper import WhisperModel

from voiceagent.audio import Float32Array
from voiceagent.catalog import get_spec, locate, prepare

__all__ = ["WhisperStt", "model_dir"]


def model_dir(name: str, cache_dir: Path) -> Path:
    """The CTranslate2 model directory for catalog entry ``stt.<name>`` (joined if split)."""
    spec = get_spec("stt", name)
    if spec.parts:
        return prepare(spec, cache_dir).parent
    return locate(spec, "model_dir")


class WhisperStt:
    """Whole-clip decoding, greedy by default.

    Whisper's encoder always sees a 30 s window, so a decode costs about the same for 1 s or 10 s
    of speech: the STT stage decides *when* to decode, this class only decodes.
    """

    def __init__(self, name: str, cache_dir: Path, threads: int, beam_size: int) -> None:
        self._model = WhisperModel(
            str(model_dir(name, cache_dir)),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
            num_workers=1,
            local_files_only=True,
        )
        self._beam_size = beam_size
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stt")

    def transcribe(self, audio: Float32Array, language: str) -> str:
        segments, _info = self._model.transcribe(
            audio,
            language=language,
            beam_size=self._beam_size,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            temperature=0.0,
        )
        # ``segments`` is lazy: the decoding happens in this loop, in the STT executor.
        return " ".join(seg.text.strip() for seg in segments).strip()
