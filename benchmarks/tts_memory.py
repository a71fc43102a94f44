#!/usr/bin/env python3
"""Piper's memory over a conversation's clauses, with ONNX Runtime's CPU arena on and off.

Each variant runs in its own process (RSS is per process): the voice is loaded as the product
loads it (``voiceagent.backends.piper_tts.PiperTts``), then clauses of growing length (the TTS
stage cuts clauses at 24 words, about 150 characters) are synthesized, with both of its ONNX
sessions (one thread and all threads), and the anonymous RSS is read after each.  Then the
median time of a typical first clause and of a 24-word clause.  ``arena`` is the product before
this change (ORT's CPU arena on, no heap trim); ``product`` is what ``PiperTts`` does now (the
arena off, the heap trimmed when it holds much free memory, at most every 5 s).  The
variants alternate ``--rounds`` times.  JSON on stdout.

    .venv/bin/python -m benchmarks.tts_memory
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("arena", "product")
LENGTHS = (20, 60, 120, 160, 40, 160, 100)
SHORT = "Sure, the museum opens at nine."
LONG = "The train from London to Paris takes about two hours and twenty minutes, and it leaves from St Pancras station every hour or so"


def anon_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("RssAnon:"))


def child(variant: str) -> dict[str, Any]:
    from voiceagent.backends import piper_tts
    from voiceagent.config import load_config

    if variant == "arena":  # the product before: ORT's CPU arena on, no heap trim
        opts_cls = piper_tts.ort.SessionOptions

        class Arena(opts_cls):  # type: ignore[misc, valid-type]
            def __setattr__(self, name: str, value: Any) -> None:
                super().__setattr__(name, True if name == "enable_cpu_mem_arena" else value)

        piper_tts.ort.SessionOptions = Arena
    cfg = load_config()
    tts = piper_tts.PiperTts(cfg.tts.model, cfg.tts.threads, cache_dir=cfg.cache_path)
    if variant == "arena":
        tts.heap.interval_s = float("inf")  # nor the heap trim that came with the arena's removal
    text = (LONG + " ") * 3
    rss = [("loaded", round(anon_mb(), 1))]
    for n in LENGTHS:
        for threads in sorted(tts._sessions):
            tts.contended = lambda t=threads: t == 1
            list(tts.synthesize(text[:n], 1.0))
        rss.append((n, round(anon_mb(), 1)))
    tts.contended = lambda: False
    times: dict[str, float] = {}
    for name, clause in (("short_ms", SHORT), ("long_ms", LONG)):
        samples = []
        for _ in range(7):
            t0 = time.perf_counter()
            list(tts.synthesize(clause, 1.0))
            samples.append(time.perf_counter() - t0)
        times[name] = round(statistics.median(samples) * 1000, 1)
    return {"variant": variant, "rss_anon_mb": rss, "growth_mb": round(rss[-1][1] - rss[1][1], 1), **times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", choices=VARIANTS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    runs = []
    for _ in range(args.rounds):
        for variant in VARIANTS:
            out = subprocess.run([sys.executable, __file__, "--child", variant], capture_output=True, text=True, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    summary = {
        v: {k: statistics.median(r[k] for r in runs if r["variant"] == v) for k in ("growth_mb", "short_ms", "long_ms")} for v in VARIANTS
    }
    print(json.dumps({"lengths": LENGTHS, "runs": runs, "median": summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
