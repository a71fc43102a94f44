#!/usr/bin/env python3
"""How well ``llm.call_check``'s one token tells a request for a tool from other words.

The check (voiceagent/tools/call_check.py) asks the model for one token on the system message
and the user's last words, as if they opened the conversation, and reads a call when that token
opens one.  Here that exact request (the engine's ``generate``, ``tool_choice`` "auto", one token,
greedy) is made for sentences that ask for one of the long conversation's five tools and for
sentences that need none, under several system messages:

* ``short``: one generic line;
* ``head``: the conference instructions' first line;
* ``conf3k``: 3,000 characters of the conference instructions (benchmarks/common/prompts.py).

Each with the five tools, and with ``get_weather`` alone (the tool of tests/integration/test_protocol.py).
A right check calls on every request and on none of the rest.

Then the same sentences as whole first turns (``conf3k``, five tools, up to 60 tokens): the call
the model makes, and whether ``llm.call_grounding`` lets it through (its arguments share a word
with the sentence, voiceagent/tools/grounding.py).  JSON on stdout::

    .venv/bin/python -m benchmarks.eval_call_check --profiles fast,quality
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from typing import Any

from benchmarks.common.machine import machine
from benchmarks.common.prompts import instructions
from benchmarks.eval_long_conversation import TOOLS, TURNS
from voiceagent.backends.llama_cpp import load
from voiceagent.backends.protocols import LlmEngine, LlmRequest
from voiceagent.config import load_config
from voiceagent.tools.call_check import opens_call
from voiceagent.tools.grounding import grounded
from voiceagent.tools.spec import Message, Tool, ToolCall

REQUESTS = [t.said for t in TURNS if t.tool] + [
    "Can you email Bob that the meeting moved?",
    "Set a reminder for 5 minutes.",
    "What's the forecast for Rome?",
    "Book me a cab to the station.",
]
WEATHER_REQUESTS = [s for s in REQUESTS if any(w in s.lower() for w in ("weather", "rain", "forecast"))]
OTHERS = [t.said for t in TURNS if not t.tool] + [
    "Say hi.",
    "Hello.",
    "Thank you.",
    "Yes.",
    "How are you?",
    "Tell me a joke.",
    "What time is it?",
    "Who is the first speaker on Tuesday?",
    "Okay, thanks, that's all.",
    "Where can I get coffee?",
    "Can you repeat that?",
]
SYSTEMS = {
    "short": "You are a helpful voice assistant.",
    "head": instructions(0).split("\n")[0],
    "conf3k": instructions(3000),
}


async def opens(engine: LlmEngine, system: str, said: str, tools: tuple[Tool, ...]) -> bool:
    request = LlmRequest(
        key="", messages=[Message("system", system), Message("user", said)], max_tokens=1, temperature=0.0, tools=tools, tool_choice="auto"
    )
    pieces: list[str | ToolCall] = []
    async with contextlib.aclosing(engine.generate(request)) as stream:
        async for piece in stream:
            if isinstance(piece, str | ToolCall):
                pieces.append(piece)
    return opens_call(pieces)


async def first_turn(engine: LlmEngine, system: str, said: str, tools: tuple[Tool, ...]) -> dict[str, Any]:
    messages = [Message("system", system), Message("user", said)]
    request = LlmRequest(key="", messages=messages, max_tokens=60, temperature=0.0, tools=tools, tool_choice="auto")
    call: ToolCall | None = None
    text = ""
    async with contextlib.aclosing(engine.generate(request)) as stream:
        async for piece in stream:
            if isinstance(piece, ToolCall) and call is None:
                call = piece
            elif isinstance(piece, str):
                text += piece
    offered = next((t for t in tools if call is not None and t.name == call.name), None)
    return {
        "said": said,
        "call": None if call is None else {"name": call.name, "arguments": call.arguments},
        "offered": offered is not None,
        "grounded": call is not None and grounded(call.arguments, messages, offered),
        "text": text.strip()[:120],
    }


async def run_profile(profile: str) -> list[dict[str, Any]]:
    cfg = load_config(env={}, overrides={"profile": profile})
    engine = load(cfg.llm, cfg.cache_path)
    every = tuple(Tool(t["name"], t["description"], t["parameters"]) for t in TOOLS)
    sets = {"five tools": (every, REQUESTS), "get_weather": (tuple(t for t in every if t.name == "get_weather"), WEATHER_REQUESTS)}
    rows = []
    try:
        for name, system in SYSTEMS.items():
            for set_name, (tools, requests) in sets.items():
                called = {s: await opens(engine, system, s, tools) for s in [*requests, *OTHERS]}
                row = {
                    "profile": profile,
                    "model": cfg.llm.model,
                    "system": name,
                    "tools": set_name,
                    "requests_called": sum(called[s] for s in requests),
                    "requests": len(requests),
                    "false_calls": [s for s in OTHERS if called[s]],
                    "others": len(OTHERS),
                }
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
        turns = [await first_turn(engine, SYSTEMS["conf3k"], said, every) for said in [*REQUESTS, *OTHERS]]
        made = {t["said"]: t["call"] is not None and t["offered"] for t in turns}
        kept = {t["said"]: made[t["said"]] and t["grounded"] for t in turns}
        row = {
            "profile": profile,
            "model": cfg.llm.model,
            "first_turns": "conf3k, five tools",
            "requests_called": sum(made[s] for s in REQUESTS),
            "requests_called_grounded": sum(kept[s] for s in REQUESTS),
            "requests": len(REQUESTS),
            "false_calls": [s for s in OTHERS if made[s]],
            "false_calls_grounded": [s for s in OTHERS if kept[s]],
            "others": len(OTHERS),
            "turns": turns,
        }
        print(json.dumps({k: v for k, v in row.items() if k != "turns"}), file=sys.stderr, flush=True)
        rows.append(row)
    finally:
        engine.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="fast,quality")
    args = ap.parse_args()
    rows = []
    for profile in args.profiles.split(","):
        rows += asyncio.run(run_profile(profile))
    print(json.dumps({"machine": machine(), "command": "python -m benchmarks.eval_call_check " + " ".join(sys.argv[1:]), "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
