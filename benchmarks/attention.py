#!/usr/bin/env python3
"""The batched engine's core with llama.cpp's flash attention on and off: what the steps a turn
waits for cost at a given length of instructions.

For each ``--chars`` (the conference instructions of benchmarks/common/prompts.py, as one system
message) and each setting, on a fresh :class:`~voiceagent.backends.llama_batch.BatchContext` of
the configured model and threads:

* ``prefill_tok_s``: the instructions evaluated in 256-token chunks (a prime, a new conversation);
* ``prompt32_ms``: 32 more prompt tokens in one pass (a turn's new words and the reply before them);
* ``decode1_ms``: one conversation's next token (median of 5);
* ``decode8_ms``: eight conversations' next tokens in one step (a burst's first clauses; median of 3).

JSON on stdout, a line per measurement on stderr.  Run it alone (two cores: anything else on them
shows in every figure), e.g.::

    .venv/bin/python -m benchmarks.attention --profile fast --chars 3000,12000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common.machine import machine
from benchmarks.common.prompts import instructions
from voiceagent.backends.llama_batch import BatchContext, Entry
from voiceagent.backends.llama_cpp import gguf_path
from voiceagent.config import load_config
from voiceagent.tools.spec import Message

NEW = 32
"""Prompt tokens of a turn's pass (its words and the reply before them)."""
OTHERS = 8


def measure(path: Path, threads: int, chars: int, flash_attn: bool) -> dict[str, object]:
    core = BatchContext(path, threads, 16384, OTHERS + 1, 32768, flash_attn=flash_attn)
    try:
        system = Message("system", instructions(chars))
        prompt = core.render.prompt_tokens([system, Message("user", "When is lunch served today, and where is it, please? " * 3)], ())
        n = len(prompt) - NEW

        def timed(entries: list[Entry]) -> float:
            t0 = time.perf_counter()
            if core.decode(entries) != 0:
                raise SystemExit("llama_decode failed")
            return (time.perf_counter() - t0) * 1000

        t0 = time.perf_counter()
        for a in range(0, n, 256):
            timed([(prompt[i], i, 0, False) for i in range(a, min(n, a + 256))])
        prefill_s = time.perf_counter() - t0
        for seq in range(1, OTHERS + 1):
            core.copy(0, seq, n)
        prompt32 = timed([(prompt[i], i, 0, i == n + NEW - 1) for i in range(n, n + NEW)])
        decode1 = statistics.median(timed([(100 + k, n + NEW + k, 0, True)]) for k in range(5))
        decode8 = statistics.median(timed([(100 + k, n + k, seq, True) for seq in range(1, OTHERS + 1)]) for k in range(3))
    finally:
        core.close()
    return {
        "chars": chars,
        "flash_attn": flash_attn,
        "context_tokens": n,
        "prefill_tok_s": round(n / prefill_s),
        "prompt32_ms": round(prompt32),
        "decode1_ms": round(decode1, 1),
        "decode8_ms": round(decode8, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="fast")
    ap.add_argument("--chars", default="3000,12000", help="comma-separated instruction lengths")
    ap.add_argument("--repeat", type=int, default=1, help="measure each setting this many times, alternating")
    args = ap.parse_args()
    cfg = load_config(env={}, overrides={"profile": args.profile})
    path = gguf_path(cfg.llm.model, cfg.cache_path, cfg.llm.quant)
    rows = []
    for chars in (int(c) for c in args.chars.split(",")):
        for _ in range(args.repeat):
            for flash_attn in (True, False):
                row = measure(path, cfg.llm.threads, chars, flash_attn)
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
    print(json.dumps({"machine": machine(), "profile": args.profile, "model": path.name, "threads": cfg.llm.threads, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
