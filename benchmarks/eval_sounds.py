#!/usr/bin/env python3
"""The sound-event model alone on the interruption set's clips: how much speech does it hear in
each kind of case, and what would its rule have changed in a finished run?

Every case of ``benchmarks/interruptions.toml`` (made as the interruption benchmark makes them)
is read whole by the product's YAMNet (``voiceagent.backends.yamnet``): its speech probability
and likeliest sound.  Then, given ``--run`` (an interruption benchmark's JSON, its ``words``
mode), each case's last logged verdict is judged again with the sound model's rule at each
``--thresholds`` value (``turn.interruption_min_speech``): words that interrupted, with no floor
word nor question word, whose clip it hears as speech less likely than the threshold, become a
sound.  The clip is the whole case, not the VAD's cut of it, so this is the model's view of the
case; the server's own figures come from the interruption benchmark.  JSON on stdout.

    .venv/bin/python -m benchmarks.eval_sounds --run docs/bench/interruptions/run21_all_179_default.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import emit_json
from benchmarks.interruptions import RATE, load_set
from voiceagent.audio import resample
from voiceagent.backends.yamnet import YamnetSounds
from voiceagent.text.backchannel import asks, floor_words, phrases_for, real_words, takes_floor

_VERDICT = re.compile(r"speech over the reply is ([\w ]+): ['\"](.*)['\"] at")


def hear_all(group: str | None) -> list[dict[str, Any]]:
    model = YamnetSounds()
    _, _, cases = load_set(None, None, group)
    rows = []
    for case in cases:
        audio = resample(case.pcm, RATE, 16000).astype(np.float32) / 32768.0
        t0 = time.perf_counter()
        heard = model.hear(audio)
        rows.append(
            {
                "kind": case.kind,
                "group": case.group,
                "case": case.name,
                "speech": round(heard.speech, 3),
                "sound": heard.sound,
                "ms": round((time.perf_counter() - t0) * 1000, 1),
            }
        )
    model.executor.shutdown(wait=False)
    return rows


def rejudge(rows: list[dict[str, Any]], run: dict[str, Any], thresholds: list[float]) -> dict[str, Any]:
    """Each threshold's lost and missed cases, from the run's verdicts and the clips' speech."""
    speech = {r["case"]: r["speech"] for r in rows}
    cases = run["cases"]["words"]
    out: dict[str, Any] = {}
    for threshold in thresholds:
        lost, missed, changed = 0, 0, []
        for case in cases:
            bad = case["kind"] != "interruption"
            ok = not case.get("lost") if bad else bool(case.get("honoured"))
            verdicts = [m for line in case.get("judged", []) if (m := _VERDICT.match(line))]
            if verdicts and verdicts[-1].group(1) == "interrupt" and case["case"] in speech:
                words = real_words(verdicts[-1].group(2), phrases_for("en", ""), floor_words("en"))
                if speech[case["case"]] < threshold and not takes_floor(words, "en") and not asks(words, "en"):
                    if ok != bad:
                        changed.append({"case": case["case"], "speech": speech[case["case"]], "now": "right" if bad else "wrong"})
                    ok = bad
            lost += bad and not ok
            missed += not bad and not ok
        out[f"{threshold:g}"] = {"lost": lost, "missed": missed, "changed": changed}
    return {
        "false_cases": sum(c["kind"] != "interruption" for c in cases),
        "interruptions": sum(c["kind"] == "interruption" for c in cases),
        "by_threshold": out,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--group", help="only this group of the set")
    ap.add_argument("--run", type=Path, help="an interruption benchmark's JSON to judge again with the rule")
    ap.add_argument("--thresholds", default="0,0.2,0.3,0.4,0.6", help="turn.interruption_min_speech values (default 0,0.2,0.3,0.4,0.6)")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    args = ap.parse_args()
    rows = hear_all(args.group)
    by_kind = {}
    for kind in sorted({r["kind"] for r in rows}):
        values = [r["speech"] for r in rows if r["kind"] == kind]
        by_kind[kind] = {
            "cases": len(values),
            "speech_p10": round(float(np.percentile(values, 10)), 3),
            "speech_p50": round(float(np.percentile(values, 50)), 3),
            "min": min(values),
            "under_0.3": sum(v < 0.3 for v in values),
        }
    result: dict[str, Any] = {
        "benchmark": "eval_sounds",
        "by_kind": by_kind,
        "ms_p50": float(np.median([r["ms"] for r in rows])),
        "cases": rows,
    }
    if args.run:
        result["rejudged"] = {
            "run": str(args.run),
            **rejudge(rows, json.loads(args.run.read_text()), [float(t) for t in args.thresholds.split(",")]),
        }
    emit_json(result, args.out.parent if args.out else None, args.out.name if args.out else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
