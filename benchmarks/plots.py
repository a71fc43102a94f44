"""Redraw the picture of a finished run from its JSON, without running anything: the latency
benchmark's CDF and waterfall (``latency.json``), ours against Pipecat (``pipecat.json``), latency
by number of conversations (a ``concurrency`` JSON) and accuracy against latency by profile (a
``quality`` JSON).  Each benchmark draws its own picture at the end of a run; this is for a run
already committed, or one whose picture code changed.

Usage: python -m benchmarks.plots docs/bench/pipecat.json [more.json ...]

Each PNG is written beside its JSON, named as the benchmark names it (``latency.json``'s two
pictures: ``cdf.png`` and ``waterfall.png``).  A JSON of another kind is an error, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def kind(report: dict[str, Any]) -> str | None:
    """Which benchmark wrote ``report``, from the keys only that benchmark writes."""
    if "pipecat" in report and "ours" in report:
        return "pipecat"
    if "naive" in report and "ours" in report:
        return "latency"
    if "results" in report and "engines" in report:
        return "concurrency"
    if "profiles" in report and "questions" in report:
        return "quality"
    return None


def redraw(path: Path) -> list[Path]:
    """Draw ``path``'s picture(s) beside it; returns the files written.  Raises ``ValueError``
    for a JSON no benchmark here draws."""
    report = json.loads(path.read_text())
    match kind(report):
        case "pipecat":
            from benchmarks.common.plots import pipecat_cdf

            pipecat_cdf(report, path.with_suffix(".png"))
            return [path.with_suffix(".png")]
        case "latency":
            from benchmarks.latency import plots

            plots(report, path.parent)
            return [path.parent / "cdf.png", path.parent / "waterfall.png"]
        case "concurrency":
            from benchmarks.concurrency import plot

            plot(report, path.parent, path.stem)
            return [path.with_suffix(".png")]
        case "quality":
            from benchmarks.eval_quality import plot as quality_plot

            quality_plot(report, path.with_suffix(".png"))
            return [path.with_suffix(".png")]
    raise ValueError(f"{path}: not a report of latency, against_pipecat, concurrency or eval_quality")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("reports", nargs="+", type=Path, metavar="JSON")
    args = ap.parse_args()
    for path in args.reports:
        try:
            written = redraw(path)
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
