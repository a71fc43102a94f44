"""The import graph of ``voiceagent`` points one way: each top-level unit (a package or a root
module) imports only units below it in :data:`LAYERS`, never one above.  Lazy imports inside
functions and ``TYPE_CHECKING`` imports count too: they are still a dependency a reader meets."""

from __future__ import annotations

import ast
from pathlib import Path

import voiceagent

PACKAGE = Path(voiceagent.__file__).parent

LAYERS = [
    # leaves: data and pure helpers
    "errors",
    "audio",
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
