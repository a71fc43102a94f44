#!/usr/bin/env python3
"""The semantic reply cache through the real server: misses, then hits, in one run.

A ``voiceagent serve`` process with ``cache.semantic=true`` (the default profile otherwise).
Round 1: each of ``--questions`` spoken questions (the concurrency benchmark's fixtures) opens a
new conversation and asks it at real-time pace: the cache is empty for it, the LLM and the TTS
answer, and the reply is stored.  Round 2: the same questions again, each from a new
conversation: the cache answers.  For both rounds: end of speech → first audio (the client's
clock), and turn confirmed → first audio sent (the server's spans), p50 / p95; and the server's
``voiceagent_cache_lookups_total`` by result.  JSON on stdout (and ``--out``).

    .venv/bin/python -m benchmarks.cache --out docs/bench/cache
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.machine import machine  # noqa: E402
from benchmarks.common.metrics import scrape  # noqa: E402
from benchmarks.common.report import emit_json  # noqa: E402
from benchmarks.common.serve import ServeProcess  # noqa: E402
from benchmarks.common.sessions import QUESTIONS, session_files  # noqa: E402
from benchmarks.common.stats import percentiles  # noqa: E402
from voiceagent.replay import TurnResult, replay_file  # noqa: E402


async def ask(url: str, wav: Path) -> TurnResult:
    turns = await replay_file(url, wav, timeout_s=60.0, turn_gap_s=3.0)
    assert len(turns) == 1, turns
    return turns[0]


def summary(turns: list[TurnResult]) -> dict[str, Any]:
    after_confirm = [
        t.spans_ms["first_audio_sent"] - t.spans_ms["turn_confirmed"]
        for t in turns
        if {"first_audio_sent", "turn_confirmed"} <= t.spans_ms.keys()
    ]
    return {
        "answered": sum(t.latency_ms is not None for t in turns),
        "end_of_speech_to_first_audio_ms": percentiles([t.latency_ms for t in turns if t.latency_ms is not None]),
        "turn_confirmed_to_first_audio_sent_ms": percentiles(after_confirm)
        | {"max": round(max(after_confirm), 1) if after_confirm else None},
        "turns": [{"heard": t.transcript, "reply": t.reply, "latency_ms": t.latency_ms, "spans_ms": t.spans_ms} for t in turns],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=len(QUESTIONS))
    ap.add_argument("--out")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args()
    names = QUESTIONS[: args.questions]
    server = ServeProcess({"server.port": "0", "cache.semantic": "true", **dict(s.split("=", 1) for s in args.set)})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wavs = []
            for name in names:
                folder = Path(tmp) / name
                folder.mkdir()
                wavs += session_files(1, 1, 12.0, "simultaneous", random.Random(0), folder, (name,))

            async def rounds() -> tuple[list[TurnResult], list[TurnResult]]:
                misses = [await ask(server.url, w) for w in wavs]
                hits = [await ask(server.url, w) for w in wavs]
                return misses, hits

            misses, hits = asyncio.run(rounds())
            metrics = scrape(server.url)
    finally:
        server.stop()
    lookups = {k.split('result="')[1].rstrip('"}'): v for k, v in metrics.items() if k.startswith("voiceagent_cache_lookups_total{")}
    report = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.cache", *sys.argv[1:]]),
        "questions": list(names),
        "misses": summary(misses),
        "hits": summary(hits),
        "cache_lookups": lookups,
    }
    emit_json(report, args.out, "cache_latency.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
