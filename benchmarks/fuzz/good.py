"""The good session and the prober: spoken-question fixtures at real-time pace, each turn checked
and timed, and ``/healthz`` polled, on an event loop of their own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from benchmarks.fuzz import ROOT
from benchmarks.fuzz.frames import close_code
from scripts import make_fixtures
from voiceagent.audio import Int16Array, read_wav, resample
from voiceagent.client import MalformedEvent, RealtimeClient, ResponseStarted, messages
from voiceagent.client import Pacer as AudioPacer
from voiceagent.events import AudioDelta, ErrorEvent, Event, InputTranscriptDone, ResponseDone
from voiceagent.replay import speech_turns
from voiceagent.transports.realtime_wire import WIRE_RATE

CHUNK_MS = 20
# Questions whose transcripts Whisper tiny gets right (as tests/integration/test_concurrency.py).
GOOD_QUESTIONS = ("weather", "colour", "long_question", "count")
GOOD_INSTRUCTIONS = "You are a helpful voice assistant. Answer in one short sentence."


@dataclass
class Question:
    name: str
    pcm: Int16Array  # 24 kHz, with a tail of silence
    speech_end_s: float
    keywords: tuple[str, ...]


def questions() -> list[Question]:
    paths = make_fixtures.make_all(ROOT / ".cache" / "fixtures")
    out = []
    for name in GOOD_QUESTIONS:
        pcm, rate = read_wav(paths[name])
        wire = resample(pcm, rate, WIRE_RATE)
        end_s = speech_turns(wire, WIRE_RATE)[-1][1]
        out.append(Question(name, wire, end_s, make_fixtures.FIXTURES[name].keywords[0]))
    return out


@dataclass
class Turn:
    phase: str
    question: str
    ok: bool
    transcript: str
    latency_ms: float | None
    status: str
    errors: list[str]
    reply: str = ""


def percentiles(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    arr = np.array(values, dtype=np.float64)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(arr, 50)), 1),
        "p95": round(float(np.percentile(arr, 95)), 1),
        "max": round(float(arr.max()), 1),
    }


_E = TypeVar("_E", bound=Event)


class GoodSession:
    """One well-behaved Realtime session: a microphone that never stops (questions, then silence
    until the answer is done), and a ``/healthz`` prober, on an event loop of their own."""

    def __init__(self, base: str, qs: list[Question]) -> None:
        self.base = base.rstrip("/")
        parts = urlsplit(self.base)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.qs = qs
        self.turns: list[Turn] = []
        self.health: dict[str, list[float]] = {"baseline": [], "load": []}
        self.health_failures: Counter[str] = Counter()
        self.phase = "baseline"
        self.close_code: int | None = None
        self.failure: str | None = None
        self.baseline_done = threading.Event()  # set: the hostile clients start
        self.go_on = threading.Event()  # set while turns under load are still to come
        self.go_on.set()
        self.target_reached = threading.Event()  # set by the hostile clients
        self.hostile_done = threading.Event()

    def run(self, baseline_turns: int, min_turns: int) -> None:
        asyncio.run(self._main(baseline_turns, min_turns))

    async def _main(self, baseline_turns: int, min_turns: int) -> None:
        stop = asyncio.Event()
        prober = asyncio.create_task(self._probe(stop))
        try:
            await self._converse(baseline_turns, min_turns)
        except (OSError, InvalidHandshake, ConnectionClosed, TimeoutError) as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.go_on.clear()
            self.baseline_done.set()
            if not self.hostile_done.is_set():
                await asyncio.to_thread(self.hostile_done.wait)
            stop.set()
            await prober

    async def _probe(self, stop: asyncio.Event) -> None:
        request = f"GET /healthz HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nConnection: close\r\n\r\n".encode()
        while not stop.is_set():
            phase = self.phase
            t0 = time.monotonic()
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 30)
                writer.write(request)
                answer = await asyncio.wait_for(reader.read(), 30)
                writer.close()
                if not answer.startswith(b"HTTP/1.1 200"):
                    self.health_failures[answer[:12].decode("latin-1") or "empty"] += 1
                else:
                    self.health[phase].append((time.monotonic() - t0) * 1000)
            except (OSError, TimeoutError) as exc:
                self.health_failures[type(exc).__name__] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, 0.1 - (time.monotonic() - t0)))  # the probe period

    async def _converse(self, baseline_turns: int, min_turns: int) -> None:
        async with connect(f"{self.base}/v1/realtime", max_size=None, open_timeout=60) as ws:
            client = RealtimeClient()
            events: list[Event] = []  # the client core's, each stamped with its arrival
            arrived = asyncio.Event()

            async def pump() -> None:
                with contextlib.suppress(ConnectionClosed):
                    async for raw in ws:
                        events.extend(client.feed(raw, time.monotonic()))
                        arrived.set()
                arrived.set()

            reader = asyncio.create_task(pump())
            update = messages.session_update(input_format=None, output_format=None, instructions=GOOD_INSTRUCTIONS, max_output_tokens=60)
            await ws.send(json.dumps(update))
            mic = _Mic(ws)
            k = 0
            load_turns = 0
            while True:
                if self.phase == "baseline" and k >= baseline_turns:
                    self.phase = "load"
                    self.baseline_done.set()
                if self.phase == "load" and self.target_reached.is_set() and load_turns >= min_turns:
                    break
                q = self.qs[k % len(self.qs)]
                k += 1
                turn = await self._turn(ws, mic, q, events, arrived, reader)
                self.turns.append(turn)
                if self.phase == "load":
                    load_turns += 1
                if reader.done():
                    break
            await ws.close()
            await reader
            self.close_code = close_code(ws)

    async def _turn(
        self,
        ws: ClientConnection,
        mic: _Mic,
        q: Question,
        events: list[Event],
        arrived: asyncio.Event,
        reader: asyncio.Task[None],
    ) -> Turn:
        phase = self.phase
        mark = len(events)
        speech_end_wall = await mic.say(q.pcm, q.speech_end_s)

        def find(kind: type[_E]) -> _E | None:
            return next((e for e in events[mark:] if isinstance(e, kind)), None)

        # The microphone goes on (silence) until the answer is done.
        deadline = time.monotonic() + 60
        while find(ResponseDone) is None and not reader.done() and time.monotonic() < deadline:
            await mic.silence(0.1)
        await mic.silence(0.4)
        heard_event = find(InputTranscriptDone)
        transcript = heard_event.text if heard_event is not None else ""
        created = find(ResponseStarted)
        done = find(ResponseDone)
        rid = created.response_id if created else None
        first_audio = next((e.t for e in events[mark:] if isinstance(e, AudioDelta) and e.response_id == rid), None)
        errors = [e.code for e in events[mark:] if isinstance(e, ErrorEvent)]
        errors += [f"unreadable {e.type}: {e.problem}" for e in events[mark:] if isinstance(e, MalformedEvent)]
        status = done.status.value if done else "none"
        reply = done.text if done else ""
        heard = transcript.lower()
        ok = all(w in heard for w in q.keywords) and status == "completed" and first_audio is not None and not errors
        latency = round((first_audio - speech_end_wall) * 1000, 1) if first_audio is not None else None
        return Turn(phase, q.name, ok, transcript, latency, status, errors, reply)

    def summary(self, phase: str) -> dict[str, Any]:
        turns = [t for t in self.turns if t.phase == phase]
        return {
            "turns": len(turns),
            "ok": sum(t.ok for t in turns),
            "latency_ms": percentiles([t.latency_ms for t in turns if t.latency_ms is not None]),
            "transcripts": [f"{t.question}: {t.transcript.strip()}" for t in turns],
            "failed": [
                {"question": t.question, "transcript": t.transcript, "status": t.status, "errors": t.errors, "latency_ms": t.latency_ms}
                for t in turns
                if not t.ok
            ],
        }


class _Mic:
    """Real-time audio out in 20 ms chunks on one clock, like a microphone: the client core's
    pacer, without catching up after falling behind (a busy machine: no burst)."""

    def __init__(self, ws: ClientConnection) -> None:
        async def send(pcm: Int16Array) -> None:
            await ws.send(json.dumps(messages.append_audio(pcm)))

        self.pacer = AudioPacer(send, chunk_ms=CHUNK_MS, catch_up=False, start=time.monotonic())
        self.zero = np.zeros(self.pacer.step, dtype=np.int16)

    async def say(self, pcm: Int16Array, speech_end_s: float) -> float:
        """Send ``pcm``; returns when the chunk holding the end of speech was sent."""
        sent_end = time.monotonic()
        sent = await self.pacer.play(pcm)
        k = int(speech_end_s * WIRE_RATE) // self.pacer.step
        return sent[k] if k < len(sent) else sent_end

    async def silence(self, seconds: float) -> None:
        for _ in range(max(1, int(seconds * 1000 / CHUNK_MS))):
            await self.pacer.chunk(self.zero)
