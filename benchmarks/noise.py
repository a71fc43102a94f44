#!/usr/bin/env python3
"""Noise suppression where it pays: the spoken eval's questions in babble, music and street noise
at several SNRs, each heard by a server with noise reduction off and on, in one run.

Each condition is a profile of :mod:`benchmarks.eval_quality` (``fast@babble5`` and
``fast@babble5+vad.noise_reduction=near_field``; the noises and their mixing:
:mod:`benchmarks.common.noise`), replayed at real-time pace to its own ``voiceagent serve``; a
clean pair first, so that what suppression costs on quiet speech is in the same run.  Per
condition:

* right answers (the eval's scoring) and transcript WER;
* false interruptions: replies cut (cancelled by speech detected over them) although nobody
  spoke over them, and answers to no question (turns the noise opened);
* end of speech -> first audio, p50 and p95.

Writes ``quality.json`` / ``quality.md`` (every turn, as the eval's) and ``noise.json`` /
``noise.md`` (one line per condition, off and on side by side) to ``--out``.

    .venv/bin/python -m benchmarks.noise --out docs/bench/noise                    # about 40 min
    .venv/bin/python -m benchmarks.noise --noises babble --snrs 0 --limit 3 --out artifacts/noise   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import eval_quality
from benchmarks.common.noise import NOISES

ROOT = Path(__file__).resolve().parent.parent
ON = "+vad.noise_reduction=near_field"


def conditions(profile: str, noises: list[str], snrs: list[str]) -> list[str]:
    """The eval's profiles: clean, then each noise at each SNR; each off, then on."""
    out = [profile, profile + ON]
    for noise in noises:
        for snr in snrs:
            out += [f"{profile}@{noise}{snr}", f"{profile}@{noise}{snr}{ON}"]
    return out


def row(entry: dict[str, Any]) -> dict[str, Any]:
    """One condition's line from its eval entry."""
    if "summary" not in entry:
        return {"error": entry.get("error", "no result")}
    s, r = entry["summary"], entry.get("responses", {})
    return {
        "right": s["accuracy_pct"],
        "answered": f"{s['answered']}/{s['questions']}",
        "wer_pct": s["wer_pct"],
        "replies_cut": r.get("cut"),
        "unasked": r.get("unasked"),
        "p50_ms": s["latency_ms"]["p50"],
        "p95_ms": s["latency_ms"]["p95"],
    }


def table(report: dict[str, Any]) -> dict[str, Any]:
    """condition ("clean", "babble5", …) → {"off": row, "on": row}."""
    out: dict[str, Any] = {}
    for name, entry in report["profiles"].items():
        on = name.endswith(ON)
        base = name.removesuffix(ON)
        cond = base.partition("@")[2] or "clean"
        out.setdefault(cond, {})["on" if on else "off"] = row(entry)
    return out


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "# Noise suppression: the spoken eval in noise, suppression off and on",
        "",
        f"Machine: {summary['machine']}.  Command: `{summary['command']}`",
        "",
        f"{summary['questions']} questions in voice {', '.join(summary['voices'])}; profile {summary['profile']}; "
        "noises generated (benchmarks/common/noise.py); SNR of the speech's voiced frames against the noise.",
        "",
        "| condition | right % off / on | WER % off / on | replies cut off / on | unasked answers off / on "
        "| p50 ms off / on | p95 ms off / on |",
        "|---|---|---|---|---|---|---|",
    ]

    def pair(cond: dict[str, Any], key: str) -> str:
        return " / ".join(str(cond.get(side, {}).get(key, "–")) for side in ("off", "on"))

    for name, cond in summary["conditions"].items():
        cells = [pair(cond, k) for k in ("right", "wer_pct", "replies_cut", "unasked", "p50_ms", "p95_ms")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Replies cut: cancelled by speech detected over them although nobody spoke (each condition's questions leave the answer "
        "time to finish).  Unasked answers: replies to no question, to a turn the noise opened.  Latency: end of speech → first "
        "audio at the client.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--profile", default="fast")
    ap.add_argument("--noises", default=",".join(NOISES), help=f"comma-separated, of: {', '.join(NOISES)}")
    ap.add_argument("--snrs", default="0,5,10", help="comma-separated dB")
    ap.add_argument("--limit", type=int, default=8, help="the first N questions of the eval")
    ap.add_argument("--voices", default="piper:joe", help="as benchmarks.eval_quality's")
    ap.add_argument("--gap", type=float, default=8.0, help="seconds after each question (the answer plays in them)")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "noise"))
    args = ap.parse_args(argv)

    noises = [n.strip() for n in args.noises.split(",") if n.strip()]
    unknown = [n for n in noises if n not in NOISES]
    if unknown:
        ap.error(f"unknown noise {unknown[0]!r}: one of {', '.join(NOISES)}")
    snrs = [s.strip() for s in args.snrs.split(",") if s.strip()]
    profiles = conditions(args.profile, noises, snrs)
    out = Path(args.out)
    rc = eval_quality.main(
        ["--profiles", ",".join(profiles), "--limit", str(args.limit), "--voices", args.voices, "--gap", str(args.gap), "--out", str(out)]
    )
    report = json.loads((out / "quality.json").read_text())
    summary = {
        "machine": report["machine"],
        "command": "python -m benchmarks.noise " + " ".join(argv if argv is not None else sys.argv[1:]),
        "profile": args.profile,
        "questions": report["questions"],
        "voices": report["voices"],
        "wall_s": report["wall_s"],
        "conditions": table(report),
    }
    (out / "noise.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "noise.md").write_text(markdown(summary))
    print(markdown(summary))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
