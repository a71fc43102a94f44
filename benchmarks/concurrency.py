#!/usr/bin/env python3
"""Concurrency benchmark: N conversations on one real server at real-time pace.

The server is a real ``voiceagent serve`` process (the clients run in this process, so that
their work does not share the server's interpreter; they do share the machine's cores).

For N in 1, 2, 4, 8 (``--sessions``) and two arrangements:

* ``simultaneous``: every session's turn k ends at the same instant (the worst case: all the
  critical-path work of N turns lands on the cores at once);
* ``staggered``: each session's turn k starts at a random offset (seeded) within the turn slot.

(:func:`benchmarks.common.sessions.session_files` also makes ``spread``, benchmarks/soak.py's default:
each session at its own phase of the slot.)

Each session speaks ``--turns`` different questions (espeak-ng voices), one per slot of
``--slot`` seconds, so that every answer has been played before the next question.  Per N it
reports answered turns, errors, p50/p95/max end of speech → first audio (client clock, as
``voiceagent replay``), the LLM queue wait (server's per-turn metrics), the server's CPU (cores
busy; ``client_cpu_cores``: the callers' own, in this process, taken from the same cores) and
its peak RSS and PSS (RSS counts the memory-mapped model once per LLM context; PSS counts shared
pages once; with ``--llama-server`` that process is added).  The capacity the
server measured at start-up is printed beside them.

With ``--engines batched,pool`` (the default) two servers run side by side, one on the batched
engine (``llm.batching = true``, the default) and one on the older per-context pool, and every
(arrangement, N) is measured on each in turn, so the ratio of their latencies compares like with
like.  Before the servers start, the LLM engines alone are timed: decode tokens per second with
1, 2, 4 and 8 generations at once.

Writes ``concurrency.json``, ``concurrency.md`` and ``concurrency.png`` to ``--out``.

    .venv/bin/python -m benchmarks.concurrency                  # the in-process engines (route a)
    .venv/bin/python -m benchmarks.concurrency --llama-server build/bin/llama-server   # route b
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.machine import cpu_times, machine, steal_pct  # noqa: E402
from benchmarks.common.sampler import Periodic, Sampler  # noqa: E402
from benchmarks.common.serve import ServeProcess  # noqa: E402
from benchmarks.common.sessions import arrivals, run_n, session_files  # noqa: E402
from benchmarks.common.stats import percentiles  # noqa: E402
from voiceagent.backends.llama_cpp import gguf_path  # noqa: E402
from voiceagent.capacity import TurnCost, capacity  # noqa: E402
from voiceagent.config import Config, load_config  # noqa: E402
from voiceagent.replay import TurnResult  # noqa: E402


class LoadPoller(Periodic):
    """Reads the server's ``voiceagent_load`` gauges from ``/metrics`` every ``period`` seconds in
    a thread: (monotonic time, cpu, latency) samples, to see which measure predicts the turns'
    latency."""

    def __init__(self, ws_url: str, period: float = 0.5) -> None:
        host = ws_url.split("://", 1)[1].split("/", 1)[0]
        super().__init__(period)
        # The one family it reads: the whole exposition, twice a second, cost the server's event
        # loop about a sixth of its busy time (py-spy, 12 sessions), weight the bench put on it.
        self.url = f"http://{host}/metrics?name[]=voiceagent_load"
        self.samples: list[tuple[float, float, float]] = []

    def sample(self) -> None:
        """The gauges now, when the server answers and shows both."""
        try:
            with urllib.request.urlopen(self.url, timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return
        values = {}
        for line in text.splitlines():
            if line.startswith("voiceagent_load{"):
                measure = line.split('measure="', 1)[1].split('"', 1)[0]
                values[measure] = float(line.rsplit(" ", 1)[1])
        if {"cpu", "latency"} <= values.keys():
            self.samples.append((time.monotonic(), values["cpu"], values["latency"]))

    def at(self, t: float) -> tuple[float, float] | None:
        """The (cpu, latency) load last sampled at or before ``t``."""
        before = [s for s in self.samples if s[0] <= t]
        return (before[-1][1], before[-1][2]) if before else None


def load_vs_latency(turns: list[TurnResult], poller: LoadPoller, t0: float) -> dict[str, Any]:
    """Per answered turn, the load each measure showed at its end of speech (``t0`` + the turn's
    time in its file: the files play in real time from ``t0``), and each measure's correlation
    with the turn's latency: which one predicts it."""
    pairs = []
    for t in turns:
        if t.latency_ms is None:
            continue
        seen = poller.at(t0 + t.speech_end_s)
        if seen is not None:
            pairs.append((seen[0], seen[1], t.latency_ms))
    out: dict[str, Any] = {"turns": len(pairs)}
    if pairs:
        arr = np.array(pairs)
        out["cpu_mean"], out["latency_load_mean"] = round(float(arr[:, 0].mean()), 3), round(float(arr[:, 1].mean()), 3)
        out["cpu_max"], out["latency_load_max"] = round(float(arr[:, 0].max()), 3), round(float(arr[:, 1].max()), 3)
    if len(pairs) >= 3:
        for i, name in ((0, "cpu"), (1, "latency")):
            x = arr[:, i]
            ok = float(np.std(x)) > 0 and float(np.std(arr[:, 2])) > 0
            out[f"corr_{name}"] = round(float(np.corrcoef(x, arr[:, 2])[0, 1]), 3) if ok else None
    return out


def summarize(
    turns: list[TurnResult], errors: list[str], expected: int, cpu_s: float, wall_s: float, sampler: Sampler, refused: int = 0
) -> dict[str, Any]:
    lat = [t.latency_ms for t in turns if t.latency_ms is not None]
    queue = [t.spans_ms["llm_admitted"] - t.spans_ms["llm_request"] for t in turns if {"llm_admitted", "llm_request"} <= t.spans_ms.keys()]
    p = percentiles(lat)
    return {
        "turns": expected,
        "answered": len(lat),
        "refused_sessions": refused,
        "errors": len(errors) + sum(1 for t in turns if t.latency_ms is None),
        "error_messages": errors[:5],
        "latency_ms": p | {"max": round(max(lat), 1) if lat else None},
        "llm_queue_ms": percentiles(queue) | {"max": round(max(queue), 1) if queue else None},
        "cpu_cores": round(cpu_s / wall_s, 2) if wall_s else None,
        "peak_rss_mb": round(sampler.peak_rss / 2**20),
        "peak_pss_mb": round(sampler.peak_pss / 2**20),
        "cutoffs": sum(t.cutoffs for t in turns),
        # Silence inside the answers (their audio was not ready in time): total, and the turns with any.
        "playback_gap_ms": round(sum(t.playback_gap_ms for t in turns), 1),
        "turns_with_gaps": sum(1 for t in turns if t.playback_gap_ms > 0),
    }


def start_llama_server(binary: str, config: Config, slots: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = gguf_path(config.llm.model, config.cache_path, config.llm.quant)
    cmd = [binary, "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", str(config.llm.threads)]
    cmd += ["--parallel", str(slots), "-c", str(config.llm.context * slots), "--cont-batching", "-b", "256", "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            if resp.status == 200:
                return proc, f"{url}/v1"
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("llama-server did not become ready")


def engine_alone(config: Config, engines: list[str], batches: tuple[int, ...] = (1, 2, 4, 8), tokens: int = 48) -> dict[str, Any]:
    """Decode tokens per second of each LLM engine alone, ``b`` generations at once (each with a
    prompt of its own), counted from the moment all ``b`` have their first token."""
    from dataclasses import replace

    from voiceagent.backends import llama_cpp
    from voiceagent.backends.protocols import LlmRequest, is_piece
    from voiceagent.tools.spec import Message

    async def run(llm: Any, b: int) -> float:
        stamps: list[list[float]] = [[] for _ in range(b)]

        async def one(i: int) -> None:
            msgs = [Message("system", "You are a counting machine."), Message("user", f"Count from {i + 1} to {i + 200}, in digits.")]
            async for item in llm.generate(LlmRequest(f"alone-{b}-{i}", msgs, tokens, 0.0)):
                if is_piece(item):
                    stamps[i].append(time.perf_counter())

        await asyncio.gather(*(one(i) for i in range(b)))
        start = max(t[0] for t in stamps)
        end = min(t[-1] for t in stamps)
        n = sum(sum(1 for x in t if start < x <= end) for t in stamps)
        return n / (end - start) if end > start else 0.0

    out: dict[str, Any] = {}
    for name in engines:
        llm = llama_cpp.load(replace(config.llm, batching=name == "batched"), config.cache_path)
        try:
            asyncio.run(run(llm, 1))  # warm
            out[name] = {str(b): round(asyncio.run(run(llm, b)), 1) for b in batches}
        finally:
            llm.close()
        print(f"engine alone, {name}: tokens/s by generations at once {out[name]}", flush=True)
    return out


def predicted_capacity(turn_cost: dict[str, float] | None, config: Config) -> int | None:
    """The capacity a server with ``server.max_sessions = 0`` derives from this turn cost."""
    if not turn_cost:
        return None
    cost = TurnCost(**{k: v for k, v in turn_cost.items() if k != "work_s"})  # type: ignore[arg-type]
    return capacity(cost, config.server.latency_budget_ms, config.vad.stop_ms)


WATERFALL = ("vad_stop", "transcript_final", "llm_admitted", "llm_first_token", "turn_confirmed", "first_clause", "tts_first_audio")
"""The server's per-turn marks, ms after the end of speech, in the order a turn passes them."""


def waterfall(turns: list[TurnResult]) -> dict[str, dict[str, float]]:
    """Median and max of each mark of :data:`WATERFALL` over ``turns`` (the server's spans)."""
    out: dict[str, dict[str, float]] = {}
    for mark in WATERFALL:
        values = [t.spans_ms[mark] for t in turns if mark in t.spans_ms]
        if values:
            out[mark] = {"p50": round(float(np.median(values)), 1), "max": round(max(values), 1)}
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [f"Machine: {report['machine']}.  Command: `{report['command']}`  (CPU steal {report['cpu_steal_pct']} %)", ""]
    for engine, info in report["engines"].items():
        lines.append(
            f"- **{engine}** ({info['engine']}): capacity measured at start-up **{info['capacity']}** sessions "
            f"({info['turn_cost'].get('work_s', 0) * 1000:.0f} ms of critical-path work per turn, "
            f"8-generation step {info['turn_cost'].get('llm_step8_s', 0) * 1000:.0f} ms, budget {report['budget_ms']} ms)."
        )
    if report.get("engine_alone"):
        lines += ["", "LLM engine alone, decode tokens/s with 1, 2, 4, 8 generations at once:", ""]
        for engine, row in report["engine_alone"].items():
            lines.append(f"- {engine}: " + ", ".join(f"{b}: {v}" for b, v in row.items()))
    lines += [
        "",
        "| engine | arrangement | N | answered | errors | p50 ms | p95 ms | max ms | LLM queue p50/max ms | CPU cores "
        "| peak RSS / PSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for engine, arrangements in report["results"].items():
        for arrangement, rows in arrangements.items():
            for n, r in rows.items():
                lat, q = r["latency_ms"], r["llm_queue_ms"]
                lines.append(
                    f"| {engine} | {arrangement} | {n} | {r['answered']}/{r['turns']} | {r['errors']} | {lat['p50']} | {lat['p95']} "
                    f"| {lat['max']} | {q['p50']} / {q['max']} | {r['cpu_cores']} | {r['peak_rss_mb']} / {r['peak_pss_mb']} |"
                )
    lines += ["", "Waterfall: each mark's median (max) in ms after the end of speech; CPU seconds per turn by thread:", ""]
    for engine, arrangements in report["results"].items():
        for arrangement, rows in arrangements.items():
            for n, r in rows.items():
                marks = ", ".join(f"{k} {v['p50']:.0f} ({v['max']:.0f})" for k, v in r.get("waterfall_ms", {}).items())
                cpu = ", ".join(f"{k} {v}" for k, v in list(r.get("cpu_s_per_turn_by_thread", {}).items())[:6])
                lines.append(f"- {engine} {arrangement} N={n}: {marks}; CPU s/turn: {cpu}")
    if report.get("ratios"):
        lines += ["", "Ratio pool ÷ batched (above 1: the batched engine is faster), p50 / p95:", ""]
        for arrangement, rows in report["ratios"].items():
            lines.append(f"- {arrangement}: " + ", ".join(f"N={n}: {r['p50']} / {r['p95']}" for n, r in rows.items()))
    return "\n".join(lines) + "\n"


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """pool ÷ batched latency per arrangement and N (both engines measured)."""
    if not {"pool", "batched"} <= results.keys():
        return {}
    out: dict[str, Any] = {}
    for arrangement, rows in results["batched"].items():
        out[arrangement] = {}
        for n, r in rows.items():
            old = results["pool"].get(arrangement, {}).get(n)
            if old is None:
                continue
            out[arrangement][n] = {
                k: round(old["latency_ms"][k] / r["latency_ms"][k], 3) if r["latency_ms"][k] and old["latency_ms"][k] else None
                for k in ("p50", "p95")
            }
    return out


def plot(report: dict[str, Any], out: Path, stem: str = "concurrency") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for engine, arrangements in report["results"].items():
        for arrangement, rows in arrangements.items():
            ns = [int(n) for n in rows]
            for key, style in (("p50", "-o"), ("p95", "--s")):
                ax.plot(ns, [rows[str(n)]["latency_ms"][key] for n in ns], style, label=f"{engine} {arrangement} {key}")
    ax.axhline(1500, color="grey", lw=0.8, ls=":")
    ax.axhline(2500, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("concurrent sessions (N)")
    ax.set_ylabel("end of speech → first audio (ms)")
    ax.set_xscale("log", base=2)
    all_ns = sorted({int(n) for arrangements in report["results"].values() for rows in arrangements.values() for n in rows})
    ax.set_xticks(all_ns, [str(n) for n in all_ns])
    ax.set_title("voiceagent concurrency: " + ", ".join(report["results"]))
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / f"{stem}.png", dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench"))
    ap.add_argument("--sessions", default="1,2,4,8,12")
    ap.add_argument("--arrangements", default="simultaneous,staggered")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--slot", type=float, default=16.0, help="seconds per turn: question, answer and its playback")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--llama-server", metavar="BIN", help="route (b): serve the LLM from this llama-server binary (openai backend)")
    ap.add_argument("--engines", default="batched,pool", help="in-process LLM engines to compare, each on its own server")
    ap.add_argument(
        "--baseline",
        metavar="TREE",
        help="also run the batched engine from this checkout (e.g. a git worktree of the previous commit): before/after in one run",
    )
    ap.add_argument("--baseline-first", action="store_true", help="measure the --baseline server first at each N (order effects)")
    ap.add_argument("--no-alone", action="store_true", help="skip timing the LLM engines alone")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:SECTION.KEY=VALUE[,…]",
        help="one more server on the batched engine with these settings, measured in turn with the others (an A/B)",
    )
    ap.add_argument("--replot", metavar="JSON", help="only redraw the plot of an earlier run into --out")
    ap.add_argument(
        "--arrive",
        action="store_true",
        help="spread: each caller connects at its own phase (as callers arrive) instead of all at the start",
    )
    ap.add_argument(
        "--admission",
        action="store_true",
        help="leave server.max_sessions at 0: the servers admit by their own rule, and refusals (503) are counted",
    )
    args = ap.parse_args()
    if args.replot:
        report = json.loads(Path(args.replot).read_text())
        plot(report, Path(args.out), Path(args.replot).stem)
        return 0
    ns = [int(x) for x in args.sessions.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cap = "0" if args.admission else str(max(ns))
    overrides = {"server.port": "0", "server.max_sessions": cap, **dict(s.split("=", 1) for s in args.set)}
    config = load_config(env={}, overrides=overrides)
    proc: subprocess.Popen[bytes] | None = None
    engines = args.engines.split(",")
    variants: dict[str, tuple[dict[str, str], str]] = {}
    if args.llama_server:
        proc, base_url = start_llama_server(args.llama_server, config, max(ns))
        variants["llama_server"] = (
            overrides | {"llm.backend": "openai", "llm.base_url": base_url, "llm.model": "qwen"},
            f"llama-server --parallel {max(ns)} (openai backend)",
        )
    else:
        for name in engines:
            batched = name == "batched"
            how = f"{config.llm.sequences} sequences of one context" if batched else f"{config.llm.contexts} contexts"
            variants[name] = (overrides | {"llm.batching": str(batched).lower()}, f"llama_cpp in process, {how}")
        for spec in args.variant:
            name, _, sets = spec.partition(":")
            extra = dict(kv.split("=", 1) for kv in sets.split(",") if kv)
            variants[name] = (overrides | {"llm.batching": "true"} | extra, f"llama_cpp in process, batched, {sets}")
    if args.baseline:
        variants["baseline"] = (overrides | {"llm.batching": "true"}, f"llama_cpp in process, batched, from {args.baseline}")
        if args.baseline_first:
            variants = {"baseline": variants.pop("baseline"), **variants}
    alone = engine_alone(config, engines) if not args.llama_server and not args.no_alone else {}
    # The capacity is what the server would admit by itself (server.max_sessions = 0); the bench
    # raises the limit so that it can also measure past it.
    trees = {"baseline": Path(args.baseline)} if args.baseline else {}
    servers = {name: ServeProcess(ov, log_lines=None, tree=trees.get(name, ROOT)) for name, (ov, _) in variants.items()}
    auto = load_config(env={}, overrides={**overrides, "server.max_sessions": "0"})
    report: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.concurrency", *sys.argv[1:]]),
        "budget_ms": auto.server.latency_budget_ms,
        "engine_alone": alone,
        "engines": {},
        "results": {name: {} for name in variants},
    }
    for name, server in servers.items():
        ready = server.ready
        report["engines"][name] = {
            "engine": variants[name][1],
            "turn_cost": ready.get("turn_cost") or {},
            "capacity": predicted_capacity(ready.get("turn_cost"), auto),
            "capacity_reported": ready.get("capacity"),
            "startup_s": ready.get("startup_s"),
        }
        print(f"{name}: {report['engines'][name]}", flush=True)
    rng = random.Random(args.seed)
    times0 = cpu_times()
    t_start = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for arrangement in args.arrangements.split(","):
                for n in ns:
                    files = session_files(n, args.turns, args.slot, arrangement, rng, Path(tmp), arrive=args.arrive)
                    delays = arrivals(n, args.slot, arrangement, args.arrive)
                    for name, server in servers.items():  # the same files on each engine, in turn
                        pids = [server.proc.pid, *([proc.pid] if proc is not None else [])]
                        with Sampler(pids) as sampler, LoadPoller(server.url) as poller:
                            cpu0, t0, th0 = sampler.total_cpu_s(), time.monotonic(), sampler.threads_cpu_s()
                            n_log = len(server.lines())
                            client0 = time.process_time()
                            turns, errors, refused = asyncio.run(run_n(server.url, files, delays=delays))
                            client_s = time.process_time() - client0
                            cpu1, t1, th1 = sampler.total_cpu_s(), time.monotonic(), sampler.threads_cpu_s()
                        row = summarize(turns, errors, n * args.turns, cpu1 - cpu0, t1 - t0, sampler, refused)
                        # The callers run in this process, on the server's cores: what they took from it.
                        row["client_cpu_cores"] = round(client_s / (t1 - t0), 3) if t1 > t0 else None
                        row["load_vs_latency"] = load_vs_latency(turns, poller, t0)
                        # CPU seconds per answered turn, by thread name: where the machine's time went.
                        per_turn = {k: (v - th0.get(k, 0.0)) / max(1, row["answered"]) for k, v in th1.items()}
                        ranked = sorted(per_turn.items(), key=lambda kv: -kv[1])
                        row["cpu_s_per_turn_by_thread"] = {k: round(v, 3) for k, v in ranked if v >= 0.001}
                        row["waterfall_ms"] = waterfall(turns)
                        # Why each refused caller was refused, in the server's words (its load, the
                        # sessions not heard yet, the CPU per turn): what to calibrate against.
                        marker = "refused a new session: "
                        row["refusal_reasons"] = [ln.split(marker, 1)[1].strip() for ln in server.lines()[n_log:] if marker in ln]
                        row["turn_results"] = [asdict(t) for t in turns]
                        report["results"][name].setdefault(arrangement, {})[str(n)] = row
                        print(
                            f"{name:8s} {arrangement:12s} N={n}: answered {row['answered']}/{row['turns']} "
                            f"refused {row['refused_sessions']} errors {row['errors']} load {row['load_vs_latency']} "
                            f"latency {row['latency_ms']} queue {row['llm_queue_ms']} cpu {row['cpu_cores']} "
                            f"client cpu {row['client_cpu_cores']} "
                            f"gaps {row['playback_gap_ms']} ms in {row['turns_with_gaps']} turns "
                            f"rss/pss {row['peak_rss_mb']}/{row['peak_pss_mb']} MB",
                            flush=True,
                        )
    finally:
        for server in servers.values():
            server.stop(30)
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    report["ratios"] = ratios(report["results"])
    report["cpu_steal_pct"] = steal_pct(times0, cpu_times())
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    stem = "concurrency" if not args.llama_server else "concurrency_llama_server"
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1))
    (out / f"{stem}.md").write_text(markdown(report))
    plot(report, out, stem)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
