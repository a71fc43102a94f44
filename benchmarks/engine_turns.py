#!/usr/bin/env python3
"""The LLM engine alone under a conversation load: K conversations sharing long instructions take
turns at a fixed pace, with no VAD, STT or TTS beside them (issue #31's soak, #30's engines).

Each turn appends a question to its conversation, generates up to ``--max-tokens`` tokens at
temperature 0 (the pieces are consumed as they come, as the LLM stage does) and keeps the reply in
that conversation's history.  Turn ``i`` starts at ``i × --interval`` seconds, conversation
``i mod K``.  Reported per engine: time to the first token and to the end of each turn (p50/p95),
the engine's forward passes (count, tokens carried, seconds) and, for each pass, its time against
the tokens it carried.  Both engines run in the same invocation, one after the other.  JSON on
stdout and in ``--out``.

    .venv/bin/python -m benchmarks.engine_turns --conversations 8 --turns 48 --interval 2 --instructions-chars 8000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.machine import machine  # noqa: E402
from benchmarks.common.prompts import instructions  # noqa: E402
from benchmarks.common.stats import percentiles  # noqa: E402
from voiceagent.backends import llama_cpp  # noqa: E402
from voiceagent.backends.protocols import LlmRequest, Pacing, is_piece  # noqa: E402
from voiceagent.config import load_config  # noqa: E402
from voiceagent.tools.spec import Message  # noqa: E402

QUESTIONS = (
    "When is the keynote?",
    "Where is lunch served?",
    "Who talks about solar forecasting?",
    "What is the Wi-Fi network called?",
    "Where do I get a new badge?",
    "When does Hana Novak speak?",
)


async def run(llm: Any, system: str, k: int, turns: int, interval: float, max_tokens: int) -> list[dict[str, float]]:
    histories: list[list[Message]] = [[] for _ in range(k)]
    locks = [asyncio.Lock() for _ in range(k)]  # a conversation's turns follow one another
    t0 = time.perf_counter()
    out: list[dict[str, float]] = []

    async def turn(i: int) -> None:
        await asyncio.sleep(max(0.0, t0 + i * interval - time.perf_counter()))  # the schedule, not synchronisation
        c = i % k
        async with locks[c]:
            start = time.perf_counter()
            histories[c].append(Message("user", QUESTIONS[i % len(QUESTIONS)]))
            msgs = [Message("system", system), *histories[c]]
            first = None
            text = ""
            async for piece in llm.generate(LlmRequest(f"conv-{c}", msgs, max_tokens, 0.0, pacing=Pacing(8))):
                if not is_piece(piece):
                    continue
                if first is None:
                    first = time.perf_counter()
                if isinstance(piece, str):
                    text += piece
            end = time.perf_counter()
            histories[c].append(Message("assistant", text.strip()))
            out.append(
                {
                    "turn": i,
                    "late_ms": (start - t0 - i * interval) * 1000,
                    "first_ms": ((first or end) - start) * 1000,
                    "end_ms": (end - start) * 1000,
                }
            )

    await asyncio.gather(*(turn(i) for i in range(turns)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=48)
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between turn starts, server-wide")
    ap.add_argument("--instructions-chars", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--engines", default="pool,batched")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="config overrides")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench_engine_turns.json"))
    args = ap.parse_args()
    config = load_config(overrides=dict(s.split("=", 1) for s in args.set))
    system = instructions(args.instructions_chars)
    report: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.engine_turns", *sys.argv[1:]]),
        "engines": {},
    }
    for name in args.engines.split(","):
        cfg = replace(config.llm, batching=name == "batched", context=args.context, contexts=args.conversations)
        llm = llama_cpp.load(cfg, config.cache_path)
        try:
            llm.prime([Message("system", system)])
            before = llm.stats()
            turns = asyncio.run(run(llm, system, args.conversations, args.turns, args.interval, args.max_tokens))
            after = llm.stats()
        finally:
            llm.close()
        passes = after.steps - before.steps
        row = {
            "first_token_ms": percentiles([t["first_ms"] for t in turns]),
            "turn_ms": percentiles([t["end_ms"] for t in turns]),
            "started_late_ms": percentiles([t["late_ms"] for t in turns]),
            "decode_s": round(after.decode_seconds - before.decode_seconds, 2),
            "generated_tokens": after.generated_tokens - before.generated_tokens,
            "prompt_tokens_evaluated": (after.prompt_tokens - before.prompt_tokens) - (after.reused_tokens - before.reused_tokens),
            "passes": passes,
            "pass_tokens": after.step_tokens - before.step_tokens,
            "ms_per_pass": round((after.decode_seconds - before.decode_seconds) * 1000 / passes, 1) if passes else None,
        }
        report["engines"][name] = row
        print(name, json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
