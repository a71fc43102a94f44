#!/usr/bin/env python3
"""The batched engine's KV layout: one decode step of 8 conversations, unified KV cache against
per-sequence streams (issue #30 follow-up).

``voiceagent/backends/llama_batch.py`` builds its context with ``kv_unified = True``: one pool
of cells for every sequence, so a copied prefix is shared, but each token's attention runs over
every used cell (other sequences' masked out).  With ``kv_unified = False`` each sequence has its
own stream: attention over its own cells only, and a prefix cannot be shared (``seq_cp`` between
streams is refused), so it is copied with ``llama_state_seq_get_data``/``set_data``.

The run: ``PREFIX`` tokens evaluated once in sequence 0 and copied to the other 7, then ``OWN``
tokens of each conversation's own history, then the median time of a step that decodes one token
of all 8 sequences, and of a step of sequence 0 alone.  JSON on stdout.

    .venv/bin/python scripts/bench_kv_layout.py --prefix 2000 --own 1500
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from pathlib import Path
from typing import Any, cast

import llama_cpp
from llama_cpp import Llama

ROOT = Path(__file__).resolve().parent.parent

from voiceagent.backends.llama_cpp import gguf_path  # noqa: E402
from voiceagent.config import load_config  # noqa: E402

SEQ, STEPS, BATCH = 8, 16, 256


def run(model: Any, unified: bool, prefix: int, own: int, threads: int) -> dict[str, float]:
    p = llama_cpp.llama_context_default_params()
    p.n_ctx = SEQ * 4096
    p.n_batch = p.n_ubatch = BATCH
    p.n_seq_max = SEQ
    p.n_threads = p.n_threads_batch = threads
    p.kv_unified = unified
    p.no_perf = True
    ctx = llama_cpp.llama_init_from_model(model, p)
    batch = llama_cpp.llama_batch_init(BATCH, 0, 1)

    def decode(entries: list[tuple[int, int, int, bool]]) -> None:
        for i, (tok, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, pos, 1, logits
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(entries)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")

    try:
        t0 = time.perf_counter()
        for a in range(0, prefix, BATCH):
            decode([(100 + i % 500, i, 0, False) for i in range(a, min(prefix, a + BATCH))])
        prefill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if unified:
            mem = llama_cpp.llama_get_memory(ctx)
            for s in range(1, SEQ):
                llama_cpp.llama_memory_seq_cp(mem, 0, s, 0, prefix)
        else:
            size = llama_cpp.llama_state_seq_get_size(ctx, 0)
            buf = (ctypes.c_uint8 * size)()
            got = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
            for s in range(1, SEQ):
                if llama_cpp.llama_state_seq_set_data(ctx, buf, got, s) <= 0:
                    raise SystemExit("llama_state_seq_set_data failed")
        copy_s = time.perf_counter() - t0
        for s in range(SEQ):
            for a in range(0, own, BATCH):
                decode([(400 + s + i % 300, prefix + i, s, False) for i in range(a, min(own, a + BATCH))])
        end = prefix + own
        steps, alone = [], []
        for k in range(STEPS):
            t0 = time.perf_counter()
            decode([(200 + s, end + k, s, True) for s in range(SEQ)])
            steps.append(time.perf_counter() - t0)
        for k in range(STEPS):
            t0 = time.perf_counter()
            decode([(300, end + STEPS + k, 0, True)])
            alone.append(time.perf_counter() - t0)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
    return {
        "prefill_s": round(prefill_s, 2),
        "prefix_copy_s": round(copy_s, 2),
        "step_8_sequences_ms": round(statistics.median(steps) * 1000, 1),
        "step_1_sequence_ms": round(statistics.median(alone) * 1000, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", type=int, default=2000, help="tokens every conversation shares (the instructions)")
    ap.add_argument("--own", type=int, default=1500, help="tokens of each conversation's own history")
    args = ap.parse_args()
    cfg = load_config()
    path = gguf_path(cfg.llm.model, cfg.cache_path, cfg.llm.quant)
    llm = Llama(model_path=str(path), n_ctx=32, n_batch=8, n_threads=cfg.llm.threads, use_mmap=True, verbose=False)
    model = cast(Any, llm)._model.model
    report: dict[str, Any] = {"model": path.name, "prefix_tokens": args.prefix, "own_tokens": args.own, "sequences": SEQ}
    for unified in (True, False):
        report["unified" if unified else "per_sequence"] = run(model, unified, args.prefix, args.own, cfg.llm.threads)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
