"""The README's pictures redraw from their committed runs (``python -m benchmarks.plots``), and a
JSON no benchmark draws is refused, not drawn as something else."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.plots import kind, redraw

ROOT = Path(__file__).resolve().parents[2]
RUNS = {
    "pipecat": "docs/bench/pipecat.json",
    "latency": "docs/bench/latency.json",
    "concurrency": "docs/bench/batched/concurrency_fast_final_2026-11-26.json",
    "quality": "docs/bench/accuracy_speed/quality.json",
}


@pytest.mark.parametrize("expected", sorted(RUNS))
def test_each_committed_run_redraws_as_a_png(expected: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    src = ROOT / RUNS[expected]
    copy = tmp_path / src.name
    shutil.copy(src, copy)
    written = redraw(copy)
    assert written
    for png in written:
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, (png, len(data))


def test_kind_tells_the_reports_apart_and_refuses_others(tmp_path: Path) -> None:
    import json

    seen = {name: kind(json.loads((ROOT / path).read_text())) for name, path in RUNS.items()}
    assert seen == {name: name for name in RUNS}
    other = tmp_path / "fuzz.json"
    other.write_text(json.dumps({"categories": {}}))
    with pytest.raises(ValueError, match="not a report"):
        redraw(other)
