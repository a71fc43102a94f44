#!/usr/bin/env python3
"""Speed of the embedded LLM per ``llm.quant``: one llama.cpp context, no server, no other model.

For each weight type (the packaged GGUF, and the conversions ``voiceagent models prepare`` makes),
one context on ``llm.threads`` threads answers six short questions (greedy, 16 tokens, each after
the system prompt is cached, as in a conversation) and then reads a ~600-token prompt.  Reports the
median time to the first token, the median time per later token and the long prompt's first
token.  Answer quality is measured apart, with ``benchmarks/eval_answers.py --set llm.quant=...``.
Converting a type not yet in the cache takes about a minute (once).

    .venv/bin/python -m benchmarks.llm_weights --quants shipped,iq4_nl,q4_0 --out artifacts/bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from voiceagent.backends.llama_cpp import LlamaCppContext, gguf_path
from voiceagent.config import load_config
from voiceagent.tools.spec import Message

QUESTIONS = (
    "What is the capital of France?",
    "Tell me a fun fact about the moon.",
    "How do I boil an egg?",
    "What color is the sky on a clear day?",
    "Can you recommend a good book to read on holiday?",
    "How many legs does a spider have?",
)


def timed(context: LlamaCppContext, messages: list[Message], max_tokens: int) -> tuple[float, float, str]:
    """(ms to the first token, ms per later token, the reply)."""
    t0 = time.perf_counter()
    first = 0.0
    pieces: list[str] = []
    for piece in context.stream(messages, max_tokens, 0.0):
        if not pieces:
            first = time.perf_counter()
        pieces.append(str(piece))
    end = time.perf_counter()
    return (first - t0) * 1000, (end - first) * 1000 / max(1, len(pieces) - 1), "".join(pieces)


def measure(path: Path, threads: int, instructions: str) -> dict[str, object]:
    context = LlamaCppContext(path, threads, 2048)
    try:
        context.fill_buffers()
        system = Message("system", instructions)
        timed(context, [system, Message("user", "Hello.")], 2)  # the system prompt is cached from here on
        rows = [timed(context, [system, Message("user", q)], 16) for q in QUESTIONS]
        long_system = Message("system", instructions + " " + "Some context. " * 150)
        long_first, _, _ = timed(context, [long_system, Message("user", "Hi.")], 2)
        return {
            "model_file": path.name,
            "first_token_ms_median": round(statistics.median(r[0] for r in rows), 1),
            "per_token_ms_median": round(statistics.median(r[1] for r in rows), 1),
            "long_prompt_first_token_ms": round(long_first, 1),
            "long_prompt_tokens": context.count_tokens(long_system.content),
            "replies": [r[2] for r in rows],
        }
    finally:
        context.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quants", default="shipped,iq4_nl,q4_0")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--out", default="", help="folder for llm_weights.json (default: print only)")
    args = ap.parse_args()
    config = load_config(overrides=dict(kv.split("=", 1) for kv in args.set))
    results: dict[str, object] = {"model": config.llm.model, "threads": config.llm.threads}
    for quant in args.quants.split(","):
        path = gguf_path(config.llm.model, config.cache_path, quant)
        row = measure(path, config.llm.threads, config.llm.instructions)
        results[quant] = row
        print(
            f"{quant:8s} first token {row['first_token_ms_median']} ms, {row['per_token_ms_median']} ms/token, "
            f"{row['long_prompt_tokens']}-token prompt {row['long_prompt_first_token_ms']} ms",
            flush=True,
        )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "llm_weights.json").write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {out / 'llm_weights.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
