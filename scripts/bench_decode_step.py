#!/usr/bin/env python3
"""One decode step of the batched engine's core at a long context: the time of ``llama_decode``
of a single token after ``PREFIX`` tokens of one sequence, for context shapes given as
``window,sequences,kv_tokens,prefix`` (``voiceagent.backends.llama_batch.BatchContext``, the
configured model and threads).  Also the prefill rate on the way.  JSON on stdout.

    .venv/bin/python scripts/bench_decode_step.py 13312,16,26624,11000 13312,1,13312,11000

Run it alone: with another process busy on the same cores a step can take fifty times as long
(docs/reports/soak-2026-11-26.md).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from voiceagent.backends.batch_engine import Entry  # noqa: E402
from voiceagent.backends.llama_batch import BatchContext  # noqa: E402
from voiceagent.backends.llama_cpp import gguf_path  # noqa: E402
from voiceagent.config import load_config  # noqa: E402


def main() -> int:
    shapes = [tuple(int(x) for x in arg.split(",")) for arg in sys.argv[1:]] or [(13312, 16, 26624, 11000)]
    cfg = load_config()
    path = gguf_path(cfg.llm.model, cfg.cache_path, cfg.llm.quant)
    rows = []
    for window, sequences, kv_tokens, prefix in shapes:
        core = BatchContext(path, cfg.llm.threads, window, sequences, kv_tokens)
        try:
            t0 = time.perf_counter()
            for a in range(0, prefix, 256):
                if core.decode([Entry(100 + i % 500, i, 0, False) for i in range(a, min(prefix, a + 256))]) != 0:
                    raise SystemExit("llama_decode failed")
            prefill_s = time.perf_counter() - t0
            steps = []
            for k in range(8):
                t0 = time.perf_counter()
                if core.decode([Entry(300, prefix + k, 0, True)]) != 0:
                    raise SystemExit("llama_decode failed")
                steps.append(time.perf_counter() - t0)
        finally:
            core.close()
        row = {
            "window": window,
            "sequences": sequences,
            "kv_tokens": kv_tokens,
            "prefix": prefix,
            "prefill_tokens_per_s": round(prefix / prefill_s),
            "step_ms": round(statistics.median(steps) * 1000, 1),
        }
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    print(json.dumps({"model": path.name, "threads": cfg.llm.threads, "shapes": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
