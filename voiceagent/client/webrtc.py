"""A WebRTC client of the server, as a browser page is one (the tests' and the benchmarks'):
aiortc, a microphone track, the ``oai-events`` data channel, the agent's track read frame by frame.
Needs the ``webrtc`` extra.

* :class:`Microphone` plays queued 48 kHz audio in 20 ms frames at real time, silence in between
  (a browser's microphone never stops sending);
* :class:`RtcClient` posts the offer to ``/v1/realtime/calls``, records every server event of the
  data channel (with the time it came) and every frame of the agent's track (its time and peak),
  and counts the RTP bytes it sent (:meth:`RtcClient.sent_bytes`).

Cancellation: :meth:`RtcClient.close` (or :meth:`RtcClient.vanish`) ends the reading tasks; a
cancelled :meth:`RtcClient.wait_for` leaves the client usable.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from voiceagent.audio import Int16Array, read_wav, resample
from voiceagent.transports.webrtc import (
    EVENTS_CHANNEL,
    FRAME_SAMPLES,
    TRACK_RATE,
    OpusPackets,
    allow_loopback_candidates,
    shorten_jitter_buffer,
)

__all__ = ["Microphone", "RtcClient", "post_offer", "post_offer_located", "rtp_bytes_sent", "track_audio"]


_LOUD = int(32768 * 10 ** (-50 / 20))


def track_audio(path: Path, tail_s: float = 0.0) -> Int16Array:
    pcm, rate = read_wav(path)
    out = resample(pcm, rate, TRACK_RATE)
    return np.concatenate([out, np.zeros(int(tail_s * TRACK_RATE), dtype=np.int16)])


class Microphone(MediaStreamTrack):
    """What the client says: :meth:`say` queues audio; 20 ms Opus packets go out at real time,
    silence between (a browser's microphone never stops sending), coded here as a browser codes
    them (mono; not aiortc's stereo through a thread per frame, which on a shared machine would
    take CPU from the server under test)."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue = np.zeros(0, dtype=np.int16)
        self._start: float | None = None
        self._pts = 0
        self._opus = OpusPackets()
        self.said = asyncio.Event()  # set when the queue runs dry after a say()
        self.started: float | None = None
        """When the first frame of the last :meth:`say` went out (``time.monotonic``): the said
        audio's time zero on this clock (a say() waits up to 20 ms for the next frame)."""

    def say(self, pcm: Int16Array) -> None:
        if len(self._queue) == 0:
            self.started = None
        self._queue = np.concatenate([self._queue, pcm])
        self.said.clear()

    async def recv(self) -> Any:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        else:
            await asyncio.sleep(max(0.0, self._start + self._pts / TRACK_RATE - time.monotonic()))  # a microphone's pace
        chunk, self._queue = self._queue[:FRAME_SAMPLES], self._queue[FRAME_SAMPLES:]
        if len(chunk) and self.started is None:
            self.started = time.monotonic()
        if len(self._queue) == 0:
            self.said.set()
        packet = self._opus.encode(chunk, self._pts)
        self._pts += FRAME_SAMPLES
        return packet


async def rtp_bytes_sent(pc: Any) -> int:
    """The RTP bytes a peer connection has sent (its outbound-rtp statistics)."""
    return sum(int(r.bytesSent) for r in (await pc.getStats()).values() if r.type == "outbound-rtp")


def post_offer(url: str, body: bytes, content_type: str = "application/sdp", headers: dict[str, str] | None = None) -> tuple[int, str]:
    """POST ``body``; the status and the body (blocking: call it through ``asyncio.to_thread``)."""
    status, text, _ = post_offer_located(url, body, content_type, headers)
    return status, text


def post_offer_located(
    url: str, body: bytes, content_type: str = "application/sdp", headers: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """:func:`post_offer`, with the answer's ``Location`` header ("" when none): the call's own
    URL, where its later requests (hangup) go."""
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("Location", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), ""


@dataclass
class RtcClient:
    base: str
    """``http://HOST:PORT``."""
    mic: Microphone = field(default_factory=Microphone)
    events: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    frames: list[tuple[float, int, float]] = field(default_factory=list)
    """Each frame of the agent's track: (arrival time, peak sample, seconds into the frame of its
    first sample over -50 dBFS, 0 when none is)."""
    location: str = ""
    """The call's URL path from the answer's ``Location`` (``/v1/realtime/calls/{id}``), once connected."""
    signal: Callable[[str], Awaitable[str]] | None = None
    """The offer's SDP → the answer's: None posts it to ``/v1/realtime/calls``; GPT-Live's
    ``client.live.create()`` is another."""
    jitter_prefetch: int | None = None
    """Packets in order the agent's track holds before it decodes the oldest, that one included
    (1: each as it arrives): None keeps aiortc's buffer (4, and each packet waits for the next
    one, 100 ms); a browser's adapts, and on a LAN holds one or two packets."""
    _cond: asyncio.Condition = field(default_factory=asyncio.Condition)
    _pc: Any = None
    _channel: Any = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def connect(self) -> None:
        allow_loopback_candidates()
        self._pc = pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTrack(self.mic)
        self._channel = channel = pc.createDataChannel(EVENTS_CHANNEL)
        opened = asyncio.Event()
        channel.on("open", opened.set)
        channel.on("message", self._on_message)
        pc.on("track", lambda track: self._tasks.append(asyncio.ensure_future(self._read(track))))
        await pc.setLocalDescription(await pc.createOffer())
        if self.signal is not None:
            answer = await self.signal(pc.localDescription.sdp)
        else:
            offer = pc.localDescription.sdp.encode()
            status, answer, self.location = await asyncio.to_thread(post_offer_located, f"{self.base}/v1/realtime/calls", offer)
            assert status == 201, (status, answer)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        if self.jitter_prefetch is not None:
            for transceiver in pc.getTransceivers():
                if transceiver.kind == "audio":
                    shorten_jitter_buffer(transceiver.receiver, self.jitter_prefetch)
        await asyncio.wait_for(opened.wait(), 15)

    def _on_message(self, message: Any) -> None:
        self.events.append(json.loads(message))
        self.times.append(time.monotonic())
        self._tasks.append(asyncio.ensure_future(self._notify()))

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    async def _read(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            samples = np.abs(frame.to_ndarray().astype(np.int32)).ravel()
            loud = np.flatnonzero(samples > _LOUD)
            offset = loud[0] / len(samples) * frame.samples / frame.sample_rate if len(loud) else 0.0
            self.frames.append((time.monotonic(), int(samples.max()), float(offset)))

    def send(self, message: dict[str, Any] | str) -> None:
        self._channel.send(message if isinstance(message, str) else json.dumps(message))

    async def wait_for(self, kind: str, timeout: float = 60.0, start: int = 0, **fields: Any) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            return next((e for e in self.events[start:] if e.get("type") == kind and all(e.get(k) == v for k, v in fields.items())), None)

        async with asyncio.timeout(timeout), self._cond:
            await self._cond.wait_for(lambda: find() is not None)
        found = find()
        assert found is not None
        return found

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == kind]

    def audible_frames(self, after: float = 0.0, threshold: int = 500) -> list[float]:
        """Arrival times of the agent's frames after ``after`` that carry sound."""
        return [t for t, peak, _ in self.frames if t > after and peak > threshold]

    async def sent_bytes(self) -> int:
        """Bytes of RTP this client has sent so far (aiortc's statistics; they count no received
        bytes: the sender's own :func:`rtp_bytes_sent` does, or a count at the receiver, as
        ``benchmarks/webrtc.py`` keeps)."""
        return await rtp_bytes_sent(self._pc)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._pc is not None:
            await self._pc.close()

    async def vanish(self) -> None:
        """Go away without a word: the sockets close, no DTLS close or SCTP abort is sent."""
        for task in self._tasks:
            task.cancel()
        for transceiver in self._pc.getTransceivers():
            await transceiver.sender.transport.transport.stop()
        self.mic.stop()
