"""Latency replay: stream WAV files to a server at real-time pace and time every answer.

Ground truth comes from the audio, not from the server: the file is cut into 10 ms frames and a
frame is *speech* when its RMS is above ``ENERGY_FLOOR_DBFS`` (−45 dBFS).  A user turn ends at the
end of its last speech frame; a gap of at least ``turn_gap_s`` (default 1.5 s) of non-speech
frames separates two turns (so a 300–400 ms pause mid-sentence does not).

``first_audio_s`` is when the first reply audio byte of the answer reached this client, on the
same clock as the audio it sent (seconds of input audio since the stream began, so at
``--speed 2`` it is still in the file's own timeline).  ``latency_ms`` is the wall time between
the moment the last speech sample of the turn was sent and that first reply byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from voiceagent.audio import Int16Array, read_wav, resample
from voiceagent.client import Pacer, RealtimeClient, SessionEvent, messages
from voiceagent.events import ErrorEvent, InputTranscriptDone
from voiceagent.transports.realtime_wire import WIRE_RATE

__all__ = [
    "ENERGY_FLOOR_DBFS",
    "ReplayResult",
    "ResponseSeen",
    "TurnResult",
    "replay_file",
    "replay_responses",
    "speech_turns",
    "summarize",
]

ENERGY_FLOOR_DBFS = -45.0
_FRAME_MS = 10
_WIRE_RATE = WIRE_RATE
_CHUNK_MS = 20


@dataclass
class TurnResult:
    file: str
    turn: int
    transcript: str
    reply: str
    speech_end_s: float
    first_audio_s: float | None
    latency_ms: float | None
    spans_ms: dict[str, float] = field(default_factory=dict)
    cutoffs: int = 0
    """Answers whose audio began while this turn was still being spoken (false cut-offs)."""
    llm_route: str | None = None
    """``ENGINE/REASON`` of the answer (the server's turn metrics; None: not told)."""
    playback_gap_ms: float = 0.0
    """Silence inside the answer's audio: chunks not ready when the one before them ended (the
    server's turn metrics)."""


@dataclass
class ReplayResult:
    turns: list[TurnResult]
    summary: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"turns": [asdict(t) for t in self.turns], "summary": self.summary}


def speech_turns(
    pcm: Int16Array, rate: int, *, turn_gap_s: float = 1.5, floor_dbfs: float = ENERGY_FLOOR_DBFS
) -> list[tuple[float, float]]:
    """(start_s, end_s) of each user turn, from frame energy (see the module docstring)."""
    n = rate * _FRAME_MS // 1000
    frames = len(pcm) // n
    if frames == 0:
        return []
    x = pcm[: frames * n].astype(np.float64).reshape(frames, n) / 32768.0
    rms = np.sqrt((x**2).mean(axis=1))
    with np.errstate(divide="ignore"):
        dbfs = 20 * np.log10(np.maximum(rms, 1e-10))
    speech = np.flatnonzero(dbfs > floor_dbfs)
    turns: list[tuple[float, float]] = []
    if len(speech) == 0:
        return turns
    gap_frames = int(turn_gap_s * 1000 / _FRAME_MS)
    start = prev = int(speech[0])
    for idx in speech[1:]:
        i = int(idx)
        if i - prev > gap_frames:
            turns.append((start * _FRAME_MS / 1000, (prev + 1) * _FRAME_MS / 1000))
            start = i
        prev = i
    turns.append((start * _FRAME_MS / 1000, (prev + 1) * _FRAME_MS / 1000))
    return turns


@dataclass
class _Response:
    id: str
    created_s: float
    first_audio_wall: float | None = None
    first_audio_s: float | None = None
    text: str = ""
    status: str = "in_progress"
    reason: str | None = None
    spans: dict[str, float] = field(default_factory=dict)
    llm_route: str | None = None
    playback_gap_ms: float = 0.0


class _Collector:
    """Server events of one replay, read by the client core and timed on the client's clock."""

    def __init__(self, client: RealtimeClient, t0: float, speed: float) -> None:
        self.t0 = t0
        self.speed = speed
        self.client = client
        self.transcripts: list[tuple[float, str]] = []
        self.errors: list[dict[str, Any]] = []

    def audio_s(self, wall: float) -> float:
        return (wall - self.t0) * self.speed

    def finished(self, turns: int) -> bool:
        done = [r.done for r in self.client.responses]
        return sum(done) >= turns and all(done)

    def handle(self, raw: str | bytes, now: float) -> None:
        for ev in self.client.feed(raw, now):
            if isinstance(ev, InputTranscriptDone):
                self.transcripts.append((self.audio_s(ev.t), ev.text))
            elif isinstance(ev, ErrorEvent):
                self.errors.append({"type": ev.kind, "code": ev.code, "message": ev.message, "param": ev.param, "event_id": ev.event_id})

    def responses(self) -> list[_Response]:
        """Every response, in the order they were created."""
        return [
            _Response(
                r.id,
                self.audio_s(r.created_at),
                first_audio_wall=r.first_audio_at,
                first_audio_s=None if r.first_audio_at is None else self.audio_s(r.first_audio_at),
                text=r.transcript,
                status=r.status,
                reason=r.reason,
                spans=r.spans,
                llm_route=r.llm_route,
                playback_gap_ms=r.playback_gap_ms,
            )
            for r in self.client.responses
        ]


@dataclass(frozen=True)
class ResponseSeen:
    """One response of a replay, whatever turn it answered: how it ended (``completed``,
    ``cancelled``, ``incomplete``, ``failed``) and why (``turn_detected``: cut by speech over it;
    ``max_output_tokens``…), and when it was first heard (seconds of the file's audio; None: never)."""

    status: str
    reason: str | None
    first_audio_s: float | None


def _prepare(
    path: str | Path, tail_s: float, turn_gap_s: float, truth: str | Path | None = None
) -> tuple[list[tuple[float, float]], Int16Array]:
    """(the speech turns of ``truth``, else of the file; the file's audio at the wire rate with
    ``tail_s`` of silence after)."""
    pcm, rate = read_wav(path)
    turns = speech_turns(read_wav(truth)[0] if truth is not None else pcm, rate, turn_gap_s=turn_gap_s)
    out = resample(pcm, rate, _WIRE_RATE)
    return turns, np.concatenate([out, np.zeros(int(tail_s * _WIRE_RATE), dtype=np.int16)])


async def replay_file(
    url: str,
    path: str | Path,
    *,
    speed: float = 1.0,
    tail_s: float = 2.5,
    timeout_s: float = 30.0,
    turn_gap_s: float = 1.5,
    session: Mapping[str, Any] | None = None,
) -> list[TurnResult]:
    """Stream one file over one connection and return one result per ground-truth turn.
    ``session``: more ``session.update`` fields sent before the audio (``instructions``, ``tools``…)."""
    turns, _ = await replay_responses(url, path, speed=speed, tail_s=tail_s, timeout_s=timeout_s, turn_gap_s=turn_gap_s, session=session)
    return turns


async def replay_responses(
    url: str,
    path: str | Path,
    *,
    speed: float = 1.0,
    tail_s: float = 2.5,
    timeout_s: float = 30.0,
    turn_gap_s: float = 1.5,
    session: Mapping[str, Any] | None = None,
    truth: str | Path | None = None,
) -> tuple[list[TurnResult], list[ResponseSeen]]:
    """:func:`replay_file`, and every response the server made, answers to no turn included.
    ``truth``: a file of the same length whose speech gives the turns (the clean recording a
    noisy one was mixed from, whose own energy would find turns in its noise)."""
    # Reading, segmenting and resampling a long file takes seconds of CPU: off the event loop, so
    # that other replays' opening handshakes on the same loop are not starved past their timeout
    # (8 soak clients with 50-minute files lost 1-3 connections that way).
    turns, out = await asyncio.to_thread(_prepare, path, tail_s, turn_gap_s, truth)
    sep = "&" if "?" in url else "?"
    async with connect(f"{url}{sep}voiceagent_metrics=1", max_size=None) as ws:
        client = RealtimeClient()
        first = client.feed(await ws.recv(), time.monotonic())[-1]
        if not (isinstance(first, SessionEvent) and first.type == "session.created"):
            raise RuntimeError(f"expected session.created, got {getattr(first, 'type', None) or type(first).__name__}")
        await ws.send(json.dumps(messages.session_update(output_format=None, **(session or {}))))
        t0 = time.monotonic()
        col = _Collector(client, t0, speed)

        finished = asyncio.Event()

        async def reader() -> None:
            async for raw in ws:
                col.handle(raw, time.monotonic())
                if col.finished(len(turns)):
                    finished.set()

        async def send(chunk: Int16Array) -> None:
            await ws.send(json.dumps(messages.append_audio(chunk)))

        read_task = asyncio.create_task(reader())
        try:
            # Pacing like a microphone: each chunk leaves when its audio would have been spoken.
            await Pacer(send, chunk_ms=_CHUNK_MS, speed=speed, start=t0).play(out)
            with contextlib.suppress(TimeoutError):  # unanswered turns are reported as such
                await asyncio.wait_for(finished.wait(), timeout_s)
        finally:
            read_task.cancel()
            await asyncio.gather(read_task, return_exceptions=True)
    if col.errors:
        raise RuntimeError(f"server reported errors: {col.errors}")
    responses = col.responses()
    seen = [ResponseSeen(r.status, r.reason, None if r.first_audio_s is None else round(r.first_audio_s, 3)) for r in responses]
    return _match(str(path), turns, responses, col.transcripts, t0, speed), seen


def _match(
    name: str, turns: list[tuple[float, float]], responses: list[_Response], transcripts: list[tuple[float, str]], t0: float, speed: float
) -> list[TurnResult]:
    out: list[TurnResult] = []
    for k, (start, end) in enumerate(turns):
        nxt = turns[k + 1][0] if k + 1 < len(turns) else float("inf")
        # The answer to turn k: the first response heard after the turn began and before the next.
        cands = [r for r in responses if r.first_audio_s is not None and end < r.first_audio_s < nxt + 0.5 and r.status != "cancelled"]
        cands = cands or [r for r in responses if r.first_audio_s is not None and end < r.first_audio_s < nxt + 0.5]
        resp = cands[0] if cands else None
        heard_by = resp.created_s if resp is not None else nxt
        words = [text for ts, text in transcripts if start < ts <= heard_by + 0.05]
        cutoffs = sum(1 for r in responses if r.first_audio_s is not None and start < r.first_audio_s < end)
        latency = None
        if resp is not None and resp.first_audio_wall is not None:
            latency = round((resp.first_audio_wall - (t0 + end / speed)) * 1000.0, 1)
        out.append(
            TurnResult(
                file=name,
                turn=k,
                transcript=" ".join(words).strip(),
                reply=resp.text.strip() if resp else "",
                speech_end_s=round(end, 3),
                first_audio_s=round(resp.first_audio_s, 3) if resp and resp.first_audio_s is not None else None,
                latency_ms=latency,
                spans_ms=resp.spans if resp else {},
                llm_route=resp.llm_route if resp else None,
                playback_gap_ms=resp.playback_gap_ms if resp else 0.0,
                cutoffs=cutoffs,
            )
        )
    return out


def summarize(turns: list[TurnResult]) -> dict[str, Any]:
    lat = np.array([t.latency_ms for t in turns if t.latency_ms is not None], dtype=np.float64)
    summary: dict[str, Any] = {"turns": len(turns), "answered": len(lat)}
    if len(lat):
        summary.update(
            p50_ms=round(float(np.percentile(lat, 50)), 1),
            p95_ms=round(float(np.percentile(lat, 95)), 1),
            min_ms=round(float(lat.min()), 1),
            max_ms=round(float(lat.max()), 1),
        )
    else:
        summary.update(p50_ms=None, p95_ms=None)
    return summary


def format_table(result: ReplayResult) -> str:
    rows = [("file", "turn", "speech_end_s", "first_audio_s", "latency_ms", "transcript", "reply")]
    for t in result.turns:
        rows.append(
            (
                Path(t.file).name,
                str(t.turn),
                f"{t.speech_end_s:.2f}",
                "-" if t.first_audio_s is None else f"{t.first_audio_s:.2f}",
                "-" if t.latency_ms is None else f"{t.latency_ms:.0f}",
                _clip(t.transcript, 40),
                _clip(t.reply, 50),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    s = result.summary
    lines.append(f"turns {s['turns']}  answered {s['answered']}  p50 {s.get('p50_ms')} ms  p95 {s.get('p95_ms')} ms")
    return "\n".join(lines)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
