#!/usr/bin/env python3
"""Can speculative decoding pay on this CPU?  The time of one forward pass of k tokens (k = 1..8)
after a short chat prompt, for the 1.5B (the target) and the 0.5B (the draft), with the
configured threads; then, for each draft length k, the accepted tokens per round the scheme
needs to beat plain decoding (issue #48).

A round of speculative decoding drafts k tokens one by one on the small model, then verifies
them in one pass of k + 1 positions on the large one, and keeps the drafted tokens up to the
first the large one disagrees with, plus its own next token: between 1 and k + 1 tokens for
``k * draft(1) + target(k + 1)``.  Plain decoding pays ``target(1)`` a token, so a round pays
only when it yields more than ``(k * draft(1) + target(k + 1)) / target(1)`` tokens on average,
which with a per-token acceptance rate a is ``(1 - a ** (k + 1)) / (1 - a)``: the report gives the
rate each k needs.
Where a pass of several tokens costs about as much per token as one (the cores are busy with
arithmetic, not waiting for memory), that break-even is above k + 1 and no acceptance rate can
reach it.

    .venv/bin/python scripts/bench_draft_verify.py --out docs/bench/draft/verify_cost.json

Run it alone: another busy process on the same cores changes every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from llama_cpp import Llama  # noqa: E402

from scripts.bench.machine import machine  # noqa: E402
from voiceagent.backends.llama_cpp import gguf_path  # noqa: E402
from voiceagent.config import load_config  # noqa: E402

_PROMPT = (
    "<|im_start|>system\nYou are a friendly voice assistant in a spoken conversation. Answer in one or two short, "
    "complete sentences of plain spoken English.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
_REPLY = "The capital of France is Paris, a city known for its art and food."
KS = (1, 2, 3, 4, 5, 6, 8)


def pass_ms(path: Path, threads: int, repeats: int) -> dict[int, float]:
    """Median ms of one forward pass of k reply tokens after the prompt, for each k in :data:`KS`."""
    llm = Llama(model_path=str(path), n_ctx=1024, n_threads=threads, n_batch=64, verbose=False)
    try:
        prompt = llm.tokenize(_PROMPT.encode(), add_bos=False, special=True)
        reply = llm.tokenize(_REPLY.encode(), add_bos=False, special=False)
        llm.eval(prompt)
        base = llm.n_tokens
        out: dict[int, float] = {}
        for k in KS:
            times = []
            for _ in range(repeats):
                llm.n_tokens = base  # eval() drops the cache from here on, then appends
                t0 = time.perf_counter()
                llm.eval(reply[:k])
                times.append(time.perf_counter() - t0)
            out[k] = round(statistics.median(times) * 1000, 1)
        return out
    finally:
        llm.close()


def acceptance_needed(k: int, tokens: float) -> float | None:
    """The per-token acceptance rate a at which a round of ``k`` drafted tokens yields ``tokens``
    on average: (1 - a ** (k + 1)) / (1 - a), the tokens up to the first rejection plus the large
    model's own.  None when not even a = 1 yields that many."""
    if tokens > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        got = sum(a**i for i in range(k + 1))
        lo, hi = (a, hi) if got < tokens else (lo, a)
    return round(hi, 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--target", default="qwen2.5-1.5b")
    ap.add_argument("--target-quant", default="shipped")
    ap.add_argument("--draft", default="qwen2.5-0.5b")
    ap.add_argument("--draft-quant", default="iq4_nl")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    cfg = load_config(env={}, overrides={})
    threads = cfg.llm.threads
    target = pass_ms(gguf_path(args.target, cfg.cache_path, args.target_quant), threads, args.repeats)
    draft = pass_ms(gguf_path(args.draft, cfg.cache_path, args.draft_quant), threads, args.repeats)
    rounds: list[dict[str, Any]] = []
    for k in KS:
        if k + 1 not in target:
            continue
        cost = k * draft[1] + target[k + 1]
        rounds.append(
            {
                "draft_tokens": k,
                "round_ms": round(cost, 1),
                "break_even_tokens_per_round": round(cost / target[1], 2),
                "most_tokens_per_round": k + 1,
                "can_pay": cost / target[1] < k + 1,
                "acceptance_needed": acceptance_needed(k, cost / target[1]),
            }
        )
    report = {
        "machine": machine(),
        "threads": threads,
        "target": {"model": args.target, "quant": args.target_quant, "pass_ms": target},
        "draft": {"model": args.draft, "quant": args.draft_quant, "pass_ms": draft},
        "rounds": rounds,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
