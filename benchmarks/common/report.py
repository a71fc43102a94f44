"""Writing a run's JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["emit_json"]


def emit_json(report: dict[str, Any], out: str | Path | None, name: str) -> None:
    """Write ``report`` as JSON (indent 1, a final newline) to ``out/name`` when ``out`` is given,
    making the folder, then print it on stdout."""
    text = json.dumps(report, indent=1)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text(text + "\n")
    print(text)
