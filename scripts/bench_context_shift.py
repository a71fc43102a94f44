#!/usr/bin/env python3
"""The turn after a cut, with the context shift (``llm.context_shift``) on and off, on both
embedded engines: first-token time, the prompt tokens evaluated, and whether the answer still
comes from the turns kept.

Four conversations at once, each with the soak's ~8,000 characters of conference instructions
and 16 turns that each state a fact about the caller.  One turn fills each cache; then the
oldest 6 turns are dropped, as the fitter drops them (whole turns, the instructions kept), and
each conversation is asked about two facts that only its kept turns hold.  Temperature 0.

    .venv/bin/python scripts/bench_context_shift.py [--out docs/bench/context_shift.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from scripts.bench.prompts import instructions  # noqa: E402
from voiceagent.backends import llama_cpp  # noqa: E402
from voiceagent.backends.protocols import LlmEngine, LlmRequest, Usage, is_piece  # noqa: E402
from voiceagent.config import load_config  # noqa: E402
from voiceagent.tools.spec import Message  # noqa: E402

NAMES = ["Oliver", "Maria", "Kenji", "Amara"]
THINGS = ["dog", "car", "job", "sister", "cat", "bike", "school", "team", "street", "doctor", "garden", "song"]
THINGS += ["city", "boss", "drink", "hobby"]
VALUES = {
    "Oliver": "Rex|a red Volvo|baker|Anna|Tom|a blue Trek|Oakwood|the Hawks|Elm Road|Dr Patel|roses|Yellow|Leeds|Mr Grey|tea|chess",
    "Maria": "Bolt|a white Fiat|nurse|Lucia|Mimi|a Giant|Riverside|the Sharks|Oak Lane|Dr Costa|tulips|Hello|Porto|Mrs Stone|coffee|tennis",
    "Kenji": "Shiro|a grey Honda|teacher|Yumi|Kuro|a Bianchi|Hillside|the Lions|Pine Street|Dr Sato|bamboo|Imagine|Osaka|Mr Mori|tea|judo",
    "Amara": "Simba|a silver Kia|pilot|Zola|Nala|a Raleigh|Greenfield|the Eagles|Bay Street|Dr Obi|lilies|Africa|Lagos|Ms Eze|juice|dance",
}
DROP = 6


def conversation(name: str, system: str) -> list[Message]:
    msgs = [Message("system", system)]
    for thing, value in zip(THINGS, VALUES[name].split("|"), strict=True):
        msgs += [
            Message("user", f"Please remember that my {thing} is {value}."),
            Message("assistant", f"Got it, {name}: your {thing} is {value}. I will keep that in mind for you."),
        ]
    return msgs


async def ask(engine: LlmEngine, key: str, messages: list[Message]) -> dict[str, Any]:
    usage, out, first = Usage(), "", None
    t0 = time.perf_counter()
    async with contextlib.aclosing(engine.generate(LlmRequest(key, messages, 40, 0.0))) as pieces:
        async for piece in pieces:
            if isinstance(piece, Usage):
                usage = piece
                continue
            if not is_piece(piece):
                continue
            if first is None and str(piece).strip():
                first = time.perf_counter() - t0
            out += str(piece)
    return {"reply": out, "first_token_s": round(first or 0.0, 3), "prompt": usage.prompt_tokens, "reused": usage.reused_tokens}


async def run(batching: bool, shift: bool) -> dict[str, Any]:
    config = load_config(
        None,
        env={},
        overrides={
            "profile": "fast",
            "llm.context": "4096",
            "llm.contexts": "4",
            "llm.batching": str(batching).lower(),
            "llm.context_shift": str(shift).lower(),
        },
    )
    engine = llama_cpp.load(config.llm, ROOT / ".cache")
    try:
        system = instructions(8000)
        engine.prime([Message("system", system), Message("user", "")])  # as the server primes its own instructions
        full = {n: conversation(n, system) for n in NAMES}
        before = await asyncio.gather(*(ask(engine, n, [*full[n], Message("user", "Thanks for listening.")]) for n in NAMES))
        question = Message("user", "Which city do I live in, and who is my boss?")
        cut = {
            n: [
                full[n][0],
                *full[n][1 + 2 * DROP :],
                Message("user", "Thanks for listening."),
                Message("assistant", before[i]["reply"]),
                question,
            ]
            for i, n in enumerate(NAMES)
        }
        after = await asyncio.gather(*(ask(engine, n, cut[n]) for n in NAMES))
        for n, a in zip(NAMES, after, strict=True):
            city, boss = VALUES[n].split("|")[12:14]  # kept after the cut
            a["right"] = city in a["reply"] and boss.split()[-1] in a["reply"]
        return {
            "engine": "batched" if batching else "pool",
            "context_shift": shift,
            "before_cut": before,
            "after_cut": after,
            "after_cut_first_token_s_mean": round(sum(a["first_token_s"] for a in after) / len(after), 3),
            "after_cut_evaluated_tokens": [a["prompt"] - a["reused"] for a in after],
            "after_cut_right": sum(a["right"] for a in after),
            "shifted_tokens": engine.stats().shifted_tokens,
        }
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = [asyncio.run(run(batching, shift)) for batching in (True, False) for shift in (True, False)]
    result = {
        "machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}",
        "command": "scripts/bench_context_shift.py" + (f" --out {args.out}" if args.out else ""),
        "date": time.strftime("%Y-%m-%d"),
        "conversations": len(NAMES),
        "dropped_turns": DROP,
        "runs": runs,
    }
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
