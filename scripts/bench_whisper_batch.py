#!/usr/bin/env python3
"""Does batching Whisper's final decodes pay on this machine? (issue #30, item 3)

When K sessions' final transcripts are due at the same instant, the STT executor today decodes
them one after another: K encoder passes and K greedy decodes.  CTranslate2's Whisper takes a
batch (``encode`` of K feature windows, ``generate`` with K prompts).  This script times both on
the same clips, with the product's own decode settings (the short encoder window,
``voiceagent.backends.whisper.window_frames``; greedy or ``--beam``; the product's thread count),
and checks that the batch writes the same transcripts.

For K = 1, 2, 4, 8 it takes K of the spoken fixtures (the concurrency benchmark's questions),
pads them to the longest one's window (a batch shares one window), and reports per K:
``sequential_ms`` (the K decodes one by one, as today, each at its own window) and
``batched_ms`` (one batch), both the time until the last of the K transcripts is ready (what
the K-th caller waits for), their ratio, and ``first_done_ms_sequential``: the first caller's
wait in the sequential order (the batch hands every transcript out at once).  Medians of
``--repeats``.

    .venv/bin/python scripts/bench_whisper_batch.py --out artifacts/bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.feature_extractor import FeatureExtractor

ROOT = Path(__file__).resolve().parent.parent

from scripts import make_fixtures  # noqa: E402
from scripts.bench.machine import machine  # noqa: E402
from scripts.bench.sessions import QUESTIONS  # noqa: E402
from voiceagent.audio import int16_to_float, read_wav, resample  # noqa: E402
from voiceagent.backends.whisper import window_frames  # noqa: E402
from voiceagent.config import load_config  # noqa: E402
from voiceagent.models.source import resolve  # noqa: E402

RATE = 16000
HOP = 160


class Whisper:
    """The product's short-window decode (voiceagent.backends.whisper.WhisperStt), singly or batched."""

    def __init__(self, path: Path, threads: int, beam: int) -> None:
        self.model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=threads, num_workers=1, local_files_only=True)
        self.features = FeatureExtractor(feature_size=self.model.feature_extractor.mel_filters.shape[0])
        tok = self.model.hf_tokenizer
        prompt = [tok.token_to_id("<|startoftranscript|>")]
        if self.model.model.is_multilingual:
            prompt += [tok.token_to_id("<|en|>"), tok.token_to_id("<|transcribe|>")]
        self.prompt = [*prompt, tok.token_to_id("<|notimestamps|>")]
        self.tok = tok
        self.beam = beam

    def _feats(self, audio: np.ndarray, frames: int) -> np.ndarray:
        padded = np.zeros(frames * HOP, dtype=np.float32)
        n = min(len(audio), len(padded))
        padded[:n] = audio[:n]
        return np.asarray(self.features(padded, padding=0)[:, :frames], dtype=np.float32)

    def decode(self, clips: list[np.ndarray], frames: int) -> list[str]:
        feats = np.ascontiguousarray(np.stack([self._feats(c, frames) for c in clips]))
        encoded = self.model.model.encode(ctranslate2.StorageView.from_array(feats), to_cpu=False)
        results = self.model.model.generate(encoded, [self.prompt] * len(clips), beam_size=self.beam, max_length=224, suppress_blank=True)
        return [str(self.tok.decode(r.sequences_ids[0])).strip() for r in results]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench"))
    ap.add_argument("--sizes", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--beam", type=int, default=0, help="beam size (default: the configured stt.beam_size)")
    args = ap.parse_args()
    config = load_config()
    beam = args.beam or config.stt.beam_size
    path = resolve("stt", config.stt.model, config.cache_path).path
    whisper = Whisper(path, config.stt.threads, beam)
    fixtures = make_fixtures.make_all(ROOT / ".cache" / "fixtures")
    clips: list[np.ndarray] = []
    for name in QUESTIONS:
        pcm, rate = read_wav(fixtures[name])
        clips.append(int16_to_float(resample(pcm, rate, RATE)))
    whisper.decode(clips[:1], window_frames(len(clips[0]), config.stt.window_s))  # warm-up
    rows: list[dict[str, Any]] = []
    for k in (int(s) for s in args.sizes.split(",")):
        batch = [clips[i % len(clips)] for i in range(k)]
        shared = max(window_frames(len(c), config.stt.window_s) for c in batch)
        seq_ms: list[float] = []
        bat_ms: list[float] = []
        same = True
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            singles = [whisper.decode([c], window_frames(len(c), config.stt.window_s))[0] for c in batch]
            seq_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            batched = whisper.decode(batch, shared)
            bat_ms.append((time.perf_counter() - t0) * 1000)
            same = same and batched == singles
        seq, bat = statistics.median(seq_ms), statistics.median(bat_ms)
        rows.append(
            {
                "k": k,
                "window_s": shared / 100,
                "sequential_ms": round(seq, 1),
                "batched_ms": round(bat, 1),
                "batched_over_sequential": round(bat / seq, 3),
                "first_done_ms_sequential": round(seq / k, 1),
                "same_transcripts": same,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    report = {
        "machine": machine(),
        "command": " ".join(["scripts/bench_whisper_batch.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "model": config.stt.model,
        "beam_size": beam,
        "threads": config.stt.threads,
        "repeats": args.repeats,
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "whisper_batch.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / 'whisper_batch.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
