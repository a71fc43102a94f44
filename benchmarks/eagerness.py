#!/usr/bin/env python3
"""``semantic_vad`` eagerness levels measured on the spoken eval's paused questions.

Each fixture of ``scripts/make_fixtures.py`` with a mid-sentence pause (``pauses > 0``: "Can you
tell me ... how far away the sun is?") is streamed at real-time pace through the real server
(in this process, real loopback WebSocket) once per level, the session set to
``turn_detection: {"type": "semantic_vad", "eagerness": LEVEL}``.  Per level: the false cut-offs
(a paused question answered before its second half; :mod:`voiceagent.replay` counts them) and
the p50/p95 from the end of speech (from the audio) to the first reply audio.  The endpointing
of each level is :data:`voiceagent.stages.turn.EAGERNESS`.

JSON on stdout and in ``--out`` (stable keys: ``levels.LEVEL.{false_cutoffs, turns,
latency_ms.{p50, p95}, files}``).

Usage: .venv/bin/python -m benchmarks.eagerness [--levels high,medium,low,auto] [--count N]
                                                   [--repeat R] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from scripts import make_fixtures  # noqa: E402
from voiceagent.backends.registry import load_engines, warm_up  # noqa: E402
from voiceagent.config import load_config  # noqa: E402
from voiceagent.replay import replay_file  # noqa: E402
from voiceagent.settings import EAGERNESS_LEVELS  # noqa: E402
from voiceagent.stages.turn import EAGERNESS  # noqa: E402
from voiceagent.transports.server import VoiceAgentServer  # noqa: E402


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    return {"p50": round(float(np.percentile(values, 50)), 1), "p95": round(float(np.percentile(values, 95)), 1)}


def paused_fixtures(count: int | None) -> list[Path]:
    """The paused questions (espeak and Piper voices), at most ``count`` of them."""
    names = [name for name, spec in make_fixtures.FIXTURES.items() if spec.pauses > 0]
    engines = tuple(sorted({make_fixtures.FIXTURES[n].engine for n in names}))
    made = make_fixtures.make_all(ROOT / ".cache" / "fixtures", engines=engines)
    return [made[n] for n in names if n in made][:count]


async def measure(levels: list[str], files: list[Path], repeat: int, overrides: dict[str, str]) -> dict[str, Any]:
    config = load_config(overrides={"server.port": "0", **overrides})
    engines = await asyncio.to_thread(load_engines, config)
    await asyncio.to_thread(warm_up, engines, config)
    report: dict[str, Any] = {"files": [f.stem for f in files], "repeat": repeat, "set": overrides, "levels": {}}
    try:
        async with VoiceAgentServer(config, engines) as server:
            for level in levels:
                session = {
                    "audio": {
                        "input": {
                            "format": {"type": "audio/pcm", "rate": 24000},
                            "turn_detection": {"type": "semantic_vad", "eagerness": level},
                        }
                    }
                }
                latencies: list[float] = []
                cutoffs = turns = 0
                per_file: dict[str, dict[str, Any]] = {}
                for _ in range(repeat):
                    for f in files:
                        results = await replay_file(server.url, f, session=session)
                        await server.wait_idle()
                        got = per_file.setdefault(f.stem, {"cutoffs": 0, "latency_ms": []})
                        for r in results:
                            turns += 1
                            cutoffs += r.cutoffs
                            got["cutoffs"] += r.cutoffs
                            if r.latency_ms is not None:
                                latencies.append(r.latency_ms)
                                got["latency_ms"].append(round(r.latency_ms, 1))
                        print(f"{level}: {f.stem} cutoffs={got['cutoffs']} latency_ms={got['latency_ms']}", file=sys.stderr)
                ends = EAGERNESS[level]
                report["levels"][level] = {
                    "endpointing": {k: getattr(ends, k) for k in ("silence_ms", "complete_ms", "threshold", "incomplete_ms", "doubt_ms")},
                    "turns": turns,
                    "false_cutoffs": cutoffs,
                    "latency_ms": percentiles(latencies),
                    "files": per_file,
                }
    finally:
        engines.close()
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="high,medium,low", help="comma-separated eagerness levels")
    ap.add_argument("--count", type=int, default=None, help="at most this many paused fixtures (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="times each fixture is streamed per level")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench" / "eagerness.json"))
    args = ap.parse_args()
    levels = [x.strip() for x in args.levels.split(",") if x.strip()]
    bad = [x for x in levels if x not in EAGERNESS_LEVELS]
    if bad:
        ap.error(f"unknown level(s) {', '.join(bad)}: the levels are {', '.join(EAGERNESS_LEVELS)}")
    overrides = dict(s.split("=", 1) for s in args.set)
    report = asyncio.run(measure(levels, paused_fixtures(args.count), args.repeat, overrides))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
