"""Summary statistics the reports share: latency percentiles, and the precision and recall of a
yes/no decision."""

from __future__ import annotations

import numpy as np

__all__ = ["percentiles", "precision_recall"]


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50, p95, p99 and the mean of ``values``, rounded to 0.1; all None when there are none."""
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    arr = np.array(values, dtype=np.float64)
    out: dict[str, float | None] = {f"p{q}": round(float(np.percentile(arr, q)), 1) for q in (50, 95, 99)}
    return out | {"mean": round(float(arr.mean()), 1)}


def precision_recall(decided: list[bool], truth: list[bool], *, yes_key: str, wrong_key: str) -> dict[str, float | int]:
    """A yes/no decision per case (``decided``) against the right answer (``truth``, the same
    length): ``{yes_key: how many it said yes to, wrong_key: how many of those wrongly,
    "precision": right yeses / all yeses (1.0 with none), "recall": right yeses / true cases}``,
    the shares rounded to 4 places.  ``truth`` must hold at least one true case."""
    tp = sum(d and t for d, t in zip(decided, truth, strict=True))
    fp = sum(d and not t for d, t in zip(decided, truth, strict=True))
    return {
        yes_key: tp + fp,
        wrong_key: fp,
        "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "recall": round(tp / sum(truth), 4),
    }
