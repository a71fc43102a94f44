"""WebRTC calls: OpenAI's browser transport (``POST /v1/realtime/calls``), one peer connection ↔ one session.

The client posts an SDP offer with one audio track (its microphone) and a data channel named
``oai-events``; :meth:`WebRtcCall.answer` returns the server's SDP answer (aiortc: ICE, DTLS, SRTP,
Opus through PyAV).  Then:

* **audio in**: the microphone track's frames (48 kHz Opus, decoded) are mixed to mono, resampled
  to 16 kHz and appended to the session, as ``input_audio_buffer.append`` would;
* **audio out**: each response's audio goes on the server's track (:class:`SpeakerTrack`), 20 ms
  Opus packets at 48 kHz paced by the session's clock, nothing between replies, never as
  ``response.output_audio.delta`` events; a barge-in (``output_audio_buffer.cleared``) empties
  what the track holds at once;
* **events**: every other server event, and every client event, is the WebSocket path's JSON on
  the data channel, through the same codec and :class:`~voiceagent.transports.realtime.RealtimeCommands`.
  A message that is not JSON gets an ``error`` event; the call goes on.

The call ends, and its session is closed, when the peer connection fails or closes, the
``hangup`` request comes, the microphone sends nothing for ``server.webrtc_media_timeout_s`` (a
peer that vanished without closing), or the session reaches ``server.max_session_s``.

ICE: host candidates (loopback included: aioice leaves 127.0.0.1 out, the server adds it back) plus
``server.ice_servers``; aiortc's default public STUN server is never used.

Cancellation: :meth:`WebRtcCall.run` may be cancelled; it then closes the peer connection and the
session as when the call ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fractions
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.errors import ProtocolError
from voiceagent.events import Event
from voiceagent.session import Session
from voiceagent.transports.audio_budget import AudioBudget
from voiceagent.transports.realtime import RealtimeCommands
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_wire import AUDIO_DELTA, WIRE_RATE

__all__ = [
    "EVENTS_CHANNEL",
    "FRAME_SAMPLES",
    "LOSS_WAIT",
    "MIC_PREFETCH",
    "SPEAKER_BITRATE",
    "OpusPackets",
    "TRACK_RATE",
    "SpeakerTrack",
    "WebRtcCall",
    "WebRtcError",
    "allow_loopback_candidates",
    "audio_frame",
    "shorten_jitter_buffer",
]

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
TRACK_RATE = 48_000
FRAME_SAMPLES = TRACK_RATE // 50  # 20 ms: Opus's usual frame
_CLEARED = "output_audio_buffer.cleared"


class WebRtcError(Exception):
    """The offer cannot be answered (bad SDP, no audio, no data channel): a 400 for the client."""


def allow_loopback_candidates() -> None:
    """aioice gathers host candidates from every interface but loopback; a call between two
    programs on one machine (and the tests, with networking off) needs 127.0.0.1 too."""
    from aioice import ice

    if getattr(ice.get_host_addresses, "_voiceagent", False):
        return
    original = ice.get_host_addresses

    def with_loopback(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        found = list(original(use_ipv4=use_ipv4, use_ipv6=use_ipv6))
        return [*found, "127.0.0.1"] if use_ipv4 and "127.0.0.1" not in found else found

    with_loopback._voiceagent = True  # type: ignore[attr-defined]
    ice.get_host_addresses = with_loopback


MIC_PREFETCH = 1
"""Packets the microphone's jitter buffer holds, the one it hands on included (aiortc's own
choice: 4, 80 ms added to every end of speech).  The recognizer needs no smoothing of late
packets, only their order; on a LAN a packet is decoded as it arrives."""


LOSS_WAIT = 3
"""Packets that may arrive after a missing one before it is given up as lost (60 ms): a packet
that is only late comes within that on any link a conversation survives."""


def _audio_jitter_buffer(capacity: int, prefetch: int) -> Any:
    """An aiortc jitter buffer for audio that hands a packet on when it is complete.

    aiortc's buffer serves video too, where a frame spans packets, so it calls a frame complete
    only when a packet of the *next* frame has arrived: every audio packet (one Opus frame each)
    waits 20 ms for its successor.  Here the oldest packet goes to the decoder once ``prefetch``
    packets are in order from it (1: on arrival).  A missing packet holds the ones after it until
    :data:`LOSS_WAIT` have come, then is given up (aiortc waits until the buffer overflows).
    The receiver takes one packet per packet that arrives, so a backlog never drains by itself:
    after a loss the oldest of more than ``prefetch + 1`` waiting packets are dropped, which costs
    their 20 ms each once instead of that delay for the rest of the call."""
    from aiortc.jitterbuffer import JitterBuffer, JitterFrame

    class AudioJitterBuffer(JitterBuffer):
        def _remove_frame(self, sequence_number: int) -> JitterFrame | None:
            assert self._origin is not None  # set by add() before it calls this
            held = [n for n in range(self.capacity) if self._packets[(self._origin + n) % self.capacity] is not None]
            if not held or (held[0] > 0 and len(held) < LOSS_WAIT):
                return None
            self.remove(held[0])  # the packets missing ahead of the first held one, if any: lost
            run = next((i for i, n in enumerate(held) if n - held[0] != i), len(held))
            if run < self._prefetch:
                return None
            self.remove(max(0, run - self._prefetch - 1))
            packet = self._packets[self._origin % self.capacity]
            assert packet is not None
            self.remove(1)
            return JitterFrame(data=packet._data, timestamp=packet.timestamp)  # type: ignore[attr-defined]

    return AudioJitterBuffer(capacity=capacity, prefetch=prefetch)


def shorten_jitter_buffer(receiver: Any, prefetch: int) -> bool:
    """Give ``receiver`` (an aiortc RTCRtpReceiver for audio) a jitter buffer that decodes a packet
    once ``prefetch`` packets are in order, itself included (see :func:`_audio_jitter_buffer`);
    False when this aiortc keeps its buffer elsewhere (nothing changed then)."""
    from aiortc.jitterbuffer import JitterBuffer

    name = "_RTCRtpReceiver__jitter_buffer"  # aiortc has no setting for it
    current = getattr(receiver, name, None)
    if not isinstance(current, JitterBuffer):
        return False
    setattr(receiver, name, _audio_jitter_buffer(current.capacity, max(1, prefetch)))
    return True


def _ice_servers(spec: str) -> list[Any]:
    """``server.ice_servers`` as aiortc's RTCIceServer list (``turn:user:secret@host:port``)."""
    from aiortc import RTCIceServer

    servers = []
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        scheme, _, rest = entry.partition(":")
        user, at, host = rest.rpartition("@")
        if at:
            name, _, secret = user.partition(":")
            servers.append(RTCIceServer(f"{scheme}:{host}", username=name, credential=secret))
        else:
            servers.append(RTCIceServer(entry))
    return servers


SPEAKER_BITRATE = 32_000
"""The agent's Opus stream, bit/s: mono speech at 48 kHz (the voice's own rate is 22–24 kHz) is
clear at 24–40 kbit/s; aiortc's default encoder sends stereo at 96."""


class SpeakerTrack:
    """The agent's voice as an aiortc audio track: 20 ms Opus packets (48 kHz mono), one per 20 ms
    of the session's clock while there is audio, and **nothing while there is none** (discontinuous
    transmission, as Opus's DTX does: the RTP timestamps jump over the gap and the receiver plays
    silence).  A call spends most of its time listening; sending encoded silence 50 times a second
    cost the server and the client CPU beside the models for no sound.

    :meth:`push` queues a response's audio (24 kHz, the codec's wire rate); :meth:`clear` drops what
    is queued (a barge-in).  The packets are encoded here, one 20 ms frame at a time on the event
    loop (about 0.1 ms each, :class:`OpusPackets`), with their RTP timestamps set from this track's own
    clock."""

    kind = "audio"

    def __init__(self, clock_now: Callable[[], float], sleep_until: Callable[[float], Any]) -> None:
        from aiortc.mediastreams import MediaStreamTrack

        self._now = clock_now
        self._sleep_until = sleep_until
        self._queue = np.zeros(0, dtype=np.int16)
        self._pushed = asyncio.Event()
        self._resampler = StreamResampler(WIRE_RATE, TRACK_RATE)
        self._start: float | None = None
        self._pts = 0
        self._encoder = OpusPackets()
        self.sent_audio_frames = 0
        """Frames that carried the agent's audio (for tests and diagnostics)."""
        outer = self

        class _Track(MediaStreamTrack):
            kind = "audio"

            async def recv(self) -> Any:
                pts, chunk = await outer.next_chunk()
                return outer.encode(chunk, pts)

        self.track = _Track()

    def push(self, pcm24k: Int16Array) -> None:
        out = self._resampler.process(pcm24k)
        if len(out):
            self._queue = np.concatenate([self._queue, out])
            self._pushed.set()

    def clear(self) -> None:
        self._queue = np.zeros(0, dtype=np.int16)
        self._resampler = StreamResampler(WIRE_RATE, TRACK_RATE)

    @property
    def queued_ms(self) -> float:
        return len(self._queue) * 1000.0 / TRACK_RATE

    async def next_chunk(self) -> tuple[int, Int16Array]:
        """The next 20 ms of audio (the last of a reply may be shorter) and its time in samples on
        the track (its RTP timestamp), when it is due: at once when audio comes to a silent track
        (the frames after it are paced from it), otherwise 20 ms after the one before.  Waits, with
        nothing sent, while nothing is queued.  Cancellation: leaves the track as it was."""
        while True:
            while not len(self._queue):
                self._pushed.clear()
                await self._pushed.wait()
            now = self._now()
            if self._start is None:
                self._start = now
            due = self._start + self._pts / TRACK_RATE
            if now >= due:
                # The track was silent (or starved): this frame goes now, its timestamp moved on
                # by the whole frames of the gap, and the following ticks are counted from it.
                self._pts += int((now - due) * TRACK_RATE) // FRAME_SAMPLES * FRAME_SAMPLES
                self._start = now - self._pts / TRACK_RATE
                break
            await self._sleep_until(due)  # audio goes on: its 20 ms tick
            if len(self._queue):
                break
            # Cleared while waiting for the tick (a barge-in): nothing to send, wait for audio.
        chunk, self._queue = self._queue[:FRAME_SAMPLES], self._queue[FRAME_SAMPLES:]
        pts = self._pts
        self._pts += FRAME_SAMPLES
        self.sent_audio_frames += 1
        return pts, chunk

    def encode(self, chunk: Int16Array, pts: int) -> Any:
        """``chunk`` (padded to 20 ms) as one Opus packet (an ``av.Packet``) stamped ``pts``."""
        return self._encoder.encode(chunk, pts)


class OpusPackets:
    """20 ms frames of 48 kHz mono PCM → Opus packets (``av.Packet``, for an aiortc track's
    ``recv``) stamped with the caller's own time, coded on the calling thread (about 0.1 ms a
    frame at :data:`SPEAKER_BITRATE`).  aiortc's encoder, used when a track returns PCM, hops to a
    thread for every frame, codes stereo at 96 kbit/s and, after a gap in the timestamps, stamps
    the first packet with the time before it."""

    def __init__(self, bitrate: int = SPEAKER_BITRATE) -> None:
        self._bitrate = bitrate
        self._codec: Any = None

    def encode(self, chunk: Int16Array, pts: int) -> Any:
        """``chunk`` (padded with silence to 20 ms) as one packet at ``pts`` (in samples)."""
        import av

        if self._codec is None:
            self._codec = codec = av.CodecContext.create("libopus", "w")
            codec.bit_rate = self._bitrate
            codec.format = "s16"
            codec.layout = "mono"
            codec.sample_rate = TRACK_RATE
            codec.time_base = fractions.Fraction(1, TRACK_RATE)
            codec.options = {"application": "voip"}
        packets = self._codec.encode(audio_frame(chunk, pts))
        if len(packets) != 1:  # libopus codes a whole 20 ms frame at once, with no look-ahead held back
            raise RuntimeError(f"the Opus encoder gave {len(packets)} packets for one 20 ms frame")
        # FFmpeg stamps the packet from a queue of the frames it was given, which is a frame behind
        # after a jump: the caller's time counts.
        [packet] = packets
        packet.pts = pts
        packet.time_base = fractions.Fraction(1, TRACK_RATE)
        return packet


def audio_frame(chunk: Int16Array, pts: int) -> Any:
    """A 20 ms mono frame at 48 kHz (an ``av.AudioFrame``) of ``chunk``, padded with silence, at
    ``pts`` (in samples)."""
    from av import AudioFrame

    if len(chunk) < FRAME_SAMPLES:
        chunk = np.concatenate([chunk, np.zeros(FRAME_SAMPLES - len(chunk), dtype=np.int16)])
    frame = AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = TRACK_RATE
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, TRACK_RATE)
    return frame


class WebRtcCall:
    """One call: the peer connection, its tracks and data channel, and ``session``."""

    def __init__(
        self, session: Session, voice_rate: int, *, ice_servers: str = "", media_timeout_s: float = 10.0, send_metrics: bool = False
    ) -> None:
        """``send_metrics``: ``voiceagent.turn_metrics`` events too (``?voiceagent_metrics=1``)."""
        self.session = session
        self.id = session.id
        self.call_id = f"rtc_{secrets.token_hex(16)}"
        """The call's id in ``/v1/realtime/calls/ID``: random, so that no client can hang up a
        call it did not make by guessing (session ids count up)."""
        self.codec = RealtimeCodec(session.settings, voice_rate, send_metrics=send_metrics)
        self.codec.audio.fixed = True  # the tracks carry the audio: formats named for the WebSocket are left as they are
        # input_audio_buffer.append on the data channel: no further ahead of real time than on the WebSocket.
        self._appended = AudioBudget(session.clock, session.config.server.audio_burst_s)
        self.commands = RealtimeCommands(session, self.codec, self._send, self._appended.allow)
        self.speaker = SpeakerTrack(session.clock.now, session.clock.sleep_until)
        self._ice_servers = ice_servers
        self._media_timeout_s = media_timeout_s
        self._pc: Any = None
        self._channel: Any = None
        self._pending: list[str] = [json.dumps(self.codec.session_message("session.created", self.id))]
        """Events before the data channel opened, ``session.created`` first (a multipart form's
        ``session`` is applied before the call runs: its ``session.updated`` comes after)."""
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()  # client events, applied one at a time in order
        self._ended = asyncio.Event()
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_media = session.clock.now()
        self._in_rate = TRACK_RATE
        self._in = StreamResampler(TRACK_RATE, PIPELINE_RATE, quality="LQ")

    async def answer(self, offer_sdp: str) -> str:
        """The SDP answer to ``offer_sdp``; :class:`WebRtcError` when it cannot be answered."""
        from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

        allow_loopback_candidates()
        if not offer_sdp.startswith("v=0"):
            raise WebRtcError("the body is not an SDP offer (it must start with v=0)")
        if "m=audio" not in offer_sdp:
            raise WebRtcError("the offer has no audio (m=audio): the microphone track is needed")
        if "m=application" not in offer_sdp:
            raise WebRtcError(f"the offer has no data channel (m=application): create the {EVENTS_CHANNEL!r} channel before the offer")
        self._pc = pc = RTCPeerConnection(RTCConfiguration(iceServers=_ice_servers(self._ice_servers)))
        pc.on("track", self._on_track)
        pc.on("datachannel", self._on_channel)
        pc.on("connectionstatechange", self._on_state)
        pc.addTrack(self.speaker.track)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            for transceiver in pc.getTransceivers():
                if transceiver.kind == "audio" and not shorten_jitter_buffer(transceiver.receiver, MIC_PREFETCH):
                    log.warning("call %s: aiortc's jitter buffer not found; the microphone keeps its 80 ms", self.id)
            await pc.setLocalDescription(await pc.createAnswer())
        except Exception as exc:  # aiortc raises ValueError and others for offers it cannot take
            await self.close()
            raise WebRtcError(f"the SDP offer could not be answered: {exc}") from None
        except BaseException:  # cancelled (the handshake's time-out, a shutdown): nothing left behind
            await asyncio.shield(self.close())
            raise
        return str(pc.localDescription.sdp)

    async def close(self) -> None:
        """Stop the call's tasks and close the peer connection (not the session); idempotent."""
        self._closing = True
        if self._pc is not None:
            with contextlib.suppress(Exception):
                await self._pc.close()
        while self._tasks:  # a task may have been started while the others ended
            tasks = set(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks -= tasks

    async def run(self) -> None:
        """Serve the call until it ends (see the module docstring); the session is closed then."""
        self._spawn(self._write(), "writer")
        self._spawn(self._watch(), "watch")
        self._spawn(self._read_events(), "events")
        try:
            await self._ended.wait()
        finally:
            await self.close()
            await self.session.aclose()

    def hang_up(self, why: str) -> None:
        if not self._ended.is_set():
            log.info("call %s ended: %s", self.id, why)
            self._ended.set()

    # ------------------------------------------------------------------ peer callbacks

    def _on_state(self) -> None:
        if self._pc is not None and self._pc.connectionState in ("failed", "closed"):
            self.hang_up(f"peer connection {self._pc.connectionState}")

    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            self._spawn(self._read_microphone(track), "microphone")

    def _on_channel(self, channel: Any) -> None:
        if channel.label != EVENTS_CHANNEL:
            log.info("call %s: data channel %r ignored (events go on %r)", self.id, channel.label, EVENTS_CHANNEL)
            return
        self._channel = channel

        def on_message(message: Any) -> None:
            self._inbox.put_nowait(message)  # applied in order by _read_events

        channel.on("message", on_message)
        channel.on("close", lambda: self.hang_up("data channel closed"))
        pending, self._pending = self._pending, []
        for text in pending:
            channel.send(text)

    # ------------------------------------------------------------------ the work

    def _spawn(self, coro: Any, what: str) -> None:
        if self._closing:
            coro.close()
            return
        task = asyncio.create_task(coro, name=f"{self.id}.webrtc-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read_events(self) -> None:
        """The client's events, one at a time in their order (an update is applied, and answered,
        before the event after it is read), as on the WebSocket path."""
        while True:
            message = await self._inbox.get()
            if not isinstance(message, str):
                await self._error(ProtocolError("binary_not_supported", "send JSON text messages on the data channel"))
                continue
            await self._event(message)

    async def _read_microphone(self, track: Any) -> None:
        from aiortc.mediastreams import MediaStreamError

        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                self.hang_up("microphone track ended")
                return
            self._last_media = self.session.clock.now()
            pcm = self._to_session(frame)
            if len(pcm):
                await self._microphone(pcm)

    def _to_session(self, frame: Any) -> Int16Array:
        """One decoded frame (any rate, mono or interleaved or planar channels) → 16 kHz mono."""
        arr = frame.to_ndarray()
        channels = len(frame.layout.channels)
        arr = arr.T if frame.format.is_planar else arr.reshape(-1, channels)
        mono = arr.astype(np.int32).mean(axis=1).astype(np.int16)
        if frame.sample_rate != self._in_rate:
            self._in_rate = frame.sample_rate
            self._in = StreamResampler(self._in_rate, PIPELINE_RATE, quality="LQ")
        return self._in.process(mono)

    async def _watch(self) -> None:
        """The media time-out and ``max_session_s``, on the session's clock."""
        clock = self.session.clock
        started = clock.now()
        max_s = self.session.config.server.max_session_s
        while True:
            deadline = self._last_media + self._media_timeout_s
            if max_s > 0:
                deadline = min(deadline, started + max_s)
            await clock.sleep_until(deadline)
            now = clock.now()
            if max_s > 0 and now >= started + max_s:
                await self._error(ProtocolError("session_expired", f"sessions last at most {max_s:g} s"))
                self.hang_up("session_expired")
                return
            if now >= self._last_media + self._media_timeout_s:
                self.hang_up(f"no audio from the peer for {self._media_timeout_s:g} s")
                return

    async def _write(self) -> None:
        async for event in self.session.events():
            await self._on_event(event)

    # ------------------------------------------------------------------ the protocol (Realtime; a subclass may speak another)

    audio_type = AUDIO_DELTA[0]
    """The server event that carries reply audio: on a call it goes on the track instead."""

    async def _microphone(self, pcm: Int16Array) -> None:
        """The microphone's audio at 16 kHz, to the session."""
        await self.session.append_audio(pcm)

    async def _event(self, text: str) -> None:
        """One client event from the data channel: applied, its error answered."""
        await self.commands.handle(text)

    async def _error(self, exc: ProtocolError) -> None:
        await self.commands.error(exc)

    async def _on_event(self, event: Event) -> None:
        """One session event: encoded and sent (its audio onto the track)."""
        for message in self.codec.encode(event):
            await self._send(message)

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == self.audio_type:
            self.speaker.push(np.frombuffer(base64.b64decode(message["delta"]), dtype="<i2"))
            return
        if kind == _CLEARED:
            self.speaker.clear()
        text = json.dumps(message)
        channel = self._channel
        if channel is None or channel.readyState != "open":
            self._pending.append(text)
            return
        channel.send(text)
