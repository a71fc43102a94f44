#!/usr/bin/env python3
"""Is the semantic reply cache safe?  Precision and recall of a hit on written-down question pairs.

The pairs (``benchmarks/eval_cache_pairs.toml``): ``hit`` pairs ask the same thing in other words,
``miss`` pairs are near misses that want another answer.  Each pair is embedded with the catalog's
embedding model (``cache.embed_model``, run by
:class:`voiceagent.backends.minilm.MiniLm`), and for thresholds from 0.30 to 0.99 the script
counts the pairs that would hit: with the cosine alone, and with the cosine and the lexical
guards (:mod:`voiceagent.text.question_match`), as the cache decides.  ``precision`` = right
hits / all hits; ``recall`` = right hits / hit pairs.

A wrong hit is a wrong answer.  On this set the guards alone refuse every near miss (the
embedding scores some of them 0.97), so the threshold is the second line, for near misses the
set does not have.  It is chosen as the highest threshold that keeps precision 1.0 and loses
none of the right hits the guards let through: every near miss scored below it is refused by the
embedding too, without a paraphrase lost.  Also the cost of one embedding.  JSON on stdout (and
``--out``).

    .venv/bin/python -m benchmarks.eval_cache --out docs/bench/cache
"""

from __future__ import annotations

import argparse
import statistics
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.common.report import emit_json  # noqa: E402
from benchmarks.common.stats import precision_recall  # noqa: E402
from voiceagent.backends.minilm import MiniLm  # noqa: E402
from voiceagent.config import CacheConfig  # noqa: E402
from voiceagent.models.source import resolve  # noqa: E402
from voiceagent.text.question_match import mismatch  # noqa: E402

PAIRS = ROOT / "benchmarks" / "eval_cache_pairs.toml"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="a folder for cache_eval.json")
    args = ap.parse_args()
    sets = tomllib.loads(PAIRS.read_text())
    pairs = [(a, b, True) for a, b in sets["hit"]] + [(a, b, False) for a, b in sets["miss"]]
    model = MiniLm(resolve("embed", CacheConfig().embed_model).path)
    texts = sorted({t for a, b, _ in pairs for t in (a, b)})
    vectors = dict(zip(texts, model.embed(texts), strict=True))
    truth = [same for _, _, same in pairs]
    rows = []
    for a, b, same in pairs:
        rows.append({"a": a, "b": b, "same": same, "cosine": round(float(vectors[a] @ vectors[b]), 4), "guard": mismatch(a, b)})
    sweep = []
    for t in (float(x) for x in np.round(np.arange(0.30, 1.0, 0.01), 2)):
        alone = [r["cosine"] >= t for r in rows]
        guarded = [r["cosine"] >= t and r["guard"] is None for r in rows]
        sweep.append(
            {
                "threshold": t,
                "cosine_alone": precision_recall(alone, truth, yes_key="hits", wrong_key="wrong_hits"),
                "with_guards": precision_recall(guarded, truth, yes_key="hits", wrong_key="wrong_hits"),
            }
        )
    safe = [s for s in sweep if s["with_guards"]["wrong_hits"] == 0]
    best = max(s["with_guards"]["recall"] for s in safe)
    chosen = max(s["threshold"] for s in safe if s["with_guards"]["recall"] == best)
    at = next(s for s in sweep if s["threshold"] == chosen)
    samples = []
    for text in ["When do you close?", "How long does the train from London to Paris take?"] * 10:
        t0 = time.perf_counter()
        model.embed([text])
        samples.append(time.perf_counter() - t0)
    report: dict[str, Any] = {
        "model": CacheConfig().embed_model,
        "pairs": {"hit": len(sets["hit"]), "miss": len(sets["miss"])},
        "lowest_safe_threshold": min(s["threshold"] for s in safe),
        "chosen_threshold": chosen,
        "near_misses_below_chosen": sum(r["cosine"] < chosen for r in rows if not r["same"]),
        "at_chosen": at,
        "guards_refused": {
            reason: sum(r["guard"] == reason for r in rows if not r["same"]) for reason in sorted({str(r["guard"]) for r in rows})
        },
        "embed_ms_p50": round(statistics.median(samples) * 1000, 2),
        "rows": rows,
        "sweep": sweep,
    }
    emit_json(report, args.out, "cache_eval.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
