#!/usr/bin/env python3
"""A fake Twilio phone call: try the telephony bridge without a phone number.

It speaks Media Streams exactly as Twilio does: ``connected`` and ``start``, then one ``media``
message every 20 ms (160 bytes of base64 μ-law at 8 kHz, numbers sent as strings), silence when
the caller says nothing.  Reply audio is "played" in real time by a simulated handset, and each
``mark`` is echoed only once the audio sent before it would have finished playing; a ``clear``
drops what was not played yet and echoes the pending marks at once, as Twilio does.  With
``echo_db`` (``--echo-db``) the handset is a speakerphone: what it plays comes back into what it
sends, that far down and :data:`ECHO_DELAY_S` late.

Usage::

    python clients/twilio_call.py ws://127.0.0.1:8765/twilio question.wav --out heard.wav [--echo-db -6]

The test suite imports :class:`FakeTwilioCall` from here (tests/integration/test_twilio.py).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import secrets
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from voiceagent.audio import Int16Array, mulaw_decode, mulaw_encode, read_wav, resample, write_wav

__all__ = ["FakeTwilioCall", "Segment"]

RATE = 8000
ECHO_DELAY_S = 0.06
"""A speakerphone's echo path: the loudspeaker to the microphone, and the phone's own buffers."""
FRAME_BYTES = 160  # 20 ms of 8 kHz μ-law
FRAME_S = FRAME_BYTES / RATE
SILENCE = b"\xff" * FRAME_BYTES  # μ-law zero


@dataclass
class Segment:
    """One received media payload on the handset's playback timeline (monotonic seconds)."""

    start: float
    end: float
    payload: bytes

    def played_bytes(self, until: float) -> bytes:
        if until >= self.end:
            return self.payload
        if until <= self.start:
            return b""
        return self.payload[: int((until - self.start) * RATE)]


@dataclass
class _PendingMark:
    due: float
    name: str
    received_ms: float  # reply audio received before this mark


@dataclass
class _Outgoing:
    data: bytearray = field(default_factory=bytearray)
    drained: asyncio.Event = field(default_factory=asyncio.Event)


class FakeTwilioCall:
    """``async with FakeTwilioCall(url) as call: await call.say(pcm, rate)`` — see the module doc."""

    def __init__(self, url: str, echo_db: float | None = None) -> None:
        self.url = url
        self.echo_gain = 10 ** (echo_db / 20) if echo_db is not None else 0.0
        self.stream_sid = "MZ" + secrets.token_hex(16)
        self.call_sid = "CA" + secrets.token_hex(16)
        self.segments: list[Segment] = []
        self.clears: list[float] = []  # monotonic time each ``clear`` arrived
        self.clear_frames: list[int] = []  # media frames sent when each ``clear`` arrived
        self.frames_sent = 0
        self.frame_times: list[float] = []  # monotonic time each media frame went out
        self.media_times: list[float] = []  # monotonic time each ``media`` arrived
        self.received_ms = 0.0
        self.heard_ms = 0.0
        """Reply audio the handset confirmed as played: received before the last mark echoed."""
        self.heard_ms_at_clear: list[float] = []
        self.played_marks: list[tuple[float, float]] = []
        """(monotonic time echoed, ``received_ms``) of every mark echoed as played, in order."""
        self.marks_sent = 0
        self.marks_echoed = 0
        self.close_code: int | None = None
        self.close_reason = ""
        self._ws: ClientConnection | None = None
        self._out = _Outgoing()
        self._marks: deque[_PendingMark] = deque()
        self._mark_added = asyncio.Event()
        self._changed = asyncio.Event()
        self._play_end = 0.0
        self._seq = 0
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> FakeTwilioCall:
        self._ws = await connect(self.url, max_size=None)
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send(
            {
                "event": "start",
                "sequenceNumber": self._next_seq(),
                "streamSid": self.stream_sid,
                "start": {
                    "streamSid": self.stream_sid,
                    "accountSid": "AC" + secrets.token_hex(16),
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "customParameters": {},
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                },
            }
        )
        self._tasks = [asyncio.create_task(t) for t in (self._pump(), self._read(), self._echo_marks())]
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self.hang_up()

    async def hang_up(self) -> None:
        """Send ``stop`` (as Twilio does when the caller hangs up) and close."""
        ws = self._ws
        if ws is None:
            return
        with contextlib.suppress(Exception):
            await self._send(
                {"event": "stop", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid, "stop": {"callSid": self.call_sid}}
            )
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await ws.close()
        self._ws = None

    # ------------------------------------------------------------------ caller side

    async def press(self, digit: str) -> None:
        """The caller presses a key: a ``dtmf`` message, as Twilio sends it."""
        dtmf = {"track": "inbound_track", "digit": digit}
        await self._send({"event": "dtmf", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid, "dtmf": dtmf})

    @property
    def ended_by_server(self) -> bool:
        """The server closed the stream (the agent hung up or transferred the call)."""
        return self.close_code is not None

    async def say(self, pcm: Int16Array, rate: int, started: asyncio.Future[int] | None = None) -> None:
        """Queue speech (any rate) after what is already queued; returns once it has all been sent.

        ``started`` receives the index of the media frame that carries its first sample, which
        puts later events on the audio's own timeline (20 ms per frame), whatever the wall clock.
        """
        data = mulaw_encode(resample(pcm, rate, RATE))
        if started is not None:
            started.set_result(self.frames_sent + -(-len(self._out.data) // FRAME_BYTES))
        self._out.drained.clear()
        self._out.data += data
        await self._out.drained.wait()

    async def wait_until(self, predicate: object, within_s: float) -> None:
        """Wait (at most ``within_s`` seconds) until ``predicate()`` is true; re-checked on every event."""
        assert callable(predicate)
        deadline = time.monotonic() + within_s
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {within_s:.1f} s")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.1))

    def quiet_for(self, seconds: float) -> bool:
        """True once some reply was heard, it has all played, and nothing new came for ``seconds``."""
        now = time.monotonic()
        return bool(self.media_times) and now - self.media_times[-1] >= seconds and now >= self._play_end and not self._marks

    def heard_audio(self) -> Int16Array:
        """What the handset played (8 kHz), concatenated (gaps left out)."""
        now = time.monotonic()
        raw = b"".join(seg.played_bytes(now) for seg in self.segments)
        return mulaw_decode(raw)

    def _played_during(self, t0: float) -> Int16Array:
        """The 20 ms the handset played from monotonic time ``t0`` (silence where it played nothing)."""
        times = t0 + np.arange(FRAME_BYTES) / RATE
        out = np.zeros(FRAME_BYTES, dtype=np.int16)
        for seg in reversed(self.segments):  # in time order: the recent ones are the ones that can overlap
            if seg.end <= t0:
                break
            inside = (times >= seg.start) & (times < seg.end)
            index = ((times[inside] - seg.start) * RATE).astype(int)
            index = index[index < len(seg.payload)]
            out[np.flatnonzero(inside)[: len(index)]] = mulaw_decode(bytes(seg.payload[i] for i in index))
        return out

    # ------------------------------------------------------------------ wire

    def _next_seq(self) -> str:
        self._seq += 1
        return str(self._seq)

    async def _send(self, message: dict[str, object]) -> None:
        assert self._ws is not None
        await self._ws.send(json.dumps(message))

    async def _pump(self) -> None:
        """One 20 ms media frame per 20 ms of wall time, as a phone line does."""
        t0 = time.monotonic()
        n = 0
        while True:
            delay = t0 + n * FRAME_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            out = self._out
            if out.data:
                frame = bytes(out.data[:FRAME_BYTES]).ljust(FRAME_BYTES, b"\xff")
                del out.data[:FRAME_BYTES]
                if not out.data:
                    out.drained.set()
            else:
                frame = SILENCE
            if self.echo_gain:
                # The loudspeaker heard by the microphone: what played one echo path earlier.
                echo = self._played_during(t0 + n * FRAME_S - ECHO_DELAY_S) * self.echo_gain
                frame = mulaw_encode(np.clip(mulaw_decode(frame) + echo, -32768, 32767).astype(np.int16))
            media = {"track": "inbound", "chunk": str(n + 1), "timestamp": str(n * 20), "payload": base64.b64encode(frame).decode("ascii")}
            await self._send({"event": "media", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid, "media": media})
            self.frames_sent += 1
            self.frame_times.append(time.monotonic())
            n += 1

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                msg = json.loads(raw)
                now = time.monotonic()
                kind = msg.get("event")
                if kind == "media":
                    payload = base64.b64decode(msg["media"]["payload"])
                    start = max(now, self._play_end)
                    self._play_end = start + len(payload) / RATE
                    self.segments.append(Segment(start, self._play_end, payload))
                    self.media_times.append(now)
                    self.received_ms += len(payload) * 1000.0 / RATE
                elif kind == "mark":
                    self.marks_sent += 1
                    self._marks.append(_PendingMark(max(now, self._play_end), msg["mark"]["name"], self.received_ms))
                    self._mark_added.set()
                elif kind == "clear":
                    await self._clear(now)
                self._changed.set()
        finally:
            if self._ws is not None and self._ws.close_code is not None:
                self.close_code = self._ws.close_code
                self.close_reason = self._ws.close_reason or ""
            self._changed.set()

    async def _clear(self, now: float) -> None:
        self.clears.append(now)
        self.clear_frames.append(self.frames_sent)
        self.heard_ms_at_clear.append(self.heard_ms)
        for seg in self.segments:
            if seg.end > now:
                seg.payload = seg.played_bytes(now)
                seg.end = max(seg.start, now)
        self._play_end = now
        # Twilio echoes the marks of discarded audio at once; they do not count as heard.
        while self._marks:
            await self._echo(self._marks.popleft(), heard=False)

    async def _echo_marks(self) -> None:
        while True:
            if not self._marks:
                self._mark_added.clear()
                await self._mark_added.wait()
                continue
            delay = self._marks[0].due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(min(delay, 0.02))  # real-time playback clock; re-check for a clear
                continue
            await self._echo(self._marks.popleft(), heard=True)

    async def _echo(self, mark: _PendingMark, *, heard: bool) -> None:
        if heard:
            self.heard_ms = mark.received_ms
            self.played_marks.append((time.monotonic(), mark.received_ms))
        self.marks_echoed += 1
        await self._send({"event": "mark", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid, "mark": {"name": mark.name}})
        self._changed.set()


async def _main(url: str, wav: Path, out: Path | None, within_s: float, echo_db: float | None) -> int:
    pcm, rate = read_wav(wav)
    async with FakeTwilioCall(url, echo_db) as call:
        await call.say(pcm, rate)
        await call.wait_until(lambda: call.quiet_for(1.5), within_s)
        heard = call.heard_audio()
    print(
        f"heard {len(heard) / RATE:.2f} s of reply audio; {call.marks_echoed}/{call.marks_sent} marks echoed; {len(call.clears)} clear(s)"
    )
    if out is not None:
        write_wav(out, heard if len(heard) else np.zeros(0, dtype=np.int16), RATE)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url", help="ws://HOST:PORT/twilio")
    ap.add_argument("wav", type=Path, help="16-bit WAV file the caller says")
    ap.add_argument("--out", type=Path, help="write what the caller heard (8 kHz WAV)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--echo-db", type=float, help="a speakerphone: what it plays comes back this far down (e.g. -6)")
    a = ap.parse_args()
    sys.exit(asyncio.run(_main(a.url, a.wav, a.out, a.timeout, a.echo_db)))
