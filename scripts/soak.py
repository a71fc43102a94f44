#!/usr/bin/env python3
"""Soak: N concurrent sessions × T spoken turns on one real ``voiceagent serve`` process.

Each session streams one long WAV at real-time pace (``--turns`` questions, one per ``--slot``
seconds, from the concurrency benchmark's fixtures), as ``voiceagent replay`` does.  The server's
RSS is sampled every second.  Pass criteria (exit status 1 otherwise):

* every turn answered: no lost turn, no error, and the server's own ``voiceagent_turns_total``
  shows no failed response;
* RSS growth from the end of turn ``--warm-turns`` (default 10: caches, arenas and the KV cache
  have filled by then) to the end under ``--max-growth-mb`` (default 50).

Writes ``soak.json`` to ``--out`` and prints it.

    .venv/bin/python scripts/soak.py                       # 4 sessions × 50 turns (about 11 min)
    .venv/bin/python scripts/soak.py --sessions 2 --turns 12 --warm-turns 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import random  # noqa: E402

from bench_concurrency import Sampler, ServeProcess, run_n, session_files  # noqa: E402
from bench_latency import machine, percentiles  # noqa: E402


def rss_anon(pid: int) -> int:
    """The anonymous part of a process's RSS (bytes): heap and arenas, not the mapped model files."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("RssAnon:")), 0)
    except OSError:
        return 0


class RssLog:
    """The server's RSS (bytes) every ``period`` seconds, with the time of each sample."""

    def __init__(self, pid: int, period: float = 1.0) -> None:
        self.pid = pid
        self.period = period
        self.samples: list[tuple[float, int]] = []
        self.anon: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            self.samples.append((now, Sampler._mem(self.pid)[0]))
            self.anon.append((now, rss_anon(self.pid)))
            if self._stop.wait(self.period):
                return

    def at(self, t: float, anon: bool = False) -> int:
        """The first sample at or after ``t`` (the last one if none is)."""
        samples = self.anon if anon else self.samples
        return next((rss for ts, rss in samples if ts >= t), samples[-1][1])

    def series(self, t0: float, step: float, n: int, anon: bool = False) -> list[int]:
        """RSS in whole MB at ``t0``, ``t0 + step``, … (``n`` points), then at the end."""
        samples = self.anon if anon else self.samples
        return [round(self.at(t0 + k * step, anon) / 2**20) for k in range(n)] + [round(samples[-1][1] / 2**20)]

    def __enter__(self) -> RssLog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def server_turns(url: str) -> dict[str, float]:
    """``voiceagent_turns_total`` by status, from the server's ``/metrics``."""
    base = url.split("/v1/")[0].replace("ws://", "http://")
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        s.labels["status"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "voiceagent_turns_total"
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--slot", type=float, default=13.0, help="seconds per turn: question, answer and its playback")
    ap.add_argument("--warm-turns", type=int, default=10)
    ap.add_argument("--max-growth-mb", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "soak"))
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = {"server.port": "0", "server.max_sessions": str(args.sessions), **dict(s.split("=", 1) for s in args.set)}
    server = ServeProcess(overrides)
    expected = args.sessions * args.turns
    try:
        with tempfile.TemporaryDirectory() as tmp:
            files = session_files(args.sessions, args.turns, args.slot, "staggered", random.Random(args.seed), Path(tmp))
            with RssLog(server.proc.pid) as rss:
                t0 = time.monotonic()
                turns, errors = asyncio.run(run_n(server.url, files))
                wall = time.monotonic() - t0
            by_status = server_turns(server.url)
    finally:
        server.stop()
    lat = [t.latency_ms for t in turns if t.latency_ms is not None]
    start_mb = rss.at(t0) / 2**20
    warm_mb = rss.at(t0 + args.warm_turns * args.slot) / 2**20
    end_mb = rss.samples[-1][1] / 2**20
    growth = end_mb - warm_mb
    lost = expected - len(lat)
    failed = int(by_status.get("failed", 0))
    report: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["scripts/soak.py", *sys.argv[1:]]),
        "sessions": args.sessions,
        "turns_per_session": args.turns,
        "turns": expected,
        "answered": len(lat),
        "lost": lost,
        "client_errors": errors[:5],
        "server_responses": by_status,
        "latency_ms": percentiles(lat) | {"max": round(max(lat), 1) if lat else None},
        "cutoffs": sum(t.cutoffs for t in turns),
        "rss_mb": {
            "start": round(start_mb, 1),
            f"after_turn_{args.warm_turns}": round(warm_mb, 1),
            "end": round(end_mb, 1),
            "peak": round(max(r for _, r in rss.samples) / 2**20, 1),
            "growth_from_warm": round(growth, 1),
            # one sample per turn slot (the start of slot k), then the end: linear or saturating
            "per_slot": rss.series(t0, args.slot, args.turns),
            "anon_per_slot": rss.series(t0, args.slot, args.turns, anon=True),
        },
        "wall_s": round(wall, 1),
        "pass": lost == 0 and not errors and failed == 0 and growth < args.max_growth_mb,
    }
    (out / "soak.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
