#!/usr/bin/env python3
"""Speech over the agent's reply, measured in both interruption modes in one run.

The set is ``benchmarks/interruptions.toml``: backchannels in several voices, coughs and short
noises, a quieter second voice, and real interruptions, each said over a spoken story at one of
several points.  Every case runs twice, on two servers in this process that share one set of
models (the real packaged default, real loopback WebSocket): ``turn.interruption = immediate``
(cut once ``vad.barge_in_ms`` of voice is heard) and ``words`` (pause, then the words decide);
the order alternates from case to case.

The client is a listener: it plays each audio delta as it arrives, after the one before (so it
holds what the server paced ahead), and stops playing at ``input_audio_buffer.speech_started``
or ``output_audio_buffer.cleared``, as OpenAI's clients do.  Per case and mode:

* ``lost`` (backchannel, noise, background): the reply was cancelled;
* ``honoured`` (interruption): the reply was cancelled for ``turn_detected``;
* ``stop_ms`` (interruption): from the first voiced sample of the interruption to the moment the
  listener's audio stopped (its buffer ran dry, or it was told to stop, whichever came first);
* ``said_again`` (cases with ``again_s``): the reply went on after the clip, so the listener said
  it again ``again_s`` after hearing it go on; ``stop_ms`` then counts from the second saying;
* ``latency_ms``: from the end of the question's speech to the reply's first audio (the ordinary
  turn before the case, for the single-conversation latency of each mode).

JSON on stdout and in ``--out`` (stable keys: ``modes.MODE.{false_interruptions.{cases, lost,
share, by_kind}, interruptions.{cases, honoured, stop_ms.{p50, p95}}, latency_ms.{p50, p95},
groups.GROUP.{the same, of one group of cases: dev, held-out-1, held-out-2}}``,
``latency_ratio`` (the first mode's p50 / the last's: immediate / words by default), ``cases``).
``--modes`` picks the servers compared (:data:`MODES`; ``words-unread,words`` measures the second
reading of speech over the agent in backchannels and sounds against the same rules without it).

Usage: .venv/bin/python -m benchmarks.interruptions [--out FILE] [--only KIND] [--limit N]
                                                       [--modes immediate,words] [--set section.key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scripts import make_fixtures
from voiceagent.audio import Int16Array, read_wav, resample
from voiceagent.backends.registry import load_engines, warm_up
from voiceagent.config import load_config
from voiceagent.replay import speech_turns
from voiceagent.transports.server import VoiceAgentServer

ROOT = Path(__file__).resolve().parent.parent
SET = Path(__file__).with_name("interruptions.toml")
CACHE = ROOT / ".cache" / "interruptions"
RATE = 24000  # the session's default input and output rate
MODES = {
    "immediate": {"turn.interruption": "immediate"},
    "words": {"turn.interruption": "words"},
    "words-unread": {"turn.interruption": "words", "turn.interruption_sound_margin": "-1"},
    "words-unheard": {"turn.interruption": "words", "turn.sound_model": "none"},
}
"""The servers a run can compare (``--modes``): today's default (``words``), the cut at
``vad.barge_in_ms`` (``immediate``), ``words`` without the second reading in backchannels
and sounds (``words-unread``), and ``words`` without the sound model (``words-unheard``)."""
FRAME_S = 0.02
FALSE_KINDS = ("backchannel", "noise", "background")
STOPS = ("input_audio_buffer.speech_started", "output_audio_buffer.cleared")  # a listener stops its playback at these
AFTER_S = 3.0  # listened after the case, for a resume or a cut
STORY = "You are a storyteller. Always answer with a long story of at least six sentences."


@dataclass
class Case:
    kind: str
    name: str
    pcm: Int16Array  # 24 kHz
    onset_s: float  # the first voiced sample in the clip
    point_s: float
    spec: dict[str, Any]
    group: str = "dev"


class Judged(logging.Handler):
    """The conversation's log lines about speech over a reply (what it heard, with the level and
    the transcriber's confidence, and why it was no interruption), for each case's record."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage().split(": ", 1)[-1])

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


JUDGED = Judged()


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    return {"p50": round(float(np.percentile(values, 50)), 1), "p95": round(float(np.percentile(values, 95)), 1)}


def _speech(text: str, voice: str) -> Path:
    engine = "piper" if voice == "piper" else "espeak"
    name = "".join(c if c.isalnum() else "_" for c in f"{voice}_{text}")[:60]
    spec = make_fixtures.Fixture(name, (text,), voice="en-us" if engine == "piper" else voice, lead_s=0.1, tail_s=0.1, engine=engine)
    return make_fixtures.make(spec, CACHE)


def _noise(name: str, args: list[str]) -> Path:
    out = CACHE / f"noise_{name}.wav"
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", str(out), *args], check=True)
    return out


def _load(path: Path, gain_db: float = 0.0) -> Int16Array:
    pcm, rate = read_wav(path)
    out = resample(pcm, rate, RATE).astype(np.float64) * 10 ** (gain_db / 20)
    return np.clip(out, -32768, 32767).astype(np.int16)


def _onset(pcm: Int16Array) -> float:
    turns = speech_turns(pcm, RATE, turn_gap_s=0.05, floor_dbfs=-50.0)
    return turns[0][0] if turns else 0.0


def load_set(only: str | None, limit: int | None, group: str | None = None) -> tuple[Int16Array, float, list[Case]]:
    spec = tomllib.loads(SET.read_text())
    question = _load(_speech(spec["question"], spec["question_voice"]))
    turns = speech_turns(question, RATE, turn_gap_s=1.0)
    q_end = turns[-1][1] if turns else len(question) / RATE
    cases: list[Case] = []
    for i, c in enumerate(spec["case"]):
        if (only and c["kind"] != only) or (group and c.get("group", "dev") != group):
            continue
        path = _noise(c["name"], c["sox"]) if "sox" in c else _speech(c["text"], c["voice"])
        pcm = _load(path, c.get("gain_db", 0.0))
        gain = f", {c['gain_db']:+.0f} dB" if "gain_db" in c else ""
        name = c.get("name") or f"{c['text']} ({c['voice']}{gain})" + (", again" if "again_s" in c else "")
        point = spec["points_s"][i % len(spec["points_s"])]
        cases.append(Case(c["kind"], name, pcm, _onset(pcm), point, c, c.get("group", "dev")))
    return question, q_end, cases[:limit]


@dataclass
class Listener:
    """One connection: a microphone paced in real time, and a listener's playback of the reply."""

    ws: Any
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    queue: list[Int16Array] = field(default_factory=list)
    play_end: float = 0.0
    heard_s: float = 0.0  # reply audio the listener has started playing, as of play_end
    stopped_at: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def mic(self) -> None:
        step = int(RATE * FRAME_S)
        silence = np.zeros(step, dtype=np.int16)
        next_t = time.monotonic()
        pending = np.zeros(0, dtype=np.int16)
        while True:
            if not len(pending) and self.queue:
                pending = self.queue.pop(0)
            frame, pending = (pending[:step], pending[step:]) if len(pending) else (silence, pending)
            if len(frame) < step:
                frame = np.concatenate([frame, silence[: step - len(frame)]])
            msg = {"type": "input_audio_buffer.append", "audio": base64.b64encode(frame.astype("<i2").tobytes()).decode()}
            await self.ws.send(json.dumps(msg))
            next_t += FRAME_S
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))

    async def read(self) -> None:
        async for raw in self.ws:
            now = time.monotonic()
            ev = json.loads(raw)
            self.events.append((now, ev))
            kind = ev.get("type")
            if kind == "response.output_audio.delta" and self.stopped_at is None:
                dur = len(base64.b64decode(ev["delta"])) / 2 / RATE
                self.play_end = max(now, self.play_end) + dur
                self.heard_s += dur
            elif kind in STOPS and self.play_end > 0 and self.stopped_at is None:
                self.stopped_at = min(now, self.play_end)
            self.changed.set()

    def heard(self, now: float) -> float:
        """Seconds of reply the listener has heard by ``now``."""
        return self.heard_s - max(0.0, self.play_end - now)

    async def until(self, pred: Any, within_s: float) -> bool:
        end = time.monotonic() + within_s
        while not pred():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.05))
        return True

    def first(self, kind: str, after: float = 0.0) -> tuple[float, dict[str, Any]] | None:
        return next(((t, e) for t, e in self.events if e.get("type") == kind and t >= after), None)


async def run_case(url: str, question: Int16Array, q_end_s: float, case: Case) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:
        lis = Listener(ws)
        reader = asyncio.create_task(lis.read())
        await lis.until(lambda: lis.first("session.created") is not None, 10)
        mic = asyncio.create_task(lis.mic())
        try:
            t_q = time.monotonic()
            lis.queue.append(question)
            out: dict[str, Any] = {"kind": case.kind, "case": case.name, "point_s": case.point_s, "group": case.group}
            if not await lis.until(lambda: lis.first("response.output_audio.delta") is not None, 30):
                return {**out, "error": "no reply audio"}
            first = lis.first("response.output_audio.delta")
            assert first is not None
            out["latency_ms"] = round((first[0] - (t_q + q_end_s)) * 1000, 1)
            rid = first[1]["response_id"]
            done = lambda: any(e.get("type") == "response.done" for _t, e in lis.events)  # noqa: E731
            await lis.until(lambda: lis.heard(time.monotonic()) >= case.point_s or done(), 60)
            if done():
                return {**out, "error": "the reply ended before the case"}
            t0 = time.monotonic()
            lis.queue.append(case.pcm)
            onset = t0 + case.onset_s
            clip_s = len(case.pcm) / RATE
            again_s = case.spec.get("again_s")
            if again_s is not None:  # the listener hears the reply go on, and says it again
                went_on = lambda: lis.first("response.output_audio.delta", after=t0 + clip_s) is not None  # noqa: E731
                await lis.until(lambda: done() or went_on(), clip_s + AFTER_S)
                if not done():
                    await lis.until(lambda: done(), float(again_s))  # the listener's reaction
                if not done():
                    t0 = time.monotonic()
                    lis.queue.append(case.pcm)
                    onset = t0 + case.onset_s
                    out["said_again"] = True
            await lis.until(lambda: done(), clip_s + AFTER_S)
            ends = [e for _t, e in lis.events if e.get("type") == "response.done" and e["response"]["id"] == rid]
            status = ends[0]["response"]["status"] if ends else "in_progress"
            reason = (ends[0]["response"].get("status_details") or {}).get("reason") if ends else None
            cancelled = status == "cancelled"
            resumed = any(
                e.get("type") == "response.output_audio.delta" and e.get("response_id") == rid and t > t0 + clip_s for t, e in lis.events
            )
            heard = [e.get("transcript", "") for t, e in lis.events if t >= t0 and e.get("type", "").endswith("transcription.completed")]
            out.update(status=status, reason=reason, resumed_audio=resumed, transcripts=heard)
            if case.kind in FALSE_KINDS:
                out["lost"] = cancelled
            else:
                out["honoured"] = cancelled and reason == "turn_detected"
                if cancelled:
                    stop = lis.stopped_at if lis.stopped_at is not None else lis.play_end
                    out["stop_ms"] = round((stop - onset) * 1000, 1)
            return out
        finally:
            mic.cancel()
            reader.cancel()
            await asyncio.gather(mic, reader, return_exceptions=True)


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if "error" not in r]
    false = [r for r in ok if r["kind"] in FALSE_KINDS]
    real = [r for r in ok if r["kind"] == "interruption"]
    lost = [r for r in false if r["lost"]]
    return {
        "false_interruptions": {
            "cases": len(false),
            "lost": len(lost),
            "share": round(len(lost) / len(false), 3) if false else None,
            "by_kind": {k: f"{sum(r['lost'] for r in false if r['kind'] == k)}/{sum(r['kind'] == k for r in false)}" for k in FALSE_KINDS},
            "lost_cases": [r["case"] for r in lost],
        },
        "interruptions": {
            "cases": len(real),
            "honoured": sum(r["honoured"] for r in real),
            "stop_ms": percentiles([r["stop_ms"] for r in real if "stop_ms" in r]),
            "missed_cases": [r["case"] for r in real if not r["honoured"]],
        },
        "latency_ms": percentiles([r["latency_ms"] for r in ok if "latency_ms" in r]),
        "errors": [f"{r['case']}: {r['error']}" for r in results if "error" in r],
    }


async def measure(args: argparse.Namespace, overrides: dict[str, str]) -> dict[str, Any]:
    question, q_end, cases = load_set(args.only, args.limit, args.group)
    # The conversation's package: the verdicts are logged by its interruption module since the
    # core was split (#47), the pause and resume by the core.
    conversation_log = logging.getLogger("voiceagent.conversation")
    conversation_log.addHandler(JUDGED)
    conversation_log.setLevel(logging.INFO)
    # One case at a time on each server, under a fixed cap: the bench judges verdicts, and its
    # cases must not depend on admission by load.
    base = {"server.port": "0", "server.max_sessions": "2", "llm.instructions": STORY, "llm.max_tokens": "80", **overrides}
    chosen = [m.strip() for m in args.modes.split(",") if m.strip()]
    configs = {mode: load_config(overrides={**base, **MODES[mode]}) for mode in chosen}
    engines = await asyncio.to_thread(load_engines, configs[chosen[-1]])
    await asyncio.to_thread(warm_up, engines, configs[chosen[-1]])
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in chosen}
    servers = {mode: VoiceAgentServer(cfg, engines) for mode, cfg in configs.items()}
    for server in servers.values():
        await server.start()
    try:
        for i, case in enumerate(cases):
            order = chosen if i % 2 == 0 else chosen[::-1]
            for mode in order:
                JUDGED.take()
                r = await run_case(servers[mode].url, question, q_end, case)
                r["judged"] = JUDGED.take()
                results[mode].append(r)
                print(f"[{i + 1}/{len(cases)}] {mode:9s} {case.kind:12s} {case.name}: {json.dumps(r)}", file=sys.stderr)
    finally:
        for server in servers.values():
            await server.aclose()
        engines.close()
    groups = sorted({r["group"] for rs in results.values() for r in rs})
    modes = {}
    for mode, rs in results.items():
        modes[mode] = {**summarize(rs), "groups": {g: summarize([r for r in rs if r["group"] == g]) for g in groups}}
    p50 = {m: modes[m]["latency_ms"]["p50"] for m in modes}
    first, last = chosen[0], chosen[-1]
    ratio = round(p50[first] / p50[last], 3) if len(chosen) > 1 and p50[first] and p50[last] else None
    return {"set": str(SET.relative_to(ROOT)), "overrides": overrides, "modes": modes, "latency_ratio": ratio, "cases": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", choices=("backchannel", "noise", "background", "interruption"))
    parser.add_argument("--limit", type=int)
    parser.add_argument("--group", help="only the cases of this group (dev, held-out-1, ...)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--modes", default="immediate,words", help="comma-separated, of: " + ", ".join(MODES))
    args = parser.parse_args()
    unknown = [m for m in args.modes.split(",") if m.strip() and m.strip() not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}")
    overrides = dict(s.split("=", 1) for s in args.set)
    report = asyncio.run(measure(args, overrides))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
