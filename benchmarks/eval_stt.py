#!/usr/bin/env python3
"""Transcription-only evaluation: word error rate of STT settings on the spoken eval's questions.

Where ``benchmarks/eval_quality.py`` asks the questions of a whole server (about 15 min per
profile), this decodes each question's audio straight with the STT backend, so that STT settings
can be compared in a few minutes, all on the same clips in one run: Whisper model, beam size, and
an initial prompt (Whisper's ``<|startofprev|>`` text, which the issue suggested taking from the
conversation's context).

Every question of ``benchmarks/eval_questions.toml`` is spoken in every voice (the eval's cached
speech, the same voices and stand-ins), a paused question with its pause, and padded as the STT
stage pads a segment (300 ms before, 96 ms after).  Questions are taken in the eval's
conversations (``benchmarks.common.conversations.plan``, every voice), so the ``history`` prompt is
the previous transcripts of the same conversation, as a session would have them.

A configuration is ``MODEL@BEAM`` with an optional ``+PROMPT``: ``+history``, ``+tools`` (the
product's ``stt.tools_prompt`` for the tools benchmarks/eval_tools.py offers,
``benchmarks.common.prompts.TOOLS``), or a literal text.
``--questions benchmarks/eval_tool_questions.toml`` speaks requests that call those tools instead.

``--cut vad`` cuts each question as the server does instead: the question between 1 s of silence
on either side, the real VAD (silero, :class:`~voiceagent.stages.vad.VadTracker` with the
``[vad]`` settings, 20 ms frames as from the wire) finds its segments, each is padded as the STT
stage pads one, and a question the VAD split is transcribed again as one clip by the turn
stage's own :meth:`~voiceagent.stages.turn.Endpointer.joined` (the rejoin).  The report then adds
the WER of the split questions, rejoined and in halves (each segment decoded alone, what a
session hears when the rejoin is skipped under load or the turn was confirmed after the first half).

    .venv/bin/python -m benchmarks.eval_stt --configs whisper-tiny@1,whisper-base@1,whisper-base@5 --out docs/bench

Writes ``stt_eval.json`` and ``stt_eval.md`` (``stt_eval_vad.*`` with ``--cut vad``; WER overall and per voice, decode time p50/p95 per
clip including the encoder, and the clips whose transcript differs between the first
configuration and the others).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.machine import machine  # noqa: E402
from benchmarks.common.phone_band import BANDS, carry  # noqa: E402
from benchmarks.common.questions import QUESTIONS_FILE, Question, load_questions  # noqa: E402
from benchmarks.common.scoring import edit_distance, normalize  # noqa: E402
from benchmarks.common.speech import DEFAULT_VOICES, RATE, Speaker, resolve_voices  # noqa: E402
from benchmarks.common.stt import SttConfig, VadCutter, clips, load_backend, parse_config, rejoined_text  # noqa: E402

DEFAULT_CONFIGS = "whisper-tiny@1,whisper-tiny@5,whisper-base@1,whisper-base@5,whisper-base@1+history,whisper-base@1+Hello."


def tools_prompt() -> str:
    """The prompt a session offering benchmarks/eval_tools.py's tools (``benchmarks.common.prompts.TOOLS``)
    gets with ``stt.tools_prompt``: what a ``+tools`` configuration decodes with."""
    import dataclasses

    from benchmarks.common.prompts import TOOLS
    from voiceagent.config import Config
    from voiceagent.settings import settings_from_config
    from voiceagent.text.stt_prompt import transcription_prompt

    return transcription_prompt(dataclasses.replace(settings_from_config(Config()), tools=TOOLS), True)


def evaluate(config: SttConfig, items: list[tuple[str, str, Question, np.ndarray]], cutter: VadCutter | None = None) -> dict[str, Any]:
    """WER of ``config`` on ``items`` (padded clips; raw speech cut by ``cutter`` when given)."""
    backend = load_backend(config)
    backend.transcribe(items[0][3], "en")  # warm
    split = [0, 0, 0]  # --cut vad: errors rejoined, errors in halves, words, of the questions the VAD split
    errors = words = 0
    per_voice: dict[str, list[int]] = {}
    times: list[float] = []
    rows: list[dict[str, Any]] = []
    history: dict[str, list[str]] = {}
    fixed_prompt = tools_prompt() if config.prompt == "tools" else config.prompt
    for conv, voice, q, audio in items:
        said = history.setdefault(conv, [])
        prompt = " ".join(said) if config.prompt == "history" else fixed_prompt
        t0 = time.perf_counter()
        segments = 1
        if cutter is None:
            text = backend.transcribe(audio, "en", prompt)
        else:
            cuts = cutter.cuts(audio)
            text, alone = rejoined_text(cuts, lambda a, p=prompt: backend.transcribe(a, "en", p))
            segments = len(cuts)
        times.append(time.perf_counter() - t0)
        said.append(text)
        ref, hyp = normalize(q.spoken), normalize(text)
        e = edit_distance(ref, hyp)
        if segments > 1:
            split[0] += e
            split[1] += edit_distance(ref, normalize(" ".join(t for t in alone if t)))
            split[2] += len(ref)
        errors += e
        words += len(ref)
        v = per_voice.setdefault(voice, [0, 0])
        v[0] += e
        v[1] += len(ref)
        rows.append({"voice": voice, "question": q.id, "said": q.spoken, "heard": text, "errors": e, "segments": segments})
    extra = {}
    if cutter is not None:
        extra = {
            "split_questions": sum(r["segments"] > 1 for r in rows),
            "wer_split": round(split[0] / split[2], 4) if split[2] else None,
            "wer_split_halves": round(split[1] / split[2], 4) if split[2] else None,
        }
    return {
        "config": config.label,
        "wer": round(errors / words, 4),
        "wer_by_voice": {k: round(e / n, 4) for k, (e, n) in per_voice.items()},
        "decode_ms_p50": round(float(np.percentile(times, 50)) * 1000, 1),
        "decode_ms_p95": round(float(np.percentile(times, 95)) * 1000, 1),
        "loops": backend.loops,
        "clips": len(rows),
        **extra,
        "rows": rows,
    }


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def markdown(report: dict[str, Any]) -> str:
    results = report["results"]
    voices = list(results[0]["wer_by_voice"])
    lines = [
        "# STT evaluation (transcription only)",
        "",
        f"Machine: {report['machine']}.  Command: `{report['command']}`",
        "",
        f"{results[0]['clips']} clips: {report['questions']} questions in {len(voices)} voices ({', '.join(voices)}); "
        f"{(report['voice_notes'] and '; '.join(report['voice_notes'])) or 'no stand-ins'}.",
        "",
        "| config | WER % | " + " | ".join(voices) + " | decode p50 ms | decode p95 ms | loops |",
        "|---|---|" + "---|" * len(voices) + "---|---|---|",
    ]
    for r in results:
        cells = " | ".join(f"{100 * r['wer_by_voice'][v]:.1f}" for v in voices)
        lines.append(
            f"| {r['config']} | {100 * r['wer']:.1f} | {cells} | {r['decode_ms_p50']:.0f} | {r['decode_ms_p95']:.0f} | {r['loops']} |"
        )
    lines += ["", "Decode time is per clip, encoder included, one clip at a time, on `stt.threads` threads as the server decodes.", ""]
    if "split_questions" in results[0]:
        lines += [
            "Cut as the server cuts (`--cut vad`): the real VAD finds each question's segments, padded as the STT stage "
            "pads them; a question split in several is transcribed again as one clip (the rejoin); its decode time "
            "above is the VAD and all of the question's decodes.",
            "",
        ]
        lines += ["| config | questions the VAD split | their WER % rejoined | in halves (no rejoin) |", "|---|---|---|---|"]
        lines += [f"| {r['config']} | {r['split_questions']} | {_pct(r['wer_split'])} | {_pct(r['wer_split_halves'])} |" for r in results]
        lines.append("")
    base = results[0]
    for r in results[1:]:
        changed = [(a, b) for a, b in zip(base["rows"], r["rows"], strict=True) if a["heard"] != b["heard"]]
        better = sum(b["errors"] < a["errors"] for a, b in changed)
        worse = sum(b["errors"] > a["errors"] for a, b in changed)
        lines += [f"## {r['config']} against {base['config']}: {len(changed)} transcripts differ, {better} better, {worse} worse", ""]
        lines += ["| voice | said | " + base["config"] + " | " + r["config"] + " |", "|---|---|---|---|"]
        lines += [f"| {a['voice']} | {a['said']} | {a['heard']} | {b['heard']} |" for a, b in changed]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated MODEL@BEAM[+PROMPT]; the first is the reference")
    ap.add_argument("--voices", default=",".join(DEFAULT_VOICES))
    ap.add_argument("--seed", type=int, default=0, help="how questions are packed into conversations (the history prompt)")
    ap.add_argument("--cut", choices=("gt", "vad"), default="gt", help="clips padded from the audio's own bounds, or cut by the real VAD")
    ap.add_argument("--questions", default=str(QUESTIONS_FILE), help="questions file; benchmarks/eval_tool_questions.toml: tool requests")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (a smoke run)")
    ap.add_argument("--band", choices=BANDS, default="wide", help="the clips through a phone codec (benchmarks/common/phone_band.py)")
    ap.add_argument("--cache", default=str(ROOT / ".cache" / "eval_quality"), help="synthesized speech, shared with eval_quality.py")
    ap.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    args = ap.parse_args()

    configs = [parse_config(s) for s in args.configs.split(",") if s.strip()]
    questions = load_questions(Path(args.questions))
    if args.limit:
        questions = questions[: args.limit]
    voices, notes = resolve_voices([v.strip() for v in args.voices.split(",") if v.strip()])
    items = clips(questions, voices, Speaker(Path(args.cache)), args.seed, pad=args.cut == "gt")
    if args.band != "wide":  # the clips as a phone line carries them
        items = [(c, v, q, carry(args.band, (a * 32768).astype(np.int16), RATE).astype(np.float32) / 32768) for c, v, q, a in items]
    cutter = VadCutter() if args.cut == "vad" else None
    results = []
    for config in configs:
        t0 = time.monotonic()
        results.append(evaluate(config, items, cutter))
        r = results[-1]
        print(
            f"{config.label}: WER {100 * r['wer']:.1f} %, decode p50 {r['decode_ms_p50']:.0f} ms ({time.monotonic() - t0:.0f} s)",
            flush=True,
        )
    report = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.eval_stt", *sys.argv[1:]]),
        "questions": len(questions),
        "band": args.band,
        "voice_notes": notes,
        "results": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = ("stt_eval" if args.cut == "gt" else "stt_eval_vad") + ("" if args.band == "wide" else f"_{args.band}")
    (out / f"{name}.json").write_text(json.dumps(report) + "\n")  # one line: a row per clip (335) per config
    (out / f"{name}.md").write_text(markdown(report))
    print(f"wrote {out}/{name}.json, {name}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
