#!/usr/bin/env python3
"""Flash attention off and on in one pool context (``llm.batching = false``): prefill speed,
decode step and the anonymous memory a long prompt leaves resident.

One llama.cpp context of the ``fast`` profile's model as ``LlamaCppContext`` makes it (4,096
tokens, 2 threads, batches of 256), a ~3,000-token prompt (the soak's conference instructions)
evaluated, then 40 single-token steps after it; twice each, alternating.  JSON on stdout.

    .venv/bin/python scripts/bench_flash_attn.py
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from llama_cpp import Llama  # noqa: E402

from scripts.bench.prompts import instructions  # noqa: E402
from voiceagent.backends.llama_cpp import gguf_path  # noqa: E402
from voiceagent.config import load_config  # noqa: E402


def rss_anon_mb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) // 1024 for line in fh if line.startswith("RssAnon:"))


def main() -> None:
    config = load_config(None, env={}, overrides={"profile": "fast"})
    path = gguf_path(config.llm.model, ROOT / ".cache", config.llm.quant)
    text = instructions(8000)
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(2):
        for flash in (False, True):
            llm = Llama(model_path=str(path), n_ctx=4096, n_threads=2, n_threads_batch=2, n_batch=256, verbose=False, flash_attn=flash)
            tokens = llm.tokenize(text.encode())[:3000]
            before = rss_anon_mb()
            t0 = time.perf_counter()
            llm.eval(tokens)
            prefill = time.perf_counter() - t0
            grown = rss_anon_mb() - before
            t0 = time.perf_counter()
            for token in tokens[:40]:
                llm.eval([token])
            step = (time.perf_counter() - t0) / 40
            runs.setdefault(f"flash_attn={flash}", []).append(
                {
                    "prefill_tokens_per_s": round(len(tokens) / prefill, 1),
                    "decode_step_ms": round(step * 1000, 1),
                    "rss_anon_growth_mb": grown,
                }
            )
            llm.close()
            del llm
            gc.collect()
    print(json.dumps({"model": path.name, "prompt_tokens": 3000, "runs": runs}, indent=1))


if __name__ == "__main__":
    # No options; a parser so that ``--help`` describes the run instead of starting it.
    argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0]).parse_args()
    main()
