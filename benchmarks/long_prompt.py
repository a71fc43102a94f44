#!/usr/bin/env python3
"""Long instructions on the real server: first-token times at turn 1 and turn 10, for the first
caller and for a second caller with the same instructions (issue #31, "long prompts stay fast").

A real ``voiceagent serve`` process (``llm.context`` raised, two LLM contexts) and two Realtime
clients.  Each caller sends ``session.update`` with a conference assistant's instructions
(``--chars`` characters of schedule and speaker notes, ~45,000 by default: ~11,000 tokens) and
then, without waiting, ten text questions one after another (``response.create`` with text
output).  The first token is the first ``response.output_text.delta`` on the client's clock,
from the moment ``response.create`` was sent; turn 1 therefore includes the wait for the
instructions' evaluation.  Caller B starts once caller A's tenth answer is done.

Writes ``long_prompt.json`` and ``long_prompt.md`` to ``--out``.

    .venv/bin/python -m benchmarks.long_prompt --out docs/bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.machine import machine  # noqa: E402
from benchmarks.common.prompts import instructions  # noqa: E402
from benchmarks.common.serve import ServeProcess  # noqa: E402
from voiceagent.client import MalformedEvent, OtherEvent, RealtimeClient, messages  # noqa: E402
from voiceagent.events import ErrorEvent, Event, OutputTranscriptDelta, ResponseDone  # noqa: E402

QUESTIONS = [
    "Where is the keynote held?",
    "When is lunch served?",
    "Which room is the first talk on Monday in?",
    "Who gives the talk on soil carbon?",
    "Is there a talk about speech codecs?",
    "Where can I get coffee?",
    "What time does the conference start on Tuesday?",
    "Who should I ask about lost badges?",
    "Is the Wi-Fi free?",
    "Where is the keynote held again?",
]


async def caller(url: str, text: str, questions: list[str]) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    client = RealtimeClient()
    async with connect(url, max_size=None) as ws:
        queue: asyncio.Queue[Event] = asyncio.Queue()

        async def pump() -> None:
            async for raw in ws:
                for ev in client.feed(raw, time.perf_counter()):
                    await queue.put(ev)

        reader = asyncio.create_task(pump())
        try:
            await ws.send(json.dumps(messages.session_update(input_format=None, output_format=None, instructions=text)))
            deleted = 0
            for q in questions:
                await ws.send(json.dumps(messages.create_text(q)))
                sent = time.perf_counter()
                await ws.send(json.dumps(messages.create_response(output_modalities=["text"])))
                first: float | None = None
                while True:
                    ev = await asyncio.wait_for(queue.get(), 600)
                    if isinstance(ev, ErrorEvent | MalformedEvent):
                        raise SystemExit(f"server error: {ev}")
                    if isinstance(ev, OtherEvent) and ev.type == "conversation.item.deleted":
                        deleted += 1
                    if isinstance(ev, OutputTranscriptDelta) and first is None:
                        first = ev.t - sent
                    if isinstance(ev, ResponseDone):
                        turns.append(
                            {
                                "question": q,
                                "first_token_ms": round((first or 0.0) * 1000, 1),
                                "status": str(ev.status),
                                "answer": ev.text,
                                "items_deleted_so_far": deleted,
                            }
                        )
                        break
        finally:
            reader.cancel()
    return turns


def metrics(url: str) -> dict[str, float]:
    base = url.replace("ws://", "http://").split("/v1/")[0]
    with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("voiceagent_llm_prompt_tokens_total"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench"))
    ap.add_argument("--chars", type=int, default=45_000)
    ap.add_argument("--context", type=int, default=16384)
    args = ap.parse_args()
    text = instructions(args.chars)
    overrides = {"llm.context": str(args.context), "llm.contexts": "2", "server.max_sessions": "2"}
    server = ServeProcess(overrides)
    try:
        t0 = time.perf_counter()
        a = asyncio.run(caller(server.url, text, QUESTIONS))
        b = asyncio.run(caller(server.url, text, QUESTIONS))
        wall = time.perf_counter() - t0
        tokens = metrics(server.url)
    finally:
        code = server.stop()
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "instructions_chars": len(text),
        "llm_context": args.context,
        "server_overrides": overrides,
        "wall_s": round(wall, 1),
        "prompt_tokens": tokens,
        "server_exit": code,
        "caller_a": a,
        "caller_b": b,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "long_prompt.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = ["| caller | turn 1 first token | turn 10 first token | turns completed |", "|---|---|---|---|"]
    for name, turns in (("A (first)", a), ("B (same instructions)", b)):
        done = sum(t["status"] == "completed" for t in turns)
        rows.append(f"| {name} | {turns[0]['first_token_ms']:.0f} ms | {turns[-1]['first_token_ms']:.0f} ms | {done} of {len(turns)} |")
    md = [
        "# Long instructions: first token at turn 1 and turn 10",
        "",
        f"{result['date']}, {result['machine']}; instructions of {len(text):,} characters, llm.context {args.context}, "
        "two LLM contexts; text questions, first token on the client's clock from response.create.",
        "",
        *rows,
        "",
        f"Prompt tokens (server counters): {json.dumps(tokens)}",
        "",
        "Command: `.venv/bin/python -m benchmarks.long_prompt --out docs/bench`",
    ]
    (out / "long_prompt.md").write_text("\n".join(md) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
