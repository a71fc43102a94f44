"""Settling the models at start-up: ``profile = "auto"`` chosen by measurement on this machine,
and a profile's preferred models falling back to installed ones.

``auto`` (the default) picks among the CPU profiles (:data:`voiceagent.config.profiles.AUTO_ORDER`,
most accurate first) whose models are installed.  Each candidate is loaded and warmed as it
would be to serve, and its turn's critical-path work measured (the start-up measurement the
capacity uses, :func:`voiceagent.backends.registry.warm_up`).  The first whose predicted end of
speech → first audio (:func:`predicted_ms`) fits ``server.turn_budget_ms`` is kept, engines and
all; the others are closed.  The last candidate (the quickest) is kept whatever it measures, so
a slow machine still starts.  With one candidate installed nothing is measured for the choice.

``auto`` stands aside when the user names the models or the engine themselves (:data:`OWN_KEYS`):
their settings on the defaults are what starts, as without a profile.

A profile with preferred models (:data:`voiceagent.config.profiles.PREFERRED`, the ``gpu`` profile's
real-size Whisper and LLM) uses the first one that is installed or in the Hugging Face cache,
unless the user set that key; each model passed over is one line naming the command that
fetches it.  Nothing here downloads.

The last choice is written to ``<cache_dir>/profile_auto.json`` (unless its measurement was taken
on a busy machine, :attr:`voiceagent.capacity.TurnCost.contended`), which ``voiceagent models``
shows, with the machine, software, candidates and budget it was measured for
(:mod:`voiceagent.backends.auto_record`).  While those are the same, the next start begins at
that choice: the more accurate profiles it passed over are not loaded and timed again (a start
of ``quality`` then ``fast`` becomes one of ``fast``); ``server.auto_remeasure`` measures them
all again.  Everything here blocks (loading models): call it from a worker thread.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from voiceagent.backends import auto_record
from voiceagent.backends.auto_record import last_choice
from voiceagent.backends.registry import Engines, load_engines, warm_up
from voiceagent.capacity import TurnCost
from voiceagent.config import Config
from voiceagent.config.profiles import AUTO_ORDER, PREFERRED
from voiceagent.contention import startup_lock
from voiceagent.errors import VoiceAgentError
from voiceagent.models import catalog
from voiceagent.models.source import origin_of, pull_command, resolve, snapshot_dir

__all__ = ["OWN_KEYS", "Plan", "Started", "last_choice", "missing_model", "plan", "predicted_ms", "settle", "start"]

log = logging.getLogger(__name__)

OWN_KEYS = ("stt.model", "llm.model", "llm.backend", "stt.device", "llm.quant", "stt.beam_size")
"""Settings that make a configuration the user's own choice of models: ``auto`` leaves it alone."""


@dataclass(frozen=True)
class Plan:
    """What start-up will try, in order (one configuration unless the profile is ``auto``), and
    the lines to tell the user about how it was settled (fallbacks, profiles not installed)."""

    candidates: tuple[tuple[str, Config], ...]
    notes: tuple[str, ...] = ()

    @property
    def config(self) -> Config:
        """The first candidate: what a client of a remote server, or a listing, reads."""
        return self.candidates[0][1]


@dataclass(frozen=True)
class Started:
    """Engines loaded and warmed for ``config``; ``choice`` is the one line saying which profile
    ``auto`` chose and why ("" when there was nothing to choose)."""

    config: Config
    engines: Engines
    warm: dict[str, float]
    choice: str = ""


def predicted_ms(config: Config, cost: TurnCost) -> float:
    """End of speech → first audio of one turn on an idle machine: the VAD's stop wait, then the
    turn's critical-path work (transcript, turn check, first clause, its first audio)."""
    return config.vad.stop_ms + cost.work_s * 1000.0


def _replace(config: Config, dotted: str, value: str) -> Config:
    section, key = dotted.split(".")
    return dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section), **{key: value})})


def missing_model(config: Config, dotted: str, value: str) -> str:
    """Why model ``value`` for setting ``dotted`` cannot be used here ("" when it can)."""
    kind = dotted.split(".")[0]
    try:
        origin = origin_of(kind, value)
        if origin == "catalog":
            catalog.require_installed([f"{kind}.{value}"])
        elif kind == "llm" and config.llm.backend == "vllm":
            # vLLM reads a Hugging Face folder: a hub id must be cached whole (config.json in it).
            snap = snapshot_dir(value) if origin == "hub" else None
            if origin == "hub" and (snap is None or not (snap / "config.json").is_file()):
                return f"{value} is not in the Hugging Face cache; fetch it with: {pull_command(value)}"
        else:
            resolve(kind, value, config.cache_path, dotted)
    except VoiceAgentError as exc:
        return exc.message
    return ""


def settle(config: Config, given: frozenset[str], missing: Callable[[Config, str, str], str] = missing_model) -> tuple[Config, list[str]]:
    """``config`` with each preferred model of its profile that is not there replaced by the next
    that is (keys the user set are left as they are); returns it and a line per model passed over."""
    notes: list[str] = []
    for dotted, choices in PREFERRED.get(config.profile, {}).items():
        if dotted in given:
            continue
        section, key = dotted.split(".")
        if getattr(getattr(config, section), key) != choices[0]:
            continue
        for i, value in enumerate(choices):
            why = missing(config, dotted, value) if i < len(choices) - 1 else ""
            if not why:
                if i:
                    config = _replace(config, dotted, value)
                break
            notes.append(f"profile {config.profile}: {dotted} {value} not used ({why}); trying {choices[i + 1]}")
    return config, notes


def plan(config: Config, given: frozenset[str], load: Callable[[str], Config], check: Callable[[Config], None]) -> Plan:
    """What to start for ``config``: for ``auto``, each CPU profile whose models are installed
    (``load(name)``: the configuration with that profile, the user's settings on top), most
    accurate first; otherwise ``config`` with its preferred models settled.  ``check`` raises a
    :class:`VoiceAgentError` for a configuration whose models are missing or wrong: for a lone
    configuration that is the error start-up stops with, and for ``auto`` it leaves a profile
    out (the error of the last is raised when none is left)."""
    if config.profile != "auto":
        config, notes = settle(config, given)
        check(config)
        return Plan((("", config),), tuple(notes))
    own = [k for k in OWN_KEYS if k in given]
    if own:
        check(config)
        return Plan((("", config),), (f"profile auto: none applied, as you set {', '.join(own)} (the defaults under your settings)",))
    found: list[tuple[str, Config]] = []
    left: list[str] = []
    error: VoiceAgentError | None = None
    for name in AUTO_ORDER:
        candidate = load(name)
        try:
            check(candidate)
        except VoiceAgentError as exc:
            error = exc
            left.append(f"{name} ({exc.message})")
            continue
        found.append((name, candidate))
    if not found:
        assert error is not None
        raise error
    return Plan(tuple(found), (f"profile auto: not installed: {'; '.join(left)}",) if left else ())


def start(
    plan: Plan,
    budget_ms: float | None = None,
    cache_dir: Path | None = None,
    load: Callable[[Config], Engines] | None = None,
    warm_up_engines: Callable[[Engines, Config], dict[str, float]] | None = None,
    before_warm_up: Callable[[Config, Engines], None] | None = None,
    remeasure: bool | None = None,
) -> Started:
    """Load and warm the plan's first candidate that fits (blocking; see the module docstring).
    ``budget_ms`` defaults to the candidate's ``server.turn_budget_ms``; the choice is recorded
    in ``cache_dir`` (default: the configuration's) when there was one to make.  A choice recorded
    there for the same machine, software, candidates and budget (:mod:`.auto_record`) is where
    the next start begins: the more accurate candidates it passed over are not loaded again,
    unless ``remeasure`` (default: ``server.auto_remeasure``).  ``load`` and ``warm_up_engines``
    default to the registry's (a test seam).  ``before_warm_up`` checks each candidate's loaded
    engines before they are warmed (the server's instructions against the LLM's window: priming
    would overflow it).  Engines passed over are closed; an error while checking or warming one
    closes it and propagates."""
    load = load or load_engines
    warm_up_engines = warm_up_engines or warm_up
    first = plan.config
    budget = float(budget_ms if budget_ms is not None else first.server.turn_budget_ms)
    cache = cache_dir or first.cache_path
    key = auto_record.fingerprint(plan.candidates, budget) if plan.candidates[0][0] else {}
    candidates = plan.candidates
    kept = None
    if key and len(candidates) > 1 and not (first.server.auto_remeasure if remeasure is None else remeasure):
        kept = auto_record.remembered(cache, key)
        if kept is not None:
            names = [n for n, _ in candidates]
            candidates = candidates[names.index(kept.chosen) :]
    measured: dict[str, float] = {}
    for i, (name, config) in enumerate(candidates):
        with startup_lock(config.startup_lock_path, shared=True):  # many load at once; none while one measures
            engines = load(config)
        try:
            if before_warm_up is not None:
                before_warm_up(config, engines)
            warm = warm_up_engines(engines, config)
        except BaseException:
            engines.close()
            raise
        if not name:  # not auto: nothing to choose
            return Started(config, engines, warm)
        cost = engines.turn_cost
        measured[name] = round(predicted_ms(config, cost), 1) if cost is not None else 0.0
        last = i == len(candidates) - 1
        if measured[name] <= budget or last:
            line = _choice_line(name, measured, budget, [n for n, _ in plan.candidates], kept)
            if cost is not None and cost.contended:
                # A busy machine measures every candidate slow: the choice stands for this start
                # only, and the next start on a quiet machine measures again rather than begin here.
                line += f"; measured while the machine was busy ({100 * cost.contention:.0f} % waiting for a core), not recorded"
            else:
                auto_record.record(cache, name, line, measured, budget, key, kept)
            return Started(config, engines, warm, line)
        log.info("profile auto: %s predicted %.0f ms, over the %.0f ms budget; trying the next", name, measured[name], budget)
        engines.close()
    raise AssertionError("a plan has at least one candidate")  # pragma: no cover


def _choice_line(
    name: str, measured: dict[str, float], budget: float, installed: Sequence[str], kept: auto_record.Remembered | None
) -> str:
    figures = ", ".join(f"{n} {ms:.0f} ms" for n, ms in measured.items())
    if measured[name] <= budget:
        why = f"the most accurate installed profile within server.turn_budget_ms {budget:.0f} ms"
        if len(installed) == 1:
            why = "the only installed profile"
    else:
        why = f"none fits server.turn_budget_ms {budget:.0f} ms: the quickest installed"
    skipped = installed[: installed.index(next(iter(measured)))]
    if kept is not None and skipped:
        # Said plainly: a user who changed nothing but expects a re-measure knows how to ask.
        then = ", ".join(f"{n} {kept.predicted_ms[n]:.0f} ms" if n in kept.predicted_ms else n for n in skipped)
        again = "server.auto_remeasure=true measures them again"
        why += f"; not measured at this start: {then}, over the budget on this machine at {kept.measured_at} ({again})"
    return f"profile auto: {name}, {why} (predicted end of speech to first audio on this machine: {figures})"
