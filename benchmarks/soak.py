#!/usr/bin/env python3
"""Soak: N concurrent sessions × T spoken turns on one real ``voiceagent serve`` process.

Each session streams one long WAV at real-time pace (``--turns`` questions, one per ``--slot``
seconds, from the concurrency benchmark's fixtures), as ``voiceagent replay`` does.  By default
the sessions are not in step (``--arrangement spread``: session i asks at its own phase,
``i * slot / sessions`` into each slot), as independent callers are; ``staggered`` puts every
session's question in the first 6 s of each slot, a burst of N turns every slot, which is the
concurrency benchmark's load rather than a soak's (soaks before 2026-11-26's third session ran so).  The server's
RSS is sampled every second.  Pass criteria (exit status 1 otherwise):

* every turn answered: no lost turn, no error, and the server's own ``voiceagent_turns_total``
  shows no failed response;
* RSS growth from the end of turn ``--warm-turns`` (default 10: caches, arenas and the KV cache
  have filled by then) to the end under ``--max-growth-mb`` (default 50), as a trend: the median
  of the samples over the ``--window-turns`` slots (default 5) after warm-up against the median
  over the last ones (the heap is trimmed now and then: single samples wander ~150 MB).  The
  two single samples are reported too.

Writes ``soak.json`` to ``--out`` and prints it, every turn's waterfall to ``turns.json`` and the server's log to ``server.log``.

    .venv/bin/python -m benchmarks.soak                       # 4 sessions × 50 turns (about 11 min)
    .venv/bin/python -m benchmarks.soak --sessions 2 --turns 12 --warm-turns 4
    .venv/bin/python -m benchmarks.soak --sessions 8 --turns 100 --instructions-chars 8000 --tools   # the long soak

``--instructions-chars N`` gives the server instructions of about N characters (a conference
assistant's schedule, as benchmarks/long_prompt.py writes them) and raises ``llm.context`` to
hold them; ``--tools`` turns the built-in tools on and adds "What time is it?" (a get_time call)
to the questions.  ``--client-instructions`` has each client send them in its ``session.update``
instead (evaluated when it arrives), and ``--lead-s`` gives that evaluation time before the first
question: the long spoken conversation of issue #31 is

    .venv/bin/python -m benchmarks.soak --sessions 1 --turns 30 --instructions-chars 45000 --client-instructions --lead-s 90 --warm-turns 5

Also a pass criterion: once every client is gone, the server counts no open
session (``voiceagent_sessions_active`` back to 0).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.machine import machine  # noqa: E402
from benchmarks.common.metrics import scrape  # noqa: E402
from benchmarks.common.prompts import instructions  # noqa: E402
from benchmarks.common.sampler import Periodic, Sampler  # noqa: E402
from benchmarks.common.serve import ServeProcess  # noqa: E402
from benchmarks.common.sessions import QUESTIONS, run_n, session_files  # noqa: E402
from benchmarks.common.stats import percentiles  # noqa: E402


def rss_anon(pid: int) -> int:
    """The anonymous part of a process's RSS (bytes): heap and arenas, not the mapped model files."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("RssAnon:")), 0)
    except OSError:
        return 0


class RssLog(Periodic):
    """The server's RSS (bytes) every ``period`` seconds from entering, with the time of each sample."""

    def __init__(self, pid: int, period: float = 1.0) -> None:
        super().__init__(period, at_start=True)
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.anon: list[tuple[float, int]] = []

    def sample(self) -> None:
        """The RSS and its anonymous part now."""
        now = time.monotonic()
        self.samples.append((now, Sampler.rss(self.pid)))  # statm: smaps_rollup would walk the page tables each second
        self.anon.append((now, rss_anon(self.pid)))

    def at(self, t: float, anon: bool = False) -> int:
        """The first sample at or after ``t`` (the last one if none is)."""
        samples = self.anon if anon else self.samples
        return next((rss for ts, rss in samples if ts >= t), samples[-1][1])

    def median(self, t0: float, t1: float) -> float:
        """The median RSS (bytes) of the samples from ``t0`` to ``t1`` (all of them if none is)."""
        window = [rss for ts, rss in self.samples if t0 <= ts <= t1] or [rss for _, rss in self.samples]
        return float(statistics.median(window))

    def series(self, t0: float, step: float, n: int, anon: bool = False) -> list[int]:
        """RSS in whole MB at ``t0``, ``t0 + step``, … (``n`` points), then at the end."""
        samples = self.anon if anon else self.samples
        return [round(self.at(t0 + k * step, anon) / 2**20) for k in range(n)] + [round(samples[-1][1] / 2**20)]


def server_turns(metrics: dict[str, float]) -> dict[str, float]:
    """``voiceagent_turns_total`` by status."""
    prefix = 'voiceagent_turns_total{status="'
    return {k[len(prefix) : -2]: v for k, v in metrics.items() if k.startswith(prefix)}


def sessions_left(url: str, timeout: float = 60.0) -> float:
    """``voiceagent_sessions_active`` once it is 0, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = scrape(url).get("voiceagent_sessions_active", 0.0)
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(0.5)  # polling the server's own count, with a deadline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--slot", type=float, default=13.0, help="seconds per turn: question, answer and its playback")
    ap.add_argument("--warm-turns", type=int, default=10)
    ap.add_argument("--max-growth-mb", type=float, default=50.0)
    ap.add_argument("--window-turns", type=int, default=5, help="slots whose median RSS is compared (after warm-up, at the end)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "soak"))
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--instructions-chars", type=int, default=0, help="long server instructions of about this many characters")
    ap.add_argument("--tools", action="store_true", help="built-in tools on, and a question that calls one")
    ap.add_argument(
        "--client-instructions",
        action="store_true",
        help="each client sends the --instructions-chars instructions in its session.update (evaluated then), not the server",
    )
    ap.add_argument("--lead-s", type=float, default=0.0, help="silence before each session's first question")
    ap.add_argument(
        "--arrangement",
        choices=("spread", "staggered", "simultaneous"),
        default="spread",
        help="spread: each session asks once a slot at its own phase (callers not in step); staggered: all within the "
        "slot's first 6 s (a burst every slot); simultaneous: all at once",
    )
    args = ap.parse_args()
    if args.window_turns < 1 or args.turns < args.warm_turns + 2 * args.window_turns:
        ap.error("--turns must hold --warm-turns plus two windows of --window-turns (>= 1): the RSS medians must not overlap")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = {"server.port": "0", "server.max_sessions": str(args.sessions)}
    questions = QUESTIONS
    session: dict[str, Any] | None = None
    if args.instructions_chars:
        text = instructions(args.instructions_chars)
        if args.client_instructions:
            session = {"instructions": text}
        else:
            overrides["llm.instructions"] = text
        # Room for the instructions (~4 characters a token) and a conversation beside them.
        overrides["llm.context"] = str(max(2048, 1024 * -(-(args.instructions_chars // 4 + 1536) // 1024)))
    if args.tools:
        overrides["tools.builtin"] = "true"
        questions = (*QUESTIONS, "what_time")
    overrides |= dict(s.split("=", 1) for s in args.set)
    server = ServeProcess(overrides)
    expected = args.sessions * args.turns
    try:
        with tempfile.TemporaryDirectory() as tmp:
            files = session_files(
                args.sessions,
                args.turns,
                args.slot,
                args.arrangement,
                random.Random(args.seed),
                Path(tmp),
                questions,
                lead_s=args.lead_s,
            )
            with RssLog(server.proc.pid) as rss:
                t0 = time.monotonic()
                turns, errors, refused = asyncio.run(run_n(server.url, files, session))
                wall = time.monotonic() - t0
            left = sessions_left(server.url)
            metrics = scrape(server.url)
            by_status = server_turns(metrics)
    finally:
        server.stop()
        (out / "server.log").write_text("".join(server.lines()))
    lat = [t.latency_ms for t in turns if t.latency_ms is not None]
    start_mb = rss.at(t0) / 2**20
    warm_t = t0 + args.lead_s + args.warm_turns * args.slot
    warm_mb = rss.at(warm_t) / 2**20
    end_mb = rss.samples[-1][1] / 2**20
    # Growth is a trend, not two samples: the heap is trimmed back now and then, so one sample
    # can sit ~150 MB above or below its neighbours.  The median of the RSS over the
    # --window-turns slots after warm-up against the median over the last ones.
    span = args.window_turns * args.slot
    last_t = rss.samples[-1][0]
    warm_median = rss.median(warm_t, warm_t + span) / 2**20
    end_median = rss.median(last_t - span, last_t) / 2**20
    growth = end_median - warm_median
    lost = expected - len(lat)
    failed = int(by_status.get("failed", 0))
    report: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.soak", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "sessions": args.sessions,
        "turns_per_session": args.turns,
        "turns": expected,
        "answered": len(lat),
        "lost": lost,
        "client_errors": errors[:5],
        "refused_sessions": refused,
        # What each unanswered turn was: heard (a transcript) or not, and the server's reply, if any.
        "lost_turns": [
            {"file": Path(t.file).name, "turn": t.turn, "heard": t.transcript, "reply": t.reply} for t in turns if t.latency_ms is None
        ][:20],
        "server_responses": by_status,
        "latency_ms": percentiles(lat) | {"max": round(max(lat), 1) if lat else None},
        "cutoffs": sum(t.cutoffs for t in turns),
        # The waterfall: ms from the end of speech to each mark of the answered turns, p50/p95.
        "spans_ms": {
            name: percentiles([t.spans_ms[name] for t in turns if name in t.spans_ms])
            for name in sorted({n for t in turns for n in t.spans_ms})
        },
        "rss_mb": {
            "start": round(start_mb, 1),
            f"after_turn_{args.warm_turns}": round(warm_mb, 1),
            "end": round(end_mb, 1),
            "peak": round(max(r for _, r in rss.samples) / 2**20, 1),
            "growth_from_warm_samples": round(end_mb - warm_mb, 1),
            f"median_of_{args.window_turns}_slots_after_warm": round(warm_median, 1),
            f"median_of_last_{args.window_turns}_slots": round(end_median, 1),
            "growth_from_warm": round(growth, 1),
            # one sample per turn slot (the start of slot k), then the end: linear or saturating
            "per_slot": rss.series(t0 + args.lead_s, args.slot, args.turns),
            "anon_per_slot": rss.series(t0 + args.lead_s, args.slot, args.turns, anon=True),
        },
        "wall_s": round(wall, 1),
        "instructions_chars": len(text) if args.instructions_chars else 0,
        "instructions_from": "client session.update" if session else "server llm.instructions",
        "lead_s": args.lead_s,
        "arrangement": args.arrangement,
        "llm_context": overrides.get("llm.context"),
        "tools": args.tools,
        "sessions_active_at_end": left,
        "context_cuts": metrics.get("voiceagent_context_cuts_total", 0.0),
        "prompt_tokens": {k: v for k, v in metrics.items() if k.startswith("voiceagent_llm_prompt_tokens_total")},
        "llm_engine": {
            k: v for k, v in metrics.items() if k.startswith("voiceagent_llm_") and "prompt_tokens" not in k and "bucket" not in k
        },
        "pass": lost == 0 and not errors and not refused and failed == 0 and growth < args.max_growth_mb and left == 0,
    }
    (out / "soak.json").write_text(json.dumps(report, indent=1))
    # Every turn's waterfall, for finding where the slow ones waited (not printed: 100s of rows).
    rows = [
        {
            "file": Path(t.file).name,
            "turn": t.turn,
            "speech_end_s": round(t.speech_end_s, 2),
            "latency_ms": t.latency_ms,
            "heard": t.transcript,
            "spans_ms": t.spans_ms,
        }
        for t in turns
    ]
    (out / "turns.json").write_text(json.dumps(rows, indent=0))
    print(json.dumps(report, indent=1))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
