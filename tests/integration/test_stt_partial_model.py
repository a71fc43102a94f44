"""``stt.partial_model`` on the real packaged models: Whisper base (beam 5) for the final, tiny
(greedy) for partials, on one decoder thread, each hearing the clip."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import ROOT, make_fixtures
from tests.profile import profile_config
from voiceagent.audio import int16_to_float, read_wav, resample
from voiceagent.backends.registry import load_partials
from voiceagent.backends.whisper import WhisperStt
from voiceagent.pipeline.offload import run_at
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.stages.stt import PRIORITY_FINAL, PRIORITY_PARTIAL

pytestmark = [pytest.mark.models, pytest.mark.unpaced]


def test_partials_from_tiny_share_base_s_decoder_thread_and_both_hear_the_clip(run: Callable[..., Any]) -> None:
    cfg = profile_config({"stt.model": "whisper-base", "stt.beam_size": "5", "stt.partial_model": "whisper-tiny"})
    final = WhisperStt(cfg.stt.model, cfg.cache_path, threads=1, beam_size=cfg.stt.beam_size)
    partials = load_partials(cfg, final)
    try:
        assert partials.executor is final.executor and isinstance(final.executor, PriorityExecutor)
        pcm, rate = read_wav(make_fixtures.make_all(ROOT / ".cache" / "fixtures")["weather"])
        audio = int16_to_float(resample(pcm, rate, 16000))
        threads: dict[str, str] = {}

        def decode(name: str, model: Any) -> str:
            threads[name] = threading.current_thread().name
            return str(model.transcribe(audio, "en"))

        async def main() -> tuple[str, str]:
            # Queued together, as a partial and a final of two sessions can be.
            draft = run_at(final.executor, PRIORITY_PARTIAL, lambda: decode("partial", partials))
            whole = run_at(final.executor, PRIORITY_FINAL, lambda: decode("final", final))
            a, b = await asyncio.gather(draft, whole)
            return a, b

        draft, whole = run(main(), 60)
        assert "moon" in draft.lower(), draft
        assert "moon" in whole.lower(), whole
        assert threads["partial"] == threads["final"]
    finally:
        final.executor.shutdown(wait=True)
