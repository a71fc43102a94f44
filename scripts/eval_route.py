#!/usr/bin/env python3
"""Which classifier should route a turn to the small model?  Rules against the embedding.

The turns (``scripts/eval_route_turns.toml``) are labelled ``small`` (social glue: greetings,
thanks, farewells, yes/no, a name) or ``large`` (everything else, including turns that start like
glue and go on).  Two classifiers decide "small" for each:

* ``rules``: :func:`voiceagent.text.turn_kind.small_talk_kind`, what ``llm.route = "rules"`` runs;
* ``embedding``: the semantic cache's sentence embedding (all-MiniLM-L6-v2), "small" when the
  turn's cosine to its nearest exemplar (``EXEMPLARS`` below, none of them in the set) reaches a
  threshold, swept from 0.50 to 0.98.

A wrong "small" is a worse answer, a wrong "large" only time, so precision (right smalls / all
smalls) comes first: for the embedding the report gives the highest recall at precision 1.0 and at
0.95.  Also the cost of one decision.  Which model answers better is measured aloud by
``scripts/eval_quality.py`` (``--profiles fast,balanced,balanced+llm.route=rules``).  JSON on
stdout (and ``--out``).

    .venv/bin/python scripts/eval_route.py --out docs/bench/routing
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

from scripts.bench.report import emit_json  # noqa: E402
from scripts.bench.stats import precision_recall  # noqa: E402
from voiceagent.backends.minilm import MiniLm  # noqa: E402
from voiceagent.config import Config  # noqa: E402
from voiceagent.models.source import resolve  # noqa: E402
from voiceagent.text.turn_kind import small_talk_kind  # noqa: E402

TURNS = ROOT / "scripts" / "eval_route_turns.toml"
EXEMPLARS = [
    "Hi.",
    "Good morning.",
    "Hey there.",
    "How are you?",
    "How is it going?",
    "Thanks.",
    "Thank you very much.",
    "Cheers.",
    "Bye.",
    "See you later.",
    "Have a nice day.",
    "Take care.",
    "Yes.",
    "Yep.",
    "No.",
    "Okay.",
    "Alright, sounds good.",
    "Correct.",
    "No thanks.",
    "Please do.",
    "My name is Sam.",
    "This is Alex.",
    "Nice to meet you too.",
    "What is your name?",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="a folder for route_classifier.json")
    args = ap.parse_args()
    data = tomllib.loads(TURNS.read_text())
    texts = [*data["small"], *data["large"]]
    truth = [True] * len(data["small"]) + [False] * len(data["large"])

    t0 = time.perf_counter()
    ruled = [small_talk_kind(t) is not None for t in texts]
    rules_us = (time.perf_counter() - t0) / len(texts) * 1e6
    report: dict[str, Any] = {
        "turns": {"small": len(data["small"]), "large": len(data["large"])},
        "rules": precision_recall(ruled, truth, yes_key="small", wrong_key="wrong_small")
        | {
            "us_per_turn": round(rules_us, 1),
            "wrong_small_turns": [t for t, r, y in zip(texts, ruled, truth, strict=True) if r and not y],
            "missed_small_turns": [t for t, r, y in zip(texts, ruled, truth, strict=True) if y and not r],
        },
    }

    config = Config()
    model = MiniLm(resolve("embed", config.cache.embed_model, config.cache_path).path)
    model.embed(["warm up"])
    exemplars = model.embed(EXEMPLARS)
    costs: list[float] = []
    vectors = []
    for text in texts:
        t1 = time.perf_counter()
        vectors.append(model.embed([text])[0])
        costs.append((time.perf_counter() - t1) * 1000.0)
    nearest = (np.stack(vectors) @ exemplars.T).max(axis=1)
    sweep = []
    for threshold in np.round(np.arange(0.50, 0.985, 0.02), 2):
        sweep.append(
            {"threshold": float(threshold)}
            | precision_recall([bool(c >= threshold) for c in nearest], truth, yes_key="small", wrong_key="wrong_small")
        )

    def best(floor: float) -> dict[str, Any] | None:
        ok = [row for row in sweep if row["precision"] >= floor and row["small"]]
        return max(ok, key=lambda row: (row["recall"], row["threshold"])) if ok else None

    at_1, at_95 = best(1.0), best(0.95)
    report["embedding"] = {
        "exemplars": len(EXEMPLARS),
        "ms_per_turn_p50": round(statistics.median(costs), 2),
        "best_at_precision_1": at_1,
        "best_at_precision_0.95": at_95,
        "sweep": sweep,
        "wrong_small_at_best_0.95": [
            t for t, c, y in zip(texts, nearest, truth, strict=True) if at_95 and c >= at_95["threshold"] and not y
        ],
    }
    model.close()
    emit_json(report, args.out, "route_classifier.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
