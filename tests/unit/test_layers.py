"""The import graph of ``voiceagent`` points one way: each top-level unit (a package or a root
module) imports only units below it in :data:`LAYERS`, never one above.  Lazy imports inside
functions and ``TYPE_CHECKING`` imports count too: they are still a dependency a reader meets.

And the layout's other rules: each module of the conversation core stays under
:data:`CORE_MAX_LINES` (one concept each: a growing one is two), ``Session`` wires its stages to
named methods, never lambdas (a lambda hides a piece of behaviour where no test or reader looks
for it), and no file of the project edits ``sys.path`` (the editable install puts the checkout
on it)."""

from __future__ import annotations

import ast
from pathlib import Path

import voiceagent

PACKAGE = Path(voiceagent.__file__).parent

LAYERS = [
    # leaves: data and pure helpers
    "errors",
    "audio",
    "denoise",
    "echo",
    "clock",
    "playback",
    "contention",
    "capacity",
    "admission",
    "observability",
    "tools",
    "config",
    "settings",
    "text",
    "cache",
    "models",
    "events",
    # the machinery, then what uses it
    "pipeline",
    "backends",
    "stages",
    "conversation",
    "session",
    "web",
    "transports",
    "client",
    "sip",
    "replay",
    "talk",
    "cli",
    "__init__",
]


def unit_of(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imported_units(path: Path) -> set[tuple[str, int]]:
    """(unit, line) of every ``voiceagent`` import in ``path``, its own unit left out."""
    own = unit_of(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "voiceagent":
            parts = node.module.split(".")
            units = [a.name for a in node.names] if len(parts) == 1 else [parts[1]]
        elif isinstance(node, ast.Import):
            units = [a.name.split(".")[1] for a in node.names if a.name.startswith("voiceagent.")]
        else:
            continue
        found |= {(u, node.lineno) for u in units if u != own}
    return found


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(p) for p in PACKAGE.rglob("*.py")}
    assert units <= set(LAYERS), f"new units need a place in LAYERS: {sorted(units - set(LAYERS))}"


def test_no_import_runs_up_the_layers() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = LAYERS.index(unit_of(path))
        for unit, line in sorted(imported_units(path)):
            if LAYERS.index(unit) > here:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports voiceagent.{unit}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_tool_calling_is_one_low_package() -> None:
    """``voiceagent.tools`` holds the spec, arguments, formats, retry policy and built-ins, and
    depends on nothing of voiceagent's outside itself: every layer can use it."""
    tools = PACKAGE / "tools"
    assert {p.stem for p in tools.glob("*.py")} >= {"spec", "args", "format", "retry", "builtin"}
    for path in tools.glob("*.py"):
        assert not imported_units(path), path
    # and no tool-calling module is left elsewhere
    assert not [p for p in PACKAGE.rglob("*tool*.py") if tools not in p.parents]


def test_the_session_wires_its_stages_without_lambdas() -> None:
    tree = ast.parse((PACKAGE / "session.py").read_text())
    lambdas = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
    assert not lambdas, f"voiceagent/session.py: lambdas at lines {lambdas}; wire a named method of the part that owns the behaviour"


_MUTATORS = ("insert", "append", "extend", "remove")


def _edits_sys_path(tree: ast.AST) -> list[int]:
    """Lines that change ``sys.path`` (a call of one of its mutating methods, or an assignment)."""
    lines = []
    for node in ast.walk(tree):
        target = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("insert", "append", "extend", "remove")
        ):
            target = node.func.value
        elif isinstance(node, ast.Assign | ast.AugAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name) and target.value.id == "sys":
            lines.append(node.lineno)
    return sorted(lines)


def test_no_file_edits_sys_path() -> None:
    root = PACKAGE.parent
    edits = []
    for folder in ("voiceagent", "scripts", "benchmarks", "tests", "clients"):
        for path in sorted((root / folder).rglob("*.py")):
            edits += [f"{path.relative_to(root)}:{line}" for line in _edits_sys_path(ast.parse(path.read_text()))]
    assert not edits, "sys.path edits (run them as python -m scripts.NAME or python -m benchmarks.NAME instead):\n" + "\n".join(edits)


def test_the_rules_catch_what_they_forbid() -> None:
    assert _edits_sys_path(ast.parse("import sys\nsys.path.insert(0, 'x')\nsys.path += ['y']\nsys.path = []")) == [2, 3, 4]
    assert _edits_sys_path(ast.parse("import sys\nfor p in sys.path:\n    print(p)")) == []


CORE_MAX_LINES = 400


def test_each_module_of_the_conversation_core_stays_small() -> None:
    long = {p.name: n for p in sorted((PACKAGE / "conversation").glob("*.py")) if (n := len(p.read_text().splitlines())) > CORE_MAX_LINES}
    assert not long, f"conversation modules over {CORE_MAX_LINES} lines: {long}; split out a concept"
