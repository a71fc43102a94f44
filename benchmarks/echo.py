#!/usr/bin/env python3
"""``voiceagent talk`` on speakers: does the agent hear itself, with and without echo cancellation?

A five-question conversation (the spoken fixtures: capital, moon, sky, count, good morning) is
held in process through ``talk_local``, the talk's own driver, with a room between the speaker
and the microphone (``tests/integration/echo_path.py``: what the speaker plays comes back delayed,
through a synthetic room response, at ``--gain-db`` against what was played).  The user waits for
each answer to end, so every interruption or extra user turn is the agent hearing itself.  Each
``--modes`` entry runs the same conversation: ``on`` with the talk's echo cancellation
(:mod:`voiceagent.talk.echo`), ``off`` without, ``headphones`` with no room at all.

Per mode: self-interruptions, the user turns and replies, the replies' first-audio latency, and the
levels at the microphone: the user's speech, the echo (the microphone while only the agent spoke,
before cancellation) and what the cancellation left of it.  JSON on stdout and in ``--out``.

    .venv/bin/python -m benchmarks.echo --out docs/bench/echo/echo.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.machine import machine
from benchmarks.common.report import emit_json
from tests.integration.echo_path import Room, RoomTalk, talk_in_room
from tests.profile import profile_config
from voiceagent.audio import speech_level_db

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ("capital", "weather", "colour", "count", "short")


def _level(frames: list[np.ndarray[Any, Any]]) -> float | None:
    """The level of the speech in ``frames`` as the server measures a voice (``speech_level_db``:
    the 90th percentile of 20 ms frames' RMS), so the echo compares with the user's voice."""
    if not frames:
        return None
    level = speech_level_db(np.concatenate(frames).astype(np.float32) / 32768.0)
    return None if level is None else round(level, 1)


def summarize(mode: str, talk: RoomTalk, room: Room | None) -> dict[str, Any]:
    firsts = [t.spans_ms["first_audio_sent"] for t in talk.result.turns if t.role == "assistant" and "first_audio_sent" in t.spans_ms]
    turns = [{"role": t.role, "text": t.text, "status": t.status} for t in talk.result.turns]
    return {
        "mode": mode,
        "self_interruptions": talk.self_interruptions,
        "questions": talk.mic.asked,
        "user_turns": sum(1 for t in talk.result.turns if t.role == "user"),
        "replies_completed": sum(1 for t in talk.result.turns if t.role == "assistant" and t.status == "completed"),
        "truncations": len(talk.result.truncations),
        "first_audio_ms_p50": round(statistics.median(firsts), 1) if firsts else None,
        "echo_gain_db": None if room is None else round(20 * np.log10(room.gain), 1),
        "first_audio_ms": [round(f, 1) for f in firsts],
        "user_speech_dbfs": talk.mic.user_level_db and round(talk.mic.user_level_db, 1),
        "echo_at_mic_dbfs": _level(talk.mic.agent_only) if room is not None else None,
        "echo_after_cancelling_dbfs": _level(talk.left),
        "seconds": round(talk.seconds, 1),
        "turns": turns,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from voiceagent.backends.registry import load_engines, warm_up

    fixtures = ROOT / ".cache" / "fixtures"
    importlib.import_module("scripts.make_fixtures").make_all(fixtures)
    questions = [fixtures / f"{name}.wav" for name in QUESTIONS]
    config = profile_config({"llm.max_tokens": str(args.max_tokens)})
    loop = asyncio.get_running_loop()
    engines = await loop.run_in_executor(None, load_engines, config)
    await loop.run_in_executor(None, warm_up, engines, config)
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for mode in args.modes.split(","):
                room = None if mode == "headphones" else Room(gain_db=args.gain_db, delay_s=args.delay_ms / 1000)
                out = Path(tmp) / f"{mode}.wav"
                talk = await talk_in_room(engines, config, questions, room=room, cancel=mode == "on", out=out, limit_s=args.limit_s)
                runs.append(summarize(mode, talk, room))
                print(f"{mode}: {runs[-1]['self_interruptions']} self-interruptions", file=sys.stderr)
    finally:
        engines.close()
    return {
        "benchmark": "echo",
        "machine": machine(),
        "room": {"gain_db": args.gain_db, "delay_ms": args.delay_ms, "rt60_s": 0.3, "response": "synthetic (direct path + decaying noise)"},
        "llm_max_tokens": args.max_tokens,
        "limit_s": args.limit_s,
        "runs": runs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--modes", default="on,off", help="comma-separated: on, off, headphones (default on,off)")
    ap.add_argument("--gain-db", type=float, default=-6.0, help="the echo's level against what was played (default -6)")
    ap.add_argument("--delay-ms", type=float, default=60.0, help="speaker-to-microphone delay (default 60)")
    ap.add_argument("--max-tokens", type=int, default=40, help="llm.max_tokens: a reply's length (default 40)")
    ap.add_argument(
        "--limit-s", type=float, default=120.0, help="end a talk after this long (one that answers its own echo never ends; default 120)"
    )
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    result = asyncio.run(measure(args))
    emit_json(result, args.out.parent if args.out else None, args.out.name if args.out else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
