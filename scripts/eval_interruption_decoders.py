#!/usr/bin/env python3
"""Each clip of the interruption set, cut by the real VAD, transcribed by several Whisper set-ups.

Offline (no server): a case's clip (``scripts/interruptions.toml``) is resampled to 16 kHz, cut by
silero as the VAD stage cuts a question (:class:`scripts.bench.stt.VadCutter`), and every cut is
transcribed by Whisper tiny and base, greedy and at beam 5, on the short-window path the server
uses.  Per cut: each set-up's text, its confidence and its decode time.  It answers whether a
second decode of a short segment over a paused reply (a beam, a larger model) would hear the
sounds and the misheard words better (docs/decisions/interruptions.md).  The server's own cuts
differ by a frame or two, so its transcripts differ too: the bench is the measure of the rules.

Usage: .venv/bin/python -m scripts.eval_interruption_decoders [--out FILE] [--group NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from scripts import bench_interruptions
from scripts.bench.stt import SttConfig, VadCutter, load_backend
from voiceagent.audio import resample
from voiceagent.backends.protocols import confidence_of

SETUPS = {
    "tiny1": SttConfig("whisper-tiny", 1),
    "tiny5": SttConfig("whisper-tiny", 5),
    "base1": SttConfig("whisper-base", 1),
    "base5": SttConfig("whisper-base", 5),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--group", help="only the cases of this group (dev, held-out-1, ...)")
    args = parser.parse_args()
    _, _, cases = bench_interruptions.load_set(None, None, args.group)
    cutter = VadCutter()
    models = {name: load_backend(setup) for name, setup in SETUPS.items()}
    out: list[dict[str, Any]] = []
    for case in cases:
        pcm = resample(case.pcm, bench_interruptions.RATE, 16000).astype(np.float32) / 32768
        record: dict[str, Any] = {"group": case.group, "kind": case.kind, "case": case.name, "cuts": []}
        for start, end, audio in cutter.cuts(pcm):
            cut: dict[str, Any] = {"ms": round(end - start)}
            for name, stt in models.items():
                t0 = time.perf_counter()
                text = stt.transcribe(audio, "en")
                sure = confidence_of(text)
                ms = round((time.perf_counter() - t0) * 1000)
                cut[name] = {"text": str(text), "confidence": None if sure is None else round(sure, 3), "ms": ms}
            record["cuts"].append(cut)
        out.append(record)
        print(json.dumps(record), file=sys.stderr, flush=True)
    text = json.dumps({"setups": {name: setup.label for name, setup in SETUPS.items()}, "cases": out}, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
