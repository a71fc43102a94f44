"""End of speech → first agent audio at the client, over WebRTC and over the WebSocket, one server.

One server in its own process, as users run it (``voiceagent serve``: the embedded models of the
profile asked for, ``fast`` by default), the same spoken files, each asked over both transports in
turn (WebSocket, then WebRTC, so neither always goes first), from clients in this process.  The
client's own clock: end of speech is when the file's last speech frame (by energy,
:func:`voiceagent.replay.speech_turns`) was sent at real time, counted from its first frame;
first audio is when the client would play the first sample of the answer over -50 dBFS
(WebSocket: the deltas played back to back from their arrival; WebRTC: the agent's track frame
that holds it, from its arrival), to the sample, so that neither transport's chunk size counts.
Bytes per second on the wire, from the start of speech to the answer's end: the WebSocket's text
frames both ways; WebRTC's RTP payloads both ways (the client's outbound statistics, and the
payloads its receiver took; the data channel's events, SRTP, UDP and IP headers left out).

``--in-process`` runs the server in this process instead (its event loop, and the one
interpreter, then carry both ends' Opus coding and SRTP too: how the figures of 2026-11-27 were
taken).

Before the turns, ``--idle-s`` seconds of a call in which nobody speaks on each transport: the
CPU the media path costs per second of call, in the server and in this client (``idle_cpu``).

    .venv/bin/python -m benchmarks.webrtc --out DIR [--rounds 3] [--idle-s 10] [--in-process] [--set KEY=VALUE ...]

Writes ``webrtc.json`` (every turn and the summary) into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from benchmarks.common.metrics import read as read_metrics
from benchmarks.common.sampler import Sampler
from benchmarks.common.serve import ServeProcess
from voiceagent.audio import read_wav, resample
from voiceagent.backends.registry import load_engines, warm_up
from voiceagent.client.webrtc import RtcClient
from voiceagent.config import load_config
from voiceagent.replay import speech_turns
from voiceagent.transports.realtime_wire import WIRE_RATE
from voiceagent.transports.server import VoiceAgentServer
from voiceagent.transports.webrtc import TRACK_RATE

ROOT = Path(__file__).resolve().parent.parent
FILES = ("capital", "weather", "colour", "what_time", "paris_weather", "count")
AUDIBLE = int(32768 * 10 ** (-50 / 20))  # -50 dBFS
TAIL_S = 2.0
CLIENT_PREFETCH = 1
"""The client's jitter buffer, in packets, the decoded one included (1: each as it arrives): a
browser's adapts (on loopback, one or two 20 ms packets); aiortc's default holds four and one more
(100 ms) whatever the network, which is aiortc's, not WebRTC's."""


def _speech(name: str) -> tuple[np.ndarray[Any, Any], float]:
    """The fixture at 16 kHz and where its speech ends (s)."""
    pcm, rate = read_wav(ROOT / ".cache" / "fixtures" / f"{name}.wav")
    turns = speech_turns(pcm, rate)
    return resample(pcm, rate, 16_000), turns[-1][1]


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (None: this process)."""
    return Sampler.cpu_s("self" if pid is None else pid)


class _Target:
    """The server under test: its WebSocket URL, its HTTP base, and a wait until it is idle
    (``idle``: the in-process server's own; None: poll the child process's /metrics); ``pid``: the
    child server's process (None: the server runs in this process)."""

    def __init__(self, url: str, idle: Callable[[], Awaitable[None]] | None = None, pid: int | None = None) -> None:
        self.url = url
        self.base = "http://" + url.split("://", 1)[1].split("/", 1)[0]
        self._idle = idle
        self.pid = pid

    async def wait_idle(self, timeout_s: float = 30.0) -> None:
        if self._idle is not None:
            await self._idle()
            return
        deadline = time.monotonic() + timeout_s
        while (await asyncio.to_thread(read_metrics, self.base)).get("voiceagent_sessions_active", 0) > 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"the server still had a session open {timeout_s:.0f} s after the turn")
            await asyncio.sleep(0.1)


def _count_received(client: RtcClient) -> list[int]:
    """A running total of the RTP payload bytes the client's receivers take (aiortc keeps no
    inbound byte count): the agent's track, as the server's outbound statistics count it."""
    total = [0]
    for transceiver in client._pc.getTransceivers():
        receiver = transceiver.receiver
        handle = receiver._handle_rtp_packet

        async def counted(packet: Any, arrival_time_ms: int, handle: Any = handle) -> None:
            total[0] += len(packet.payload)
            await handle(packet, arrival_time_ms=arrival_time_ms)

        receiver._handle_rtp_packet = counted
    return total


async def over_websocket(server: _Target, pcm16k: np.ndarray[Any, Any], end_s: float) -> dict[str, Any]:
    wire = np.concatenate([resample(pcm16k, 16_000, WIRE_RATE), np.zeros(int(TAIL_S * WIRE_RATE), dtype=np.int16)])
    ws = await connect(server.url, max_size=None)
    sent = received = 0
    first: float | None = None
    done = asyncio.Event()

    play_end = 0.0

    async def read() -> None:
        nonlocal received, first, play_end
        async for raw in ws:
            received += len(raw)
            msg = json.loads(raw)
            if msg["type"] == "response.output_audio.delta" and first is None:
                # Played back to back from its arrival: the first loud sample is heard then.
                samples = np.frombuffer(base64.b64decode(msg["delta"]), dtype="<i2")
                start = max(time.monotonic(), play_end)
                loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > AUDIBLE)
                if len(loud):
                    first = start + loud[0] / WIRE_RATE
                play_end = start + len(samples) / WIRE_RATE
            elif msg["type"] == "response.done":
                done.set()

    reader = asyncio.create_task(read())
    step = WIRE_RATE // 50
    t0 = time.monotonic()
    for i, at in enumerate(range(0, len(wire), step)):
        frame = json.dumps(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(wire[at : at + step].astype("<i2").tobytes()).decode()}
        )
        sent += len(frame)
        await ws.send(frame)
        await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))  # a microphone's pace
    await asyncio.wait_for(done.wait(), 60)
    elapsed = time.monotonic() - t0
    await ws.close()
    reader.cancel()
    return {
        "first_audio_ms": None if first is None else round((first - (t0 + end_s)) * 1000, 1),
        "bytes_per_s": {"sent": round(sent / elapsed), "received": round(received / elapsed)},
    }


async def over_webrtc(server: _Target, pcm16k: np.ndarray[Any, Any], end_s: float) -> dict[str, Any]:
    client = RtcClient(server.base, jitter_prefetch=CLIENT_PREFETCH)
    await client.connect()
    received = _count_received(client)
    await client.wait_for("session.created", 10)
    audio = np.concatenate([resample(pcm16k, 16_000, TRACK_RATE), np.zeros(int(TAIL_S * TRACK_RATE), dtype=np.int16)])
    before = {"sent": await client.sent_bytes(), "received": received[0]}
    said = time.monotonic()
    client.mic.say(audio)
    await client.wait_for("response.done", 60)
    elapsed = time.monotonic() - said
    after = {"sent": await client.sent_bytes(), "received": received[0]}
    # The file's time zero is when its first frame went out (the microphone's next 20 ms tick),
    # as the WebSocket's is when its first frame was sent.
    t0 = client.mic.started if client.mic.started is not None else said
    heard = [t + offset for t, peak, offset in client.frames if t > t0 and peak > AUDIBLE]
    await client.close()
    return {
        "first_audio_ms": round((heard[0] - (t0 + end_s)) * 1000, 1) if heard else None,
        "bytes_per_s": {k: round((after[k] - before[k]) / elapsed) for k in after},
    }


async def idle_cpu(server: _Target, transport: str, seconds: float) -> dict[str, Any]:
    """CPU per second of a call in which nobody speaks (the microphone sends silence, the agent's
    track is quiet): the media path's own cost, in the server and in this client, in ms/s.  With
    the server in this process, ``server_ms_per_s`` is the two together and ``client_ms_per_s`` None."""
    if transport == "webrtc":
        client = RtcClient(server.base, jitter_prefetch=CLIENT_PREFETCH)
        await client.connect()
        await client.wait_for("session.created", 10)
        client.mic.say(np.zeros(int((seconds + 2) * TRACK_RATE), dtype=np.int16))
        await asyncio.sleep(1.0)  # the call settled (ICE, DTLS, the first RTCP)
        before = (_cpu_s(server.pid), _cpu_s(None), time.monotonic())
        await asyncio.sleep(seconds)
        after = (_cpu_s(server.pid), _cpu_s(None), time.monotonic())
        await client.close()
    else:
        ws = await connect(server.url, max_size=None)
        silence = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(2 * WIRE_RATE // 50)).decode()})

        async def drain() -> None:
            async for _ in ws:
                pass

        reader = asyncio.create_task(drain())
        t0 = time.monotonic()
        frames = int((seconds + 1.0) / 0.02)
        for i in range(frames):
            if i == 50:
                before = (_cpu_s(server.pid), _cpu_s(None), time.monotonic())
            await ws.send(silence)
            await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
        after = (_cpu_s(server.pid), _cpu_s(None), time.monotonic())
        await ws.close()
        reader.cancel()
    elapsed = after[2] - before[2]
    server_ms = (after[0] - before[0]) / elapsed * 1000
    client_ms = None if server.pid is None else round((after[1] - before[1]) / elapsed * 1000, 1)
    await server.wait_idle()
    return {"transport": transport, "seconds": round(elapsed, 1), "server_ms_per_s": round(server_ms, 1), "client_ms_per_s": client_ms}


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(values, q)), 1)


async def _turns(server: _Target, rounds: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for r in range(rounds):
        for n, name in enumerate(FILES):
            pcm, end_s = await asyncio.to_thread(_speech, name)
            order = ["websocket", "webrtc"] if (r + n) % 2 == 0 else ["webrtc", "websocket"]
            for transport in order:
                run = over_websocket if transport == "websocket" else over_webrtc
                result = await run(server, pcm, end_s)
                turns.append({"round": r, "file": name, "transport": transport, **result})
                print(json.dumps(turns[-1]), flush=True)
                await server.wait_idle()
    return turns


async def _measure(server: _Target, rounds: int, idle_s: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    idle: list[dict[str, Any]] = []
    for transport in ("websocket", "webrtc") if idle_s > 0 else ():
        idle.append(await idle_cpu(server, transport, idle_s))
        print(json.dumps(idle[-1]), flush=True)
    return await _turns(server, rounds), idle


async def bench(rounds: int, overrides: dict[str, str], in_process: bool, idle_s: float = 0.0) -> dict[str, Any]:
    overrides = {"server.max_sessions": "2", **overrides}
    if in_process:
        config = load_config(env={}, overrides={"server.port": "0", **overrides})
        engines = await asyncio.to_thread(load_engines, config)
        await asyncio.to_thread(warm_up, engines, config)
        try:
            async with VoiceAgentServer(config, engines) as server:
                turns, idle = await _measure(_Target(server.url, server.wait_idle), rounds, idle_s)
        finally:
            engines.close()
    else:
        for name in ("VOICEAGENT_PROFILE", "VOICEAGENT_CONFIG"):
            os.environ.pop(name, None)  # the profile asked for, not the shell's
        child = await asyncio.to_thread(ServeProcess, overrides, log_lines=200)
        try:
            turns, idle = await _measure(_Target(child.url, pid=child.proc.pid), rounds, idle_s)
        finally:
            if await asyncio.to_thread(child.stop) != 0:
                print("".join(child.lines()[-20:]), flush=True)
    summary: dict[str, Any] = {}
    for transport in ("websocket", "webrtc"):
        mine = [t for t in turns if t["transport"] == transport]
        lat = [t["first_audio_ms"] for t in mine if t["first_audio_ms"] is not None]
        summary[transport] = {
            "turns": len(mine),
            "answered": len(lat),
            "p50_ms": _p(lat, 50),
            "p95_ms": _p(lat, 95),
            "bytes_per_s_sent": round(statistics.median(t["bytes_per_s"]["sent"] for t in mine)),
            "bytes_per_s_received": round(statistics.median(t["bytes_per_s"]["received"] for t in mine)),
        }
    ws, rtc = summary["websocket"]["p50_ms"], summary["webrtc"]["p50_ms"]
    summary["webrtc_minus_websocket_p50_ms"] = None if ws is None or rtc is None else round(rtc - ws, 1)
    server = "in-process" if in_process else "child process"
    return {
        "profile": overrides.get("profile", "fast"),
        "server": server,
        "files": list(FILES),
        "rounds": rounds,
        "summary": summary,
        "idle_cpu": idle,
        "turns": turns,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-process", action="store_true", help="the server in this process (both ends share its interpreter)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--idle-s", type=float, default=10.0, help="first, a silent call this long on each transport (0: none)")
    args = parser.parse_args()
    overrides = {"profile": "fast", **dict(item.split("=", 1) for item in args.set)}
    report = asyncio.run(bench(args.rounds, overrides, args.in_process, args.idle_s))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "webrtc.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
