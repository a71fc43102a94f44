"""What ``profile = "auto"`` remembers between starts: its last choice, and the machine, software
and candidates it was made for.

A choice is measured by loading and timing every installed profile from the most accurate down,
which costs a start-up the load of each model passed over.  The measurement depends on the CPU,
the cores this process may use, the versions of the inference packages, the candidates'
settings and the budget; while none of them changed, the next start begins at the remembered
choice (:func:`remembered`) and loads nothing more accurate.  Everything here reads and writes
one small JSON file (``<cache_dir>/profile_auto.json``) and never raises for a file that is
missing, unreadable or from another machine: that only means measuring again."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from voiceagent.config import Config

__all__ = ["CHOICE_FILE", "Remembered", "fingerprint", "last_choice", "record", "remembered"]

log = logging.getLogger(__name__)

CHOICE_FILE = "profile_auto.json"
_PACKAGES = ("voiceagent", "llama_cpp_python", "ctranslate2", "faster-whisper", "onnxruntime", "piper-tts", "numpy")
"""The packages whose versions change what a turn costs: a new one means measuring again."""
_SECTIONS = ("vad", "stt", "turn", "llm", "tts")
"""The settings a turn's measured cost depends on (the models, their threads, the instructions)."""


@dataclasses.dataclass(frozen=True)
class Remembered:
    """A remembered choice that still applies: the profile, when the profiles it passed over were
    last measured, and their predicted times then (ms)."""

    chosen: str
    measured_at: str
    predicted_ms: dict[str, float]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for row in info:
                if row.startswith("model name"):
                    return row.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def _digest(config: Config) -> str:
    parts = {name: dataclasses.asdict(getattr(config, name)) for name in _SECTIONS}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fingerprint(candidates: tuple[tuple[str, Config], ...], budget_ms: float) -> dict[str, Any]:
    """What a choice among ``candidates`` within ``budget_ms`` was measured on (JSON-able)."""
    return {
        "cpu": _cpu_model(),
        "cores": _cores(),
        "python": platform.python_version(),
        "platform": sys.platform,
        "versions": {p: _version(p) for p in _PACKAGES},
        "candidates": {name: _digest(config) for name, config in candidates},
        "turn_budget_ms": budget_ms,
    }


def record(
    cache_dir: Path,
    name: str,
    line: str,
    measured: dict[str, float],
    budget: float,
    key: dict[str, Any],
    kept: Remembered | None = None,
) -> None:
    """Remember choice ``name`` (its ``line`` and figures) for ``key`` (:func:`fingerprint`); a
    start that began at ``kept`` keeps its figures and date for the profiles it did not measure.
    A cache that cannot be written is a warning, never an error (the server has chosen)."""
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    passed_over = {n: ms for n, ms in kept.predicted_ms.items() if n not in measured} if kept else {}
    entry: dict[str, Any] = {
        "chosen": name,
        "line": line,
        "predicted_ms": {**passed_over, **measured},
        "turn_budget_ms": budget,
        "machine": f"{key['cpu']}, {key['cores']} cores",
        "time": now,
        "measured_at": kept.measured_at if kept and passed_over else now,
        "key": key,
    }
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        (cache_dir / CHOICE_FILE).write_text(json.dumps(entry, indent=2) + "\n")
    except OSError as exc:
        log.warning("could not record the profile choice in %s: %s", cache_dir, exc)


def _entry(cache_dir: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads((cache_dir / CHOICE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def remembered(cache_dir: Path, key: dict[str, Any]) -> Remembered | None:
    """The choice recorded in ``cache_dir`` if it was made for exactly ``key``, else None."""
    entry = _entry(cache_dir)
    if entry is None or entry.get("key") != key or entry.get("chosen") not in key["candidates"]:
        return None
    chosen = str(entry["chosen"])
    names = list(key["candidates"])
    figures = entry.get("predicted_ms")
    figures = figures if isinstance(figures, dict) else {}
    before = {n: float(figures[n]) for n in names[: names.index(chosen)] if isinstance(figures.get(n), int | float)}
    return Remembered(chosen, str(entry.get("measured_at", entry.get("time", ""))), before)


def last_choice(cache_dir: Path) -> str:
    """The line and date of the last ``auto`` choice recorded in ``cache_dir`` ("" if none)."""
    entry = _entry(cache_dir)
    try:
        return f"{entry['line']} [{entry['time']}]" if entry else ""
    except (KeyError, TypeError):
        return ""
