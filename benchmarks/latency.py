#!/usr/bin/env python3
"""Latency benchmark: voiceagent's streaming pipeline against a naive chain, same models, same run.

Every fixture of the benchmark set (``scripts/make_fixtures.py``, ≥ 20 user turns: several
espeak-ng voices and Piper-read texts, short and long, single- and multi-turn, mid-sentence
pauses) is streamed at real-time pace through

* **ours**: the real server (in this process, real loopback WebSocket, OpenAI Realtime protocol),
  measured by :func:`voiceagent.replay.replay_file` from the client;
* **naive**: the same models chained without streaming or speculation — endpoint after
  ``turn.silence_ms`` of VAD silence, whole-utterance STT with Whisper's classic 30 s window,
  the LLM's whole first sentence, then TTS of that sentence; first audio = when TTS returns.

Ground truth for the end of speech comes from the audio (see :mod:`voiceagent.replay`).  Outputs
(in ``--out``, default ``artifacts/bench``): ``latency.json`` (stable keys), ``latency.md`` (a
Markdown table) and ``waterfall.png`` / ``cdf.png``.  ``--ablations`` re-runs ours with one
optimisation switched off at a time, so each one's worth is known.

``--variant`` runs ours a second time with other settings, file by file beside the default, so
the two are compared under the same machine conditions (a paired A/B).

Usage: .venv/bin/python -m benchmarks.latency [--quick] [--ablations] [--set section.key=value ...]
                                                 [--variant section.key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.inprocess import QUICK, reset_engines  # noqa: E402
from benchmarks.common.machine import cpu_times, machine, steal_pct  # noqa: E402
from benchmarks.common.stats import percentiles  # noqa: E402
from scripts import make_fixtures  # noqa: E402
from voiceagent.audio import PIPELINE_RATE, int16_to_float, read_wav, resample  # noqa: E402
from voiceagent.backends.llm_pool import LlmPool  # noqa: E402
from voiceagent.backends.protocols import Message  # noqa: E402
from voiceagent.backends.registry import Engines, load_engines, warm_up  # noqa: E402
from voiceagent.backends.whisper import WhisperStt  # noqa: E402
from voiceagent.config import Config, load_config  # noqa: E402
from voiceagent.replay import TurnResult, replay_file, speech_turns  # noqa: E402
from voiceagent.stages.vad import VadTracker  # noqa: E402
from voiceagent.transports.server import VoiceAgentServer  # noqa: E402

SPANS = ("vad_stop", "transcript_final", "turn_confirmed", "llm_first_token", "first_clause", "tts_first_audio", "first_audio_sent")
ABLATIONS = {
    "no_speculation": {"turn.speculative": "false"},
    "stt_window_30s": {"stt.window_s": "30"},
    "no_early_decode": {"stt.early_decode": "false"},
    "no_turn_model": {"turn.model": "none"},
    "no_core_ordering": {"llm.yield_to_tts": "false"},
    "first_clause_at_punctuation_only": {"llm.first_clause_words": "0"},
    "turn_complete_240ms": {"turn.complete_ms": "240"},
}


# ----------------------------------------------------------------------------- naive chain


@dataclass
class NaiveTurn:
    file: str
    turn: int
    transcript: str
    reply: str
    latency_ms: float | None
    spans_ms: dict[str, float]


class NaiveChain:
    """Sequential, non-streaming: endpoint → whole STT (30 s window) → first sentence → TTS."""

    def __init__(self, engines: Engines, config: Config) -> None:
        self.e = engines
        self.config = config
        self.stt = WhisperStt(config.stt.model, config.cache_path, config.stt.threads, config.stt.beam_size, window_s=30)

    def run_file(self, path: Path) -> list[NaiveTurn]:
        pcm, rate = read_wav(path)
        pcm16 = resample(pcm, rate, PIPELINE_RATE)
        truth = speech_turns(pcm, rate)
        tail = np.zeros(int(2.5 * PIPELINE_RATE), dtype=np.int16)
        audio = np.concatenate([pcm16, tail])
        vad = self.e.vad.stream()
        tracker = VadTracker()
        cfg = self.config
        step = PIPELINE_RATE // 50
        history: list[Message] = []
        seg_start: float | None = None
        speech_end_ms = 0.0
        endpoints: list[tuple[float, float, float]] = []  # (wall of endpoint, speech start ms, end ms)
        answers: list[tuple[float, str, str, dict[str, float]]] = []  # (wall first audio, transcript, reply, spans)
        t0 = time.monotonic()
        i = 0
        while i < len(audio):
            wait = t0 + i / PIPELINE_RATE - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the microphone's pace
            windows_before = i // 512
            probs = vad.process(int16_to_float(audio[i : i + step]))
            i += step
            for k, p in enumerate(probs):
                end_ms = (windows_before + k + 1) * 32.0
                for ev in tracker.feed(p, end_ms, cfg.vad.threshold, cfg.vad.min_speech_ms, cfg.vad.stop_ms):
                    if ev.kind == "start" and seg_start is None:
                        seg_start = ev.audio_ms
                    elif ev.kind == "stop":
                        speech_end_ms = ev.audio_ms
                    elif ev.kind == "silence" and seg_start is not None and ev.silence_ms >= cfg.turn.silence_ms:
                        # Endpoint: now the whole chain runs, one step after the other.
                        t_end = time.monotonic()
                        a = max(0, int((seg_start - cfg.vad.prefix_padding_ms) * PIPELINE_RATE / 1000))
                        b = int((speech_end_ms + 100) * PIPELINE_RATE / 1000)
                        text = self.stt.transcribe(int16_to_float(audio[a:b]), cfg.stt.language)
                        t_stt = time.monotonic()
                        msgs = [Message("system", cfg.llm.instructions), *history, Message("user", text)]
                        reply = ""
                        t_tok = None
                        for piece in blocking_stream(self.e, msgs, cfg.llm.max_tokens, cfg.llm.temperature):
                            t_tok = t_tok or time.monotonic()
                            reply += piece
                            if re.search(r"[.!?](\s|$)", reply):
                                break
                        sentence = re.split(r"(?<=[.!?])\s", reply.strip(), maxsplit=1)[0]
                        t_llm = time.monotonic()
                        for _chunk in self.e.tts.synthesize(sentence, 1.0):
                            break
                        t_audio = time.monotonic()
                        history += [Message("user", text), Message("assistant", sentence)]
                        spans = {
                            "endpoint": (t_end - t0) * 1000 - speech_end_ms,
                            "stt_done": (t_stt - t0) * 1000 - speech_end_ms,
                            "llm_first_token": ((t_tok or t_llm) - t0) * 1000 - speech_end_ms,
                            "first_sentence": (t_llm - t0) * 1000 - speech_end_ms,
                            "tts_first_audio": (t_audio - t0) * 1000 - speech_end_ms,
                        }
                        endpoints.append((t_end, seg_start, speech_end_ms))
                        answers.append((t_audio, text, sentence, {k: round(v, 1) for k, v in spans.items()}))
                        seg_start = None
        out: list[NaiveTurn] = []
        for k, (_start, end) in enumerate(truth):
            nxt = truth[k + 1][0] if k + 1 < len(truth) else float("inf")
            match = [a for a in answers if end < (a[0] - t0) < nxt + 0.5]
            if match:
                wall, text, reply, spans = match[0]
                out.append(NaiveTurn(str(path), k, text, reply, round((wall - (t0 + end)) * 1000.0, 1), spans))
            else:
                out.append(NaiveTurn(str(path), k, "", "", None, {}))
        return out


# ----------------------------------------------------------------------------- ours


async def run_ours(
    runs: list[tuple[Config, Engines]], files: list[Path], naive: NaiveChain | None = None
) -> tuple[list[list[TurnResult]], list[NaiveTurn]]:
    """Each file through each configuration's server, then (when given) the naive chain, file by file.

    Pairing them per file keeps every side of a per-turn ratio under the same machine conditions:
    this machine's speed drifts by up to 2x within minutes (CPU steal), and a run of all of ours
    followed by all of the naive chain turned that drift into a bias of the ratio.
    """
    results: list[list[TurnResult]] = [[] for _ in runs]
    baseline: list[NaiveTurn] = []
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(VoiceAgentServer(cfg, eng)) for cfg, eng in runs]
        every = list({id(e): e for _, e in runs}.values())
        for f in files:
            for server, res in zip(servers, results, strict=True):
                await reset_engines(server.engines, server.config, every)
                res.extend(await replay_file(server.url, f))
                # The next run may use the same model objects, the naive chain from its own thread:
                # first let the session end (the next reset_engines drains the executors).
                await server.wait_idle()
            if naive is not None:
                await reset_engines(naive.e, naive.config, every)
                baseline.extend(await asyncio.to_thread(naive.run_file, f))
    return results, baseline


def blocking_stream(engines: Engines, messages: list[Message], max_tokens: int, temperature: float) -> Iterator[str]:
    """The naive chain's LLM call: plain blocking iteration of one context, in the engine's own
    thread (the naive chain runs alone: every session has ended and the pool is drained)."""
    pool = engines.llm
    if not isinstance(pool, LlmPool):
        raise SystemExit("the naive chain needs the in-process llama_cpp engine")
    context = pool.contexts[0]
    it = pool.executor.submit(context.stream, messages, max_tokens, temperature).result()
    while (piece := pool.executor.submit(next, it, None).result()) is not None:
        yield piece


def _engine_key(cfg: Config) -> tuple[Any, ...]:
    """The settings :func:`load_engines` reads: configurations equal here can share models.  The
    LLM's whole section counts (its loader reads all of it); of the others, what the registry
    reads (a variant of ``stt.partial_model`` once reused the default's models: its arm measured
    nothing)."""
    s, t = cfg.stt, cfg.tts
    return (
        cfg.vad.model,
        cfg.vad.device,
        s.model,
        s.partial_model,
        s.threads,
        s.beam_size,
        s.window_s,
        s.batch,
        s.device,
        s.compute_type,
        s.language,
        cfg.turn.model,
        cfg.turn.device,
        json.dumps(asdict(cfg.llm), sort_keys=True, default=str),
        t.model,
        t.threads,
        t.device,
        json.dumps(t.voice_table, sort_keys=True, default=str),
        cfg.cache.semantic,
        cfg.cache.embed_model,
    )


def cold_start(overrides: dict[str, str]) -> dict[str, float]:
    """Seconds from `voiceagent serve` process start until it accepts connections."""
    args = [sys.executable, "-m", "voiceagent.cli", "serve", "--port", "0"]
    for k, v in overrides.items():
        args += ["--set", f"{k}={v}"]
    t0 = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    ready = None
    detail: dict[str, Any] = {}
    try:
        assert proc.stderr is not None and proc.stdout is not None

        def drain() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                if '"event": "ready"' in line:
                    detail.update(json.loads(line[line.index("{") :]))

        th = threading.Thread(target=drain, daemon=True)
        th.start()
        for line in proc.stdout:
            if line.startswith("voiceagent ready"):
                ready = time.monotonic() - t0
                break
    finally:
        proc.terminate()
        proc.wait(30)
    return {"process_to_ready_s": round(ready or -1.0, 2), "in_process_startup_s": detail.get("startup_s", -1.0)}


# ----------------------------------------------------------------------------- report


def summarize(ours: list[TurnResult], naive: list[NaiveTurn], specs: dict[str, Any]) -> dict[str, Any]:
    lat = [t.latency_ms for t in ours if t.latency_ms is not None]
    first = [t.latency_ms for t in ours[:1] if t.latency_ms is not None]
    warm = [t.latency_ms for t in ours[1:] if t.latency_ms is not None]
    nlat = [t.latency_ms for t in naive if t.latency_ms is not None]
    ratios = [n.latency_ms / o.latency_ms for o, n in zip(ours, naive, strict=True) if o.latency_ms and n.latency_ms]
    spans = {s: percentiles([t.spans_ms[s] for t in ours if s in t.spans_ms]) for s in SPANS}
    pause_turns = [t for t in ours if specs[Path(t.file).stem].pauses]
    keyword_hits = sum(all(w in t.transcript.lower() for w in specs[Path(t.file).stem].keywords[t.turn]) for t in ours)
    return {
        "turns": len(ours),
        "answered": len(lat),
        "ours_ms": percentiles(lat),
        "ours_first_turn_ms": first[0] if first else None,
        "ours_warm_ms": percentiles(warm),
        "naive_ms": percentiles(nlat),
        "ratio_naive_over_ours": {
            "median": round(float(np.median(ratios)), 3) if ratios else None,
            "min": round(min(ratios), 2) if ratios else None,
        },
        "spans_ms": spans,
        "false_cutoffs": {
            "turns_with_pauses": len(pause_turns),
            "cutoffs": sum(t.cutoffs for t in pause_turns),
            "all_turns": sum(t.cutoffs for t in ours),
        },
        "transcripts_with_keywords": f"{keyword_hits}/{len(ours)}",
    }


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    naive_ran = any(n["latency_ms"] is not None for n in report["naive"])
    order = (", the variant" if report.get("variant") else "") + (" and the naive chain" if naive_ran else "")
    lines = [
        f"Machine: {report['machine']}.  Command: `{report['command']}`",
        "",
        *(
            [f"Ours{order} ran file by file in turn; CPU steal during the run: {report['cpu_steal_pct']} %.", ""]
            if "cpu_steal_pct" in report
            else []
        ),
        "| | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|",
        f"| **voiceagent** (end of speech → first audio byte) | {s['ours_ms']['p50']} | {s['ours_ms']['p95']} | {s['ours_ms']['p99']} |",
        f"| naive chain, same models | {s['naive_ms']['p50']} | {s['naive_ms']['p95']} | {s['naive_ms']['p99']} |",
        "",
        f"Median per-turn ratio naive/ours: **{s['ratio_naive_over_ours']['median']}** (min {s['ratio_naive_over_ours']['min']}); "
        f"{s['answered']}/{s['turns']} turns answered; first turn after start {s['ours_first_turn_ms']} ms; "
        f"false cut-offs {s['false_cutoffs']['cutoffs']} on {s['false_cutoffs']['turns_with_pauses']} turns with a mid-sentence pause; "
        f"transcripts containing the key words {s['transcripts_with_keywords']}; "
        f"cold start {report['cold_start'].get('process_to_ready_s')} s.",
        "",
        "Spans of ours, ms after the end of speech (p50 / p95):",
        "",
        "| " + " | ".join(SPANS) + " |",
        "|" + "---|" * len(SPANS),
        "| " + " | ".join(f"{s['spans_ms'][k]['p50']} / {s['spans_ms'][k]['p95']}" for k in SPANS) + " |",
    ]
    if report.get("variant"):
        v = report["variant"]
        vs = v["summary"]
        lines += [
            "",
            f"Variant `{' '.join('--variant ' + x for x in v['set'])}`, run file by file beside the default: "
            f"p50 {vs['ours_ms']['p50']} ms, p95 {vs['ours_ms']['p95']} ms; median per-turn ratio default/variant "
            f"{v['ratio_default_over_variant']['median']}, naive/variant {vs['ratio_naive_over_ours']['median']}; "
            f"false cut-offs {vs['false_cutoffs']['cutoffs']}; transcripts containing the key words {vs['transcripts_with_keywords']}.",
            "",
            "| " + " | ".join(SPANS) + " |",
            "|" + "---|" * len(SPANS),
            "| " + " | ".join(f"{vs['spans_ms'][k]['p50']} / {vs['spans_ms'][k]['p95']}" for k in SPANS) + " |",
        ]
    if report.get("ablations"):
        lines += ["", "| variant | p50 ms | p95 ms | false cut-offs |", "|---|---|---|---|"]
        lines.append(f"| default | {s['ours_ms']['p50']} | {s['ours_ms']['p95']} | {s['false_cutoffs']['cutoffs']} |")
        for name, a in report["ablations"].items():
            lines.append(f"| {name} | {a['ours_ms']['p50']} | {a['ours_ms']['p95']} | {a['false_cutoffs']['cutoffs']} |")
    lines += ["", "| file | turn | ours ms | naive ms | transcript | reply |", "|---|---|---|---|---|---|"]
    for o, n in zip(report["ours"], report["naive"], strict=True):
        lines.append(
            f"| {Path(o['file']).stem} | {o['turn']} | {o['latency_ms']} | {n['latency_ms']} | {o['transcript']} | {o['reply'][:60]} |"
        )
    return "\n".join(lines) + "\n"


def plots(report: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = report["ours"]
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(ours) + 1.5))
    colors = plt.get_cmap("viridis")(np.linspace(0, 1, len(SPANS)))
    drawn: set[str] = set()
    for row, t in enumerate(ours):
        prev = 0.0
        # In time order: with speculation the LLM's first token often comes before the turn is confirmed.
        marks = sorted((t["spans_ms"][span], k, span) for k, span in enumerate(SPANS) if span in t["spans_ms"])
        for v, k, span in marks:
            ax.barh(row, max(0.0, v - prev), left=prev, color=colors[k], label=span if span not in drawn else None)
            drawn.add(span)
            prev = max(prev, v)
        if t["latency_ms"] is not None:
            ax.plot(t["latency_ms"], row, "k|", markersize=12)
    ax.set_yticks(range(len(ours)), [f"{Path(t['file']).stem}:{t['turn']}" for t in ours], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms after end of user speech (| = first audio byte at the client)")
    ax.set_title("voiceagent per-turn waterfall")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "waterfall.png", dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rows in (("voiceagent", ours), ("naive chain", report["naive"])):
        vals = np.sort([t["latency_ms"] for t in rows if t["latency_ms"] is not None])
        if len(vals):
            ax.step(vals, np.arange(1, len(vals) + 1) / len(vals), where="post", label=name)
    ax.set_xlabel("end of speech → first audio byte (ms)")
    ax.set_ylabel("fraction of turns")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Latency CDF, same models, same run")
    fig.tight_layout()
    fig.savefig(out / "cdf.png", dpi=90)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench"))
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--ablations", action="store_true", help="also run ours with each optimisation off")
    ap.add_argument("--no-naive", action="store_true")
    ap.add_argument("--no-cold-start", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="also run ours with these settings, file by file beside the default (a paired A/B)",
    )
    ap.add_argument("--replot", metavar="LATENCY_JSON", help="only redraw the plots of an earlier run into --out")
    args = ap.parse_args()
    if args.replot:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        plots(json.loads(Path(args.replot).read_text()), Path(args.out))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = dict(s.split("=", 1) for s in args.set)
    t_start = time.monotonic()
    specs = {n: f for n, f in make_fixtures.FIXTURES.items() if f.bench and (not args.quick or n in QUICK)}
    paths = make_fixtures.make_all(ROOT / ".cache" / "fixtures", engines=("espeak", "piper"))
    files = [paths[n] for n in specs]
    report: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.latency", *sys.argv[1:]]),
        "overrides": overrides,
    }
    report["cold_start"] = {} if args.no_cold_start else cold_start(overrides)
    print(f"cold start: {report['cold_start']}", flush=True)

    config = load_config(env={}, overrides={"server.port": "0", **overrides})
    engines = load_engines(config)
    warm_up(engines, config)
    chain: NaiveChain | None = None
    if not args.no_naive:
        chain = NaiveChain(engines, config)
        chain.stt.transcribe(np.zeros(PIPELINE_RATE, dtype=np.float32), "en")  # warm, like ours
    runs = [(config, engines)]
    variant_cfg: Config | None = None
    if args.variant:
        variant_overrides = {**overrides, **dict(v.split("=", 1) for v in args.variant)}
        variant_cfg = load_config(env={}, overrides={"server.port": "0", **variant_overrides})
        if _engine_key(variant_cfg) == _engine_key(config):
            runs.append((variant_cfg, engines))
        else:
            variant_engines = load_engines(variant_cfg)
            warm_up(variant_engines, variant_cfg)
            runs.append((variant_cfg, variant_engines))
    times0 = cpu_times()
    all_ours, naive = asyncio.run(run_ours(runs, files, chain))
    ours = all_ours[0]
    # Time the hypervisor gave to others while we wanted the CPU: the main cause of drift here.
    report["cpu_steal_pct"] = steal_pct(times0, cpu_times())
    for t in ours:
        print(f"ours  {Path(t.file).stem}:{t.turn} {t.latency_ms} ms  {t.transcript!r} -> {t.reply[:50]!r}", flush=True)
    for n in naive:
        print(f"naive {Path(n.file).stem}:{n.turn} {n.latency_ms} ms  {n.transcript!r}", flush=True)
    if chain is None:
        naive = [NaiveTurn(t.file, t.turn, "", "", None, {}) for t in ours]
    all_specs = make_fixtures.FIXTURES
    report["summary"] = summarize(ours, naive, all_specs)
    report["ours"] = [asdict(t) for t in ours]
    report["naive"] = [asdict(n) for n in naive]
    if variant_cfg is not None:
        var = all_ours[1]
        vs = summarize(var, naive, all_specs)
        ratios = [o.latency_ms / v.latency_ms for o, v in zip(ours, var, strict=True) if o.latency_ms and v.latency_ms]
        report["variant"] = {
            "set": args.variant,
            "summary": {k: vs[k] for k in ("ours_ms", "ratio_naive_over_ours", "false_cutoffs", "spans_ms", "transcripts_with_keywords")},
            "ratio_default_over_variant": {"median": round(float(np.median(ratios)), 3) if ratios else None},
            "turns": [asdict(t) for t in var],
        }
        print(f"variant {args.variant}: {vs['ours_ms']}", flush=True)
    for _cfg, eng in runs[1:]:
        if eng is not engines:
            eng.close()
    engines.close()
    if args.ablations:
        report["ablations"] = {}
        for name, extra in ABLATIONS.items():
            cfg = load_config(env={}, overrides={"server.port": "0", **overrides, **extra})
            eng = load_engines(cfg)
            warm_up(eng, cfg)
            (res,), _ = asyncio.run(run_ours([(cfg, eng)], files))
            eng.close()
            report["ablations"][name] = {
                k: v
                for k, v in summarize(res, naive, all_specs).items()
                if k in ("ours_ms", "false_cutoffs", "spans_ms", "transcripts_with_keywords")
            }
            print(f"ablation {name}: {report['ablations'][name]['ours_ms']}", flush=True)
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    (out / "latency.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "latency.md").write_text(markdown(report))
    plots(report, out)
    print(markdown(report))
    print(f"wrote {out}/latency.json, latency.md, waterfall.png, cdf.png in {report['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
