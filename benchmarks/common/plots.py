"""Pictures of finished runs that need none of the benchmark's own dependencies.

``pipecat_cdf`` lives here, not in ``benchmarks.against_pipecat``, because that module imports
Pipecat at load time, and a finished run's picture should redraw wherever matplotlib is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def pipecat_cdf(report: dict[str, Any], path: Path) -> None:
    """Draw ``report``'s per-turn latencies, ours against Pipecat, as a CDF with each side's p50
    and p95 marked, into the PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for side, label, color in (("ours", "voiceagent", "tab:blue"), ("pipecat", "Pipecat (stock)", "tab:orange")):
        vals = np.sort([t["latency_ms"] for t in report[side] if t["latency_ms"] is not None])
        if not len(vals):
            continue
        summary = report["summary"][side]
        ax.step(
            vals,
            np.arange(1, len(vals) + 1) / len(vals),
            where="post",
            color=color,
            label=f"{label}: p50 {summary['p50']:.0f} ms, p95 {summary['p95']:.0f} ms",
        )
        for key, style in (("p50", "--"), ("p95", ":")):
            ax.axvline(summary[key], color=color, lw=0.8, ls=style)
    ax.set_xlabel("end of user speech → first agent audio (ms)")
    ax.set_ylabel("fraction of turns")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"Same models, same fixtures, one run ({report['machine']}, {report['date'][:10]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
