"""The fuzzer's run, step by step: the server started (or found), the good session's baseline, the
hostile phase beside its turns under load, the server checked after; the report with its
invariants; and the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import benchmarks.fuzz
from benchmarks.fuzz import ROOT
from benchmarks.fuzz.good import GoodSession, percentiles, questions
from benchmarks.fuzz.hostile import SCENARIOS, Hostile
from benchmarks.fuzz.server import FuzzedServer, healthz, metric, sessions_left
from benchmarks.fuzz.stats import Stats
from voiceagent.config import Config, load_config


@dataclass
class Target:
    """The server under fuzz."""

    config: Config  # its configuration (the limits the fuzzer aims past)
    base: str  # ws://HOST:PORT
    server: FuzzedServer | None  # the child process, when the fuzzer started it
    started: float  # time.monotonic() before it was started


@dataclass
class ServerEnd:
    """The server after the run."""

    alive: bool | None  # None: not the fuzzer's own
    health_after: bool
    leftover: float | None  # voiceagent_sessions_active after the run
    leftover_wait_s: float
    llm_failed: float | None
    problems: list[str] | None  # log lines that show an unhandled exception (None: not the fuzzer's own)
    exit_code: int | None  # on SIGTERM
    exit_s: float | None


def start_server(args: argparse.Namespace) -> Target:
    """The configuration, and the server: a ``voiceagent serve`` child process unless ``--url``."""
    overrides = dict(s.split("=", 1) for s in args.set)
    # Room for every hostile client and the good session (the measured capacity of a small machine is one).
    overrides.setdefault("server.max_sessions", str(2 * args.clients + 2))  # hostile, stalled, slow and good ones
    config = load_config(args.config, env={}, overrides={**overrides, "server.port": "0"})
    server: FuzzedServer | None = None
    started = time.monotonic()
    if args.url:
        parts = urlsplit(args.url)
        base = f"{parts.scheme}://{parts.netloc}"
    else:
        print("starting voiceagent serve (models load and warm up: about a minute) ...", file=sys.stderr, flush=True)
        server = FuzzedServer(args.config, overrides)
        base = server.base
    return Target(config, base, server, started)


def start_good_session(args: argparse.Namespace, base: str) -> tuple[GoodSession, threading.Thread, float]:
    """The good session in a thread of its own, started: ``--baseline-turns`` alone first (the
    hostile clients wait for them), then turns under load.  Returns it, its thread and its start."""
    qs = questions()
    good = GoodSession(base, qs)
    good_thread = threading.Thread(target=good.run, args=(args.baseline_turns, args.min_turns), daemon=True)
    t0 = time.monotonic()
    good_thread.start()
    return good, good_thread, t0


def hostile_phase(args: argparse.Namespace, target: Target, good: GoodSession, stats: Stats) -> float:
    """The hostile clients and stalled readers, from the end of the good session's baseline until
    ``--messages`` were sent and its turns under load are done; returns how long they ran."""
    config = target.config
    kinds = set(args.scenarios.split(","))
    hostile = Hostile(
        target.base, args.messages, stats, config.server.max_message_bytes, config.server.audio_burst_s, args.seed, kinds, good.go_on
    )
    hostile.reached = good.target_reached

    async def hostile_main() -> float:
        await asyncio.to_thread(good.baseline_done.wait)
        h0 = time.monotonic()
        stalled = [hostile.stalled_reader(route) for route in ("/v1/realtime", "/twilio") if "stalled_reader" in kinds]
        try:
            await asyncio.gather(*(hostile.client(i, args.rate / args.clients) for i in range(args.clients)), *stalled)
        finally:
            good.hostile_done.set()
        return time.monotonic() - h0

    sys.setswitchinterval(0.001)  # the good session's thread waits less for the GIL
    return asyncio.run(hostile_main())


def check_server(target: Target) -> ServerEnd:
    """The server after the run: alive, answering, no session left counted; the fuzzer's own is
    stopped (SIGTERM) and its log scanned."""
    server, base = target.server, target.base
    alive = server.alive() if server is not None else None
    health_after = healthz(base)
    # Every hostile connection has ended: the server must count none of them any more (a client
    # that stopped reading, then vanished, once stayed counted and held its admission slot).
    leftover, leftover_wait_s = sessions_left(base, timeout=60.0)
    llm_failed = metric(base, 'voiceagent_errors_total{code="llm_failed"}')
    exit_code: int | None = None
    problems: list[str] | None = None
    exit_s = None
    if server is not None:
        problems = server.problems()
        stopping = time.monotonic()
        exit_code = server.stop()
        exit_s = round(time.monotonic() - stopping, 1)
    return ServerEnd(alive, health_after, leftover, leftover_wait_s, llm_failed, problems, exit_code, exit_s)


def build_report(
    args: argparse.Namespace, target: Target, stats: Stats, good: GoodSession, end: ServerEnd, t0: float, hostile_s: float
) -> dict[str, Any]:
    """The JSON report, without its invariants."""
    config = target.config
    return {
        "command": " ".join(["python -m benchmarks.fuzz", *sys.argv[1:]]),
        "seed": args.seed,
        "clients": args.clients,
        "rate": args.rate,
        "duration_s": round(time.monotonic() - t0, 1),
        "hostile_s": round(hostile_s, 1),
        "wall_s": round(time.monotonic() - target.started, 1),
        "server": {
            "url": target.base,
            "started_by_fuzzer": target.server is not None,
            "alive_after_run": end.alive,
            "healthz_after_run": end.health_after,
            "exit_code_on_sigterm": end.exit_code,
            "exit_s_after_sigterm": end.exit_s,
            "drain_s": config.server.drain_s,
            "log_problems": end.problems,
            "max_message_bytes": config.server.max_message_bytes,
            "audio_burst_s": config.server.audio_burst_s,
        },
        "messages": {
            "hostile": sum(stats.sent.values()),
            "by_category": dict(sorted(stats.sent.items())),
            "valid_frames_around_them": dict(stats.valid_frames),
            "sent_fragmented": stats.fragmented,
            "scenarios": dict(stats.scenarios),
        },
        "realtime": {
            "bad_messages": stats.rt_bad,
            "answered_with_error": stats.rt_bad_answered,
            "missing_error": stats.rt_missing,
            "missing_samples": stats.rt_missing_samples,
            "unverifiable_client_vanished": stats.rt_unverifiable,
            "error_events": stats.rt_errors,
            "error_codes": dict(stats.rt_error_codes.most_common()),
            "valid_messages_refused": dict(stats.rt_valid_errored),
            "audio_rate_errors": stats.rt_rate_errors,
            "bursts_without_rate_error": stats.burst_without_rate_error,
            "largest_error_bytes": stats.rt_error_max_bytes,
            "errors_over_cap": stats.rt_error_oversized,
        },
        "sessions_active_after_run": end.leftover,
        "sessions_active_wait_s": end.leftover_wait_s,
        "llm_failed_errors": end.llm_failed,
        "twilio": {
            "bad_frames": stats.tw_bad,
            "refused_with_close": stats.tw_refused,
            "not_refused": stats.tw_not_refused,
            "not_refused_samples": stats.tw_not_refused_samples,
        },
        "close_codes": dict(sorted(stats.close_codes.items())),
        "close_1011": len(stats.close_1011),
        "close_1011_samples": stats.close_1011[:20],
        "unexpected_closes": dict(stats.unexpected_closes),
        "unexpected_close_samples": stats.unexpected_close_samples,
        "http_answers_to_raw_tcp": dict(sorted(stats.http_answers.items())),
        "client_exceptions": dict(stats.client_exceptions),
        "client_exception_samples": stats.client_exception_samples,
        "healthz_ms": {
            "baseline": percentiles(good.health["baseline"]),
            "load": percentiles(good.health["load"]),
            "failures": dict(good.health_failures),
        },
        "good_session": {
            "baseline": good.summary("baseline"),
            "load": good.summary("load"),
            "failure": good.failure,
            "close_code": good.close_code,
        },
    }


def invariants(
    args: argparse.Namespace, report: dict[str, Any], config: Config, stats: Stats, good: GoodSession, end: ServerEnd
) -> dict[str, bool]:
    """What must hold (the exit status is 1 when one does not), the bounds asked for last."""
    load = report["good_session"]["load"]
    checks = {
        "messages_sent": report["messages"]["hostile"] >= args.messages,
        "no_1011": not stats.close_1011 and good.close_code != 1011,
        "server_alive": end.alive is not False and end.health_after,
        "server_log_clean": not end.problems,
        "server_exit_0": end.exit_code in (None, 0),
        "server_exit_in_time": end.exit_s is None or end.exit_s <= config.server.drain_s + 5,
        "every_bad_realtime_message_got_an_error": stats.rt_missing == 0 and stats.rt_bad > 0,
        "every_bad_twilio_frame_closed_the_call": stats.tw_not_refused == 0,
        "audio_burst_limited": stats.burst_without_rate_error == 0,
        "close_codes_as_expected": not stats.unexpected_closes,
        "no_scenario_hung_or_cut_short": not stats.client_exceptions,
        "good_turns_completed": good.failure is None and load["turns"] >= args.min_turns and load["ok"] == load["turns"],
        "healthz_answered": not good.health_failures,
        "errors_bounded": not stats.rt_error_oversized,
        "no_session_left_counted": end.leftover == 0,
        "no_llm_failed": not end.llm_failed,
    }
    if args.max_latency_ms:
        p50 = load["latency_ms"]["p50"]
        checks["good_latency_p50_within_bound"] = p50 is not None and p50 <= args.max_latency_ms
    if args.max_healthz_ms:
        slowest = report["healthz_ms"]["load"]["max"]
        checks["healthz_max_within_bound"] = slowest is not None and slowest <= args.max_healthz_ms
    return checks


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One fuzzing run: the report, its invariants and ``ok`` (all of them hold)."""
    target = start_server(args)
    stats = Stats()
    good, good_thread, t0 = start_good_session(args, target.base)
    hostile_s = hostile_phase(args, target, good, stats)
    good_thread.join(300)
    end = check_server(target)
    report = build_report(args, target, stats, good, end, t0, hostile_s)
    report["invariants"] = invariants(args, report, target.config, stats, good, end)
    report["ok"] = all(report["invariants"].values())
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=(benchmarks.fuzz.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000, help="hostile messages to send (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--url", help="fuzz this running server (ws://HOST:PORT) instead of starting one")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "fuzz"), help="folder for fuzz.json")
    ap.add_argument("--config", help="TOML configuration for the server (and the limits the fuzzer aims past)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="server setting (repeatable)")
    ap.add_argument("--clients", type=int, default=4, help="hostile clients at once")
    ap.add_argument("--rate", type=float, default=200.0, help="frames a second the hostile clients send together (0: no limit)")
    ap.add_argument("--baseline-turns", type=int, default=2, help="good turns before the hostile load starts")
    ap.add_argument("--min-turns", type=int, default=2, help="good turns under load, at least")
    ap.add_argument("--max-latency-ms", type=float, help="fail when the good session's p50 under load is slower")
    ap.add_argument("--max-healthz-ms", type=float, help="fail when a /healthz probe under load is slower")
    every = ",".join([*SCENARIOS, "stalled_reader"])
    ap.add_argument("--scenarios", default=every, help=f"hostile scenarios to run (default all: {every})")
    args = ap.parse_args(argv)
    report = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=1, ensure_ascii=False)
    (out / "fuzz.json").write_text(text + "\n")
    print(text)
    failed = [k for k, v in report["invariants"].items() if not v]
    verdict = "ok" if not failed else "FAILED: " + ", ".join(failed)
    print(f"fuzz: {verdict} ({report['messages']['hostile']} hostile messages, {report['duration_s']} s)", file=sys.stderr)
    return 0 if report["ok"] else 1
