"""Start-up time of ``voiceagent serve`` with ``profile = "auto"``: a start that measures every
installed profile (``server.auto_remeasure=true``) against one that begins at the remembered
choice, in turns.

    .venv/bin/python -m benchmarks.startup --out DIR [--pairs 2] [--set KEY=VALUE ...]

Each start is a child process (``benchmarks.common.serve``); its start-up report's ``startup_s``
(loading and warming every model it tried) and the line saying which profile ``auto`` chose are
recorded.  The user's profile settings (``VOICEAGENT_PROFILE``, ``VOICEAGENT_CONFIG``) are
cleared, so ``auto`` chooses.  With one profile installed there is nothing to skip: install the
1.5B first (``VOICEAGENT_PROFILE=quality bash scripts/setup.sh``), and where ``quality`` fits
``server.turn_budget_ms`` it is chosen first and nothing is skipped either (``--set
server.turn_budget_ms=600`` shows the case of a machine too slow for it).  Writes
``startup.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common.serve import ServeProcess


def _start(overrides: dict[str, str], remeasure: bool) -> dict[str, Any]:
    t0 = time.monotonic()
    server = ServeProcess({**overrides, "server.auto_remeasure": "true" if remeasure else "false"}, log_lines=None)
    try:
        lines = [line.strip() for line in server.lines() if re.search(r"profile auto: \w+, ", line)]
        choice = lines[-1][lines[-1].index("profile auto") :] if lines else ""
        return {
            "remeasure": remeasure,
            "spawn_to_ready_s": round(time.monotonic() - t0, 1),
            "startup_s": server.ready.get("startup_s"),
            "profile": server.ready.get("profile"),
            "choice": choice,
        }
    finally:
        if server.stop() != 0:
            raise SystemExit("the server did not stop cleanly")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=2, help="starts measuring everything, each followed by one that reuses")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    for name in ("VOICEAGENT_PROFILE", "VOICEAGENT_CONFIG"):
        os.environ.pop(name, None)
    overrides = dict(item.split("=", 1) for item in args.set)
    starts = []
    for _ in range(args.pairs):
        for remeasure in (True, False):
            starts.append(_start(overrides, remeasure))
            print(json.dumps(starts[-1]), flush=True)
    summary = {
        kind: statistics.median(s["startup_s"] for s in starts if s["remeasure"] == (kind == "measuring"))
        for kind in ("measuring", "reusing")
    }
    report = {"overrides": overrides, "median_startup_s": summary, "starts": starts}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "startup.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
