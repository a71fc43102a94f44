"""The real Piper voice over clauses of growing length: the process's memory levels off.

With ONNX Runtime's CPU arena (the voice before), each longer clause grew the anonymous RSS for
good: +350 MB over clauses of up to 160 characters (benchmarks/tts_memory.py).  Without it,
and with the heap trimmed, it stays within a small margin of where it started.
"""

from __future__ import annotations

import pytest

from voiceagent.backends.heap import free_bytes
from voiceagent.backends.piper_tts import PiperTts
from voiceagent.config import load_config

pytestmark = pytest.mark.unpaced

TEXT = "The train from London to Paris takes about two hours and twenty minutes, and it leaves from St Pancras station every hour. " * 2


def _anon_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("RssAnon:"))


def test_the_voice_runs_without_the_onnx_arena() -> None:
    cfg = load_config()
    tts = PiperTts(cfg.tts.model, 2, cache_dir=cfg.cache_path)
    for session in tts._sessions.values():
        assert session.get_session_options().enable_cpu_mem_arena is False


def test_memory_levels_off_over_longer_clauses() -> None:
    cfg = load_config()
    tts = PiperTts(cfg.tts.model, 2, cache_dir=cfg.cache_path)
    tts.heap.interval_s = 0.0  # trim whenever the slack is exceeded: the bound, not the rate, is tested
    audio = [sum(len(c) for c in tts.synthesize(TEXT[:20], 1.0))]
    start = _anon_mb()
    highest = start
    for n in (60, 120, 160, 40, 160, 100):
        for threads in sorted(tts._sessions):  # both ONNX sessions, as a busy server uses them
            tts.contended = lambda t=threads: t == 1
            audio.append(sum(len(c) for c in tts.synthesize(TEXT[:n], 1.0)))
        highest = max(highest, _anon_mb())
    assert min(audio) > 0
    margin = 64 + (tts.heap.slack / 2**20 if free_bytes() is not None else 0)
    assert highest - start < margin, f"RSS grew {highest - start:.0f} MB over clauses of up to 160 characters"
