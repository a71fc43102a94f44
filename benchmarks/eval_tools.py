"""How well the packaged LLMs call tools: the right tool, with the right arguments, or none.

Each case is one user utterance (as STT would hand it over) with a fixed set of tools offered,
and what a correct reply does: call one tool with the expected arguments, or answer without a
call.  The model runs in process through the engine the product uses (llama.cpp, the same
prompt rendering, the same ``<tool_call>`` parsing, argument repair and one retry with the tool
named), greedy, one case at a time.  Output: JSON with per-case results and the accuracy per model.

    .venv/bin/python -m benchmarks.eval_tools --models qwen2.5-0.5b --out docs/bench
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common.prompts import TOOLS  # noqa: E402
from voiceagent.backends.protocols import LlmRequest  # noqa: E402
from voiceagent.config import Config, LlmConfig  # noqa: E402
from voiceagent.config.profiles import PROFILES  # noqa: E402
from voiceagent.tools.args import check_arguments  # noqa: E402
from voiceagent.tools.retry import nameless, retried_call, retry_choice  # noqa: E402
from voiceagent.tools.spec import Message, ToolCall, with_tools  # noqa: E402


@dataclass(frozen=True)
class Case:
    utterance: str
    tool: str | None
    """The tool a correct reply calls (None: it answers without a call)."""
    args: dict[str, Any] = field(default_factory=dict)
    """Expected arguments: each listed key must match (strings case-insensitively)."""


CASES = [
    Case("What's the weather in Paris?", "get_weather", {"city": "paris"}),
    Case("Is it raining in London right now?", "get_weather", {"city": "london"}),
    Case("How hot is it in Tokyo today?", "get_weather", {"city": "tokyo"}),
    Case("What time is it?", "get_time"),
    Case("What's the date today?", "get_time"),
    Case("Set a timer for five minutes.", "set_timer", {"seconds": 300}),
    Case("Remind me in ten seconds to check the oven.", "set_timer", {"seconds": 10}),
    Case("Send an email to bob@example.com saying the meeting moved to Friday.", "send_email", {"to": "bob@example.com"}),
    Case("Tell me a fun fact about the moon.", None),
    Case("Thanks, that's all.", None),
    Case("What is two plus two?", None),
    Case("Can you tell me a short joke?", None),
]


def _matches(expected: dict[str, Any], got: dict[str, Any]) -> bool:
    for key, want in expected.items():
        value = got.get(key)
        if isinstance(want, str):
            if not isinstance(value, str) or value.strip().lower() != want:
                return False
        elif value != want:
            return False
    return True


async def run_case(engine: Any, instructions: str, case: Case) -> dict[str, Any]:
    # As the session prompts when tools are offered (voiceagent/conversation/prompting.py).
    messages = [Message("system", with_tools(instructions, TOOLS)), Message("user", case.utterance)]
    request = LlmRequest(key="eval", messages=messages, max_tokens=96, temperature=0.0, tools=TOOLS, tool_choice="auto")
    text, calls = "", []
    t0 = time.perf_counter()
    async with contextlib.aclosing(engine.generate(request)) as pieces:
        async for piece in pieces:
            if isinstance(piece, ToolCall):
                calls.append(piece)
            elif isinstance(piece, str):
                text += piece
    elapsed = time.perf_counter() - t0
    call = calls[0] if calls else None
    tool = next((t for t in TOOLS if call is not None and t.name == call.name), None)
    checked = check_arguments(tool, call.arguments) if call is not None else None
    retried = False
    if call is not None and checked is not None and checked.problem is not None and (tool is not None or nameless(call)):
        # As the LLM stage does (voiceagent/stages/llm.py): ask once more, with the tool named
        # (arguments held to its schema), or for a call opened with no name with "required".
        retried = True
        again = LlmRequest(
            key="eval", messages=messages, max_tokens=96, temperature=0.0, tools=TOOLS, tool_choice=retry_choice(call, TOOLS)
        )
        second: ToolCall | None = None
        async with contextlib.aclosing(engine.generate(again)) as pieces:
            async for piece in pieces:
                if isinstance(piece, ToolCall) and second is None:
                    second = piece
        answer = retried_call(call, second, TOOLS)
        if answer is not None:
            call = answer
            tool = next(t for t in TOOLS if t.name == answer.name)
            checked = check_arguments(tool, answer.arguments)
        elapsed = time.perf_counter() - t0
    args = json.loads(checked.arguments) if checked is not None and checked.arguments is not None else {}
    right_tool = (call.name if call else None) == case.tool
    right_args = right_tool and (case.tool is None or (checked is not None and checked.problem is None and _matches(case.args, args)))
    return {
        "utterance": case.utterance,
        "expected": {"tool": case.tool, "args": case.args},
        "called": None if call is None else {"name": call.name, "arguments": call.arguments},
        "repaired": bool(checked and checked.repaired),
        "retried_with_the_tool_named": retried,
        "problem": checked.problem if checked else None,
        "text": text.strip()[:200],
        "right_tool": right_tool,
        "right": right_args,
        "seconds": round(elapsed, 2),
    }


def profile_quant(model: str) -> str:
    """The weights a profile runs ``model`` as (the 1.5B as shipped, the 0.5B as IQ4_NL)."""
    for tree in PROFILES.values():
        if tree.get("llm.model") == model and "llm.quant" in tree:
            return str(tree["llm.quant"])
    return LlmConfig().quant


async def evaluate(model: str, call_bias: float) -> dict[str, Any]:
    from voiceagent.backends import llama_cpp

    config = Config()
    quant = profile_quant(model)
    engine = llama_cpp.load(LlmConfig(model=model, contexts=1, threads=2, quant=quant, call_bias=call_bias), config.cache_path)
    try:
        results = [await run_case(engine, config.llm.instructions, case) for case in CASES]
    finally:
        await engine.aclose()
        engine.close()
    calls = [r for r in results if r["expected"]["tool"] is not None]
    chats = [r for r in results if r["expected"]["tool"] is None]
    return {
        "model": model,
        "quant": quant,
        "call_bias": call_bias,
        "cases": len(results),
        "right": sum(r["right"] for r in results),
        "tool_cases_right": f"{sum(r['right'] for r in calls)}/{len(calls)}",
        "right_tool": f"{sum(r['right_tool'] for r in calls)}/{len(calls)}",
        "no_call_cases_right": f"{sum(r['right'] for r in chats)}/{len(chats)}",
        "mean_seconds": round(sum(r["seconds"] for r in results) / len(results), 2),
        "results": results,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen2.5-0.5b", help="comma-separated catalog names of llama.cpp models")
    ap.add_argument("--out", type=Path, default=Path("artifacts/eval"))
    ap.add_argument("--call-bias", type=float, default=LlmConfig().call_bias, help="llm.call_bias (default: the config's)")
    args = ap.parse_args()
    report = {
        "command": "python -m benchmarks.eval_tools " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
        "models": [asyncio.run(evaluate(m, args.call_bias)) for m in args.models.split(",") if m],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tools_eval.json").write_text(json.dumps(report, indent=1) + "\n")
    for m in report["models"]:
        print(
            f"{m['model']} ({m['quant']}, call_bias {m['call_bias']}): {m['right']}/{m['cases']} right "
            f"(tool cases {m['tool_cases_right']}, "
            f"right tool {m['right_tool']}, no-call cases {m['no_call_cases_right']}), {m['mean_seconds']} s per case"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
