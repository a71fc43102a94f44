"""``python -m benchmarks`` lists every benchmark: the index (benchmarks/__main__.py) names each
module of benchmarks/ that runs, names nothing that is gone, and is what the command prints."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from benchmarks.__main__ import INDEX

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "benchmarks"


def _runs(path: Path) -> bool:
    """A module that runs: it has ``if __name__ == "__main__"`` or a top-level ``main``."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            return True
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
            return True
    return False


def _runnable() -> set[str]:
    """benchmarks/NAME.py that runs, and benchmarks/NAME/ with a __main__.py (the index itself aside)."""
    modules = {p.stem for p in PACKAGE.glob("*.py") if not p.name.startswith("__") and _runs(p)}
    packages = {p.parent.name for p in PACKAGE.glob("*/__main__.py")}
    return modules | packages


def _source(name: str) -> Path:
    module = PACKAGE / f"{name}.py"
    return module if module.exists() else PACKAGE / name / "__main__.py"


def test_every_runnable_benchmark_is_in_the_index() -> None:
    missing = _runnable() - {b.name for b in INDEX}
    assert not missing, f"benchmarks/ modules that run but are not in the index (benchmarks/__main__.py): {sorted(missing)}"


def test_every_index_entry_names_a_benchmark_that_exists_and_runs() -> None:
    names = [b.name for b in INDEX]
    assert len(names) == len(set(names)), "an entry is in the index twice"
    gone = [name for name in names if not _source(name).exists()]
    assert not gone, f"index entries with no module in benchmarks/: {gone}"
    idle = [name for name in names if not _runs(_source(name))]
    assert not idle, f"index entries whose module does not run (no main, no __main__ guard): {idle}"


def test_every_benchmark_says_what_it_measures_and_the_index_how_long_it_takes() -> None:
    undocumented = [b.name for b in INDEX if not ast.get_docstring(ast.parse(_source(b.name).read_text()))]
    assert not undocumented, f"benchmarks without a module docstring saying what they measure: {undocumented}"
    for b in INDEX:
        assert b.measures.strip() and b.takes.strip(), b
        assert any(ch.isdigit() for ch in b.takes), f"{b.name}: a time, not {b.takes!r}"


def test_python_m_benchmarks_lists_every_entry() -> None:
    out = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    listed = {line.split()[2] for line in out.splitlines() if line.startswith("python -m benchmarks.")}
    assert listed == {f"benchmarks.{b.name}" for b in INDEX}, out
    for b in INDEX:
        assert any(line.startswith(b.command + " ") and b.measures in line and b.takes in line for line in out.splitlines()), b
