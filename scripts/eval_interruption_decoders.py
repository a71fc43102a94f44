#!/usr/bin/env python3
"""Each clip of the interruption set, cut by the real VAD, transcribed by several Whisper set-ups.

Offline (no server): a case's clip (``scripts/interruptions.toml``) is resampled to 16 kHz, cut by
silero as the VAD stage cuts a question (:class:`scripts.bench.stt.VadCutter`), and every cut is
transcribed by Whisper tiny and base, greedy and at beam 5, on the short-window path the server
uses.  Per cut: each set-up's text, its confidence and its decode time.  It answers whether a
second decode of a short segment over a paused reply (a beam, a larger model) would hear the
sounds and the misheard words better (docs/decisions/interruptions.md).  The server's own cuts
differ by a frame or two, so its transcripts differ too: the bench is the measure of the rules.

``--sound-reading`` also reads every cut a second time in backchannels and sounds only
(:mod:`voiceagent.backends.whisper_sounds`, Whisper tiny greedy, as the server does) and judges
the cases at several ``turn.interruption_sound_margin`` values: how many sounds that second
reading saves, and whether it costs a real interruption.

``--prompt NAME=TEXT`` adds a set-up: Whisper tiny, greedy, reading TEXT as the words before the
clip (a transcription prompt: would a list of backchannels and floor words, or the agent's own
story, make the sounds and short words come out right?).  ``--setups`` keeps only the named ones.

``--language-id`` adds, per cut, Whisper base's probability that the cut is English (its
language detection on the cut's encoding; tiny is English-only): whether a sound and a real
word differ in how English they sound.

Usage: .venv/bin/python -m scripts.eval_interruption_decoders [--out FILE] [--group NAME]
                                                             [--setups tiny1,...] [--prompt NAME=TEXT ...]
                                                             [--sound-reading]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from scripts import bench_interruptions
from scripts.bench.stt import SttConfig, VadCutter, load_backend
from voiceagent.audio import resample
from voiceagent.backends.protocols import confidence_of
from voiceagent.backends.whisper import window_frames
from voiceagent.config import Config
from voiceagent.conversation.interruption import InterruptionPolicy, Verdict
from voiceagent.text.backchannel import phrases_for

SETUPS = {
    "tiny1": SttConfig("whisper-tiny", 1),
    "tiny5": SttConfig("whisper-tiny", 5),
    "base1": SttConfig("whisper-base", 1),
    "base5": SttConfig("whisper-base", 5),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--group", help="only the cases of this group (dev, held-out-1, ...)")
    parser.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, of: " + ", ".join(SETUPS))
    parser.add_argument("--prompt", action="append", default=[], metavar="NAME=TEXT", help="Whisper tiny, greedy, with TEXT as its prompt")
    parser.add_argument(
        "--sound-reading", action="store_true", help="tiny1 cuts read again in backchannels and sounds; judged at several margins"
    )
    parser.add_argument("--language-id", action="store_true", help="Whisper base's P(English) for every cut")
    args = parser.parse_args()
    _, _, cases = bench_interruptions.load_set(None, None, args.group)
    cutter = VadCutter()
    chosen = [n.strip() for n in args.setups.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in SETUPS]
    if unknown:
        parser.error(f"unknown set-ups {unknown}; known: {', '.join(SETUPS)}")
    labels = {name: SETUPS[name].label for name in chosen}
    models = {name: load_backend(SETUPS[name]) for name in chosen}
    prompts = {name: "" for name in chosen}
    specs = [spec.partition("=") for spec in args.prompt]
    for spec, (name, sep, text) in zip(args.prompt, specs, strict=True):
        if not sep or not name.strip() or not text.strip():
            parser.error(f"--prompt wants NAME=TEXT, got {spec!r}")
    if specs:  # every prompted set-up decodes with the one tiny model (loaded once)
        tiny = models.get("tiny1") or load_backend(SETUPS["tiny1"])
        for name, _, text in specs:
            key = f"tiny1:{name.strip()}"
            models[key], prompts[key], labels[key] = tiny, text.strip(), f"{SETUPS['tiny1'].label}, prompt {text.strip()!r}"
    identifier = (models.get("base1") or load_backend(SETUPS["base1"])) if args.language_id else None
    out: list[dict[str, Any]] = []
    for case in cases:
        pcm = resample(case.pcm, bench_interruptions.RATE, 16000).astype(np.float32) / 32768
        record: dict[str, Any] = {"group": case.group, "kind": case.kind, "case": case.name, "cuts": []}
        for start, end, audio in cutter.cuts(pcm):
            cut: dict[str, Any] = {"ms": round(end - start)}
            for name, stt in models.items():
                t0 = time.perf_counter()
                text = stt.transcribe(audio, "en", prompts[name])
                sure = confidence_of(text)
                ms = round((time.perf_counter() - t0) * 1000)
                cut[name] = {"text": str(text), "confidence": None if sure is None else round(sure, 3), "ms": ms}
                if args.sound_reading and name == "tiny1":
                    t0 = time.perf_counter()
                    margin = stt.read_as_sounds(audio, "en", phrases_for("en"), str(text))
                    cut[name]["sound_margin"] = None if margin is None else round(margin, 3)
                    cut[name]["sound_ms"] = round((time.perf_counter() - t0) * 1000)
            if identifier is not None:
                cut["p_en"] = round(_english(identifier, audio), 3)
            record["cuts"].append(cut)
        out.append(record)
        print(json.dumps(record), file=sys.stderr, flush=True)
    summary = judged(out, list(models))
    report: dict[str, Any] = {"setups": labels, "summary": summary}
    if identifier is not None:
        report["language_id"] = _language_id(out)
    if args.sound_reading:
        report["sound_reading"] = {str(m): judged(out, ["tiny1"], m)["tiny1"] for m in SOUND_MARGINS}
        report["sound_reading_ms"] = bench_interruptions.percentiles(
            [c["tiny1"]["sound_ms"] for r in out for c in r["cuts"] if "sound_ms" in c["tiny1"]]
        )
    text = json.dumps({**report, "cases": out}, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


SOUND_MARGINS = (-1.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)
"""``turn.interruption_sound_margin`` values ``--sound-reading`` judges at (-1: no second reading)."""


def _english(stt: Any, audio: np.ndarray) -> float:
    """Whisper base's probability that ``audio`` is English (CTranslate2's language detection on
    the clip's short-window encoding, as the server encodes it)."""
    encoded = stt._encode(audio, window_frames(len(audio), stt._window_s))
    return dict(stt._model.model.detect_language(encoded)[0]).get("<|en|>", 0.0)


def _language_id(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """P(English) quartiles of the real interruptions' cuts and of the other cuts (the quieter
    voices left out), and the real interruptions' cuts at their lowest."""
    real = [c for r in cases if r["kind"] == "interruption" for c in r["cuts"]]
    other = [c for r in cases if r["kind"] not in ("interruption", "background") for c in r["cuts"]]

    def quartiles(cuts: list[dict[str, Any]]) -> list[float]:
        return [round(q, 2) for q in statistics.quantiles([c["p_en"] for c in cuts], n=4)] if len(cuts) > 1 else []

    lowest = sorted((c["p_en"], r["case"]) for r in cases if r["kind"] == "interruption" for c in r["cuts"])[:5]
    return {"interruptions": quartiles(real), "others": quartiles(other), "interruptions_lowest": lowest}


def _read(policy: InterruptionPolicy, cut: dict[str, Any]) -> float | None:
    """A cut's second-reading margin where the server would ask for one (else None)."""
    return cut.get("sound_margin") if policy.reads_again(cut["text"], None, None, "en", cut["confidence"]) else None


def judged(cases: list[dict[str, Any]], setups: list[str], sound_margin: float = -1.0) -> dict[str, dict[str, Any]]:
    """Per set-up, the cases today's rules (the default ``[turn]``, ``sound_margin`` for the
    second reading where a cut has one; the voice's level left out, which decides the quieter
    voices, so those are not counted) would get wrong: a backchannel or a noise is lost when any
    of its cuts is judged an interruption, a real interruption missed when none is."""
    policy = dataclasses.replace(InterruptionPolicy.from_config(Config().turn), sound_margin=sound_margin)
    summary: dict[str, dict[str, int]] = {}
    for name in setups:
        counts: dict[str, Any] = {"lost": 0, "false_cases": 0, "missed": 0, "interruptions": 0, "lost_cases": [], "missed_cases": []}
        for case in cases:
            if case["kind"] == "background":
                continue
            cuts = [c[name] for c in case["cuts"]]
            interrupts = any(
                policy.verdict(c["text"], None, None, "en", c["confidence"], _read(policy, c)) is Verdict.INTERRUPT for c in cuts
            )
            if case["kind"] == "interruption":
                counts["interruptions"] += 1
                counts["missed"] += not interrupts
                if not interrupts:
                    counts["missed_cases"].append(case["case"])
            else:
                counts["false_cases"] += 1
                counts["lost"] += interrupts
                if interrupts:
                    counts["lost_cases"].append(case["case"])
        summary[name] = counts
    return summary


if __name__ == "__main__":
    sys.exit(main())
