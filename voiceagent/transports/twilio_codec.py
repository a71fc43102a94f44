"""Twilio Media Streams as a pure codec: text frames in → commands, session events → messages.

No sockets and no event loop.  :meth:`TwilioCodec.decode` turns one text frame from Twilio into a
:data:`TwilioCommand` or raises :class:`~voiceagent.errors.ProtocolError`; :meth:`TwilioCodec.encode`
turns one session event into the messages to send back.

Audio: inbound μ-law 8 kHz is decoded and resampled to the pipeline's 16 kHz; reply audio (the
voice's rate) is resampled to 8 kHz and μ-law encoded, one resampler per response (soxr, state
carried between chunks).  A stream whose ``start.mediaFormat`` asks for :data:`WIDEBAND` (the SIP
gateway's G.722 calls) carries 16-bit PCM at 16 kHz both ways instead.

Playback position: every outgoing ``media`` message is followed by a ``mark`` whose name maps to
the item position (ms of the assistant item, counted in samples sent) at the end of that
chunk.  Twilio echoes a mark once
the audio before it has **played**, so the last echoed mark of an item is what the caller heard.
After a ``clear`` Twilio also echoes the marks of the audio it discarded; those are ignored.

Validation: numbers may be JSON numbers or digit strings (Twilio sends strings); a frame that is
not a JSON object, has no or an unknown ``event``, lacks a required field, carries bad base64,
names another stream, or sends media before ``start`` raises ``ProtocolError``.
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler, mulaw_decode, mulaw_encode
from voiceagent.errors import ProtocolError, excerpt
from voiceagent.events import AudioDelta, Event, PlaybackCleared, ResponseCreated, ResponseDone, ResponseStatus
from voiceagent.transports.fields import parse_object, require_str

__all__ = [
    "TWILIO_RATE",
    "Connected",
    "Dtmf",
    "Media",
    "MarkEcho",
    "Start",
    "Stop",
    "TwilioCodec",
    "TwilioCommand",
    "after_stream_twiml",
    "stream_url",
    "twiml",
]

TWILIO_RATE = 8000
_ENCODING = "audio/x-mulaw"
WIDEBAND = ("audio/x-l16", 16000)
"""The one other media format a stream may ask for in ``start.mediaFormat``: 16-bit
little-endian PCM at 16 kHz, which Twilio never sends but the SIP gateway does for a G.722 call
(voiceagent/sip), so that a wideband call reaches the transcriber wideband."""


@dataclass(frozen=True)
class Connected:
    protocol: str
    version: str


@dataclass(frozen=True)
class Start:
    stream_sid: str
    call_sid: str
    account_sid: str
    tracks: tuple[str, ...]
    custom_parameters: dict[str, str]


@dataclass(frozen=True)
class Media:
    """Caller audio, already at 16 kHz (``pcm`` may be empty while the resampler fills)."""

    pcm: Int16Array
    track: str
    timestamp_ms: int | None


@dataclass(frozen=True)
class Dtmf:
    digit: str


@dataclass(frozen=True)
class MarkEcho:
    """Twilio echoed mark ``name``; ``item_id``/``played_ms`` are set when it advanced playback."""

    name: str
    item_id: str | None
    played_ms: float | None


@dataclass(frozen=True)
class Stop:
    call_sid: str


TwilioCommand = Connected | Start | Media | Dtmf | MarkEcho | Stop


@dataclass
class _Outgoing:
    item_id: str
    resampler: StreamResampler
    sent: int = 0  # samples of this item sent so far, at the call's rate


@dataclass
class _MarkBook:
    """Playback bookkeeping of one call."""

    pending: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Marks sent and not yet echoed: name → (item id, item position in ms at the mark)."""
    played: dict[str, float] = field(default_factory=dict)
    """Item id → ms the caller heard (the position of its last mark echoed while it played)."""
    cleared: set[str] = field(default_factory=set)
    """Items whose playback a ``clear`` stopped: their later echoes are discards, not playback."""


class TwilioCodec:
    """Per-call protocol state: stream id, resamplers, and the marks that give playback position."""

    def __init__(self, voice_rate: int) -> None:
        self.voice_rate = voice_rate
        self.stream_sid: str | None = None
        self.call_sid = ""
        self.last_sequence = 0
        self.sequence_gaps = 0
        """How many times a sequence number skipped ahead (frames lost on the way)."""
        self.rate = TWILIO_RATE
        """The call's audio rate both ways: 8 kHz μ-law, or 16 kHz PCM (:data:`WIDEBAND`)."""
        self._in_rs = StreamResampler(TWILIO_RATE, PIPELINE_RATE, quality="LQ")  # low delay: see audio.StreamResampler
        self._out: dict[str, _Outgoing] = {}  # by response id
        self._marks = _MarkBook()
        self._complete: set[str] = set()  # items whose whole audio was sent
        self._mark_ids = itertools.count(1)
        self.sent_audio: Callable[[Int16Array, int], None] | None = None
        """Told every sample the media messages carry, in order, at :attr:`rate` (an echo
        canceller's reference: voiceagent/transports/stream_echo.py)."""

    @property
    def started(self) -> bool:
        return self.stream_sid is not None

    # ------------------------------------------------------------------ Twilio → server

    def decode(self, text: str) -> TwilioCommand:
        msg = parse_object(text, "a Media Streams message")
        event = msg.get("event")
        if not isinstance(event, str):
            raise ProtocolError("missing_event", "a Media Streams message needs a string 'event'", param="event")
        if "sequenceNumber" in msg:
            self._sequence(_int(msg, "sequenceNumber", "sequenceNumber"))
        if event == "connected":
            return Connected(_opt_str(msg, "protocol"), _opt_str(msg, "version"))
        if event == "start":
            return self._start(msg)
        if event not in ("media", "dtmf", "mark", "stop"):
            raise ProtocolError("unknown_event", f"unknown Media Streams event {excerpt(event)}", param="event")
        if self.stream_sid is None:
            raise ProtocolError("not_started", f"{excerpt(event)} before 'start'", param="event")
        sid = msg.get("streamSid")
        if sid is not None and sid != self.stream_sid:
            raise ProtocolError(
                "wrong_stream", f"streamSid {excerpt(sid)} is not this call's stream {excerpt(self.stream_sid)}", param="streamSid"
            )
        if event == "media":
            return self._media(msg)
        if event == "dtmf":
            dtmf = _obj(msg, "dtmf")
            return Dtmf(require_str(dtmf, "digit", "dtmf.digit"))
        if event == "mark":
            return self._mark_echo(require_str(_obj(msg, "mark"), "name", "mark.name"))
        stop = msg.get("stop")
        return Stop(_opt_str(stop, "callSid") if isinstance(stop, dict) else "")

    def _sequence(self, number: int) -> None:
        if self.last_sequence and number > self.last_sequence + 1:
            self.sequence_gaps += 1
        self.last_sequence = max(self.last_sequence, number)

    def _start(self, msg: dict[str, Any]) -> Start:
        if self.stream_sid is not None:
            raise ProtocolError("already_started", "a second 'start' on one stream", param="event")
        start = _obj(msg, "start")
        sid = start.get("streamSid", msg.get("streamSid"))
        if not isinstance(sid, str) or not sid:
            raise ProtocolError("missing_field", "'start.streamSid' must be a non-empty string", param="start.streamSid")
        fmt = start.get("mediaFormat", {"encoding": _ENCODING, "sampleRate": TWILIO_RATE, "channels": 1})
        if not isinstance(fmt, dict):
            raise ProtocolError("invalid_value", "'start.mediaFormat' must be an object", param="start.mediaFormat")
        encoding = fmt.get("encoding", _ENCODING)
        rate = _int(fmt, "sampleRate", "start.mediaFormat.sampleRate") if "sampleRate" in fmt else TWILIO_RATE
        channels = _int(fmt, "channels", "start.mediaFormat.channels") if "channels" in fmt else 1
        if (encoding, rate) not in ((_ENCODING, TWILIO_RATE), WIDEBAND) or channels != 1:
            raise ProtocolError(
                "unsupported_format",
                f"only {_ENCODING} at {TWILIO_RATE} Hz or {WIDEBAND[0]} at {WIDEBAND[1]} Hz, mono, is supported,"
                f" got {encoding} at {rate} Hz x{channels}",
                param="start.mediaFormat",
            )
        tracks = start.get("tracks", ["inbound"])
        if not isinstance(tracks, list) or not all(isinstance(t, str) for t in tracks):
            raise ProtocolError("invalid_value", "'start.tracks' must be a list of strings", param="start.tracks")
        params = start.get("customParameters") or {}
        if not isinstance(params, dict):
            raise ProtocolError("invalid_value", "'start.customParameters' must be an object", param="start.customParameters")
        self.stream_sid = sid
        self.call_sid = _opt_str(start, "callSid")
        if (encoding, rate) == WIDEBAND:
            self.rate = rate
            self._in_rs = StreamResampler(rate, PIPELINE_RATE, quality="LQ")
        return Start(sid, self.call_sid, _opt_str(start, "accountSid"), tuple(tracks), {str(k): str(v) for k, v in params.items()})

    def _media(self, msg: dict[str, Any]) -> Media:
        media = _obj(msg, "media")
        payload = require_str(media, "payload", "media.payload")
        try:
            raw = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("invalid_audio", "'media.payload' is not valid base64", param="media.payload") from None
        track = media.get("track", "inbound")
        if not isinstance(track, str):
            raise ProtocolError("invalid_value", "'media.track' must be a string", param="media.track")
        timestamp = _int(media, "timestamp", "media.timestamp") if "timestamp" in media else None
        if track not in ("inbound", "inbound_track"):
            # Only the caller's side is conversation input; an outbound track echo is not.
            return Media(mulaw_decode(b""), track, timestamp)
        return Media(self._in_rs.process(self._decode(raw)), track, timestamp)

    def _decode(self, raw: bytes) -> Int16Array:
        if self.rate == TWILIO_RATE:
            return mulaw_decode(raw)
        if len(raw) % 2:
            raise ProtocolError("invalid_audio", "16-bit PCM needs an even number of bytes", param="media.payload")
        return np.frombuffer(raw, dtype="<i2").astype(np.int16)

    def _encode(self, pcm: Int16Array) -> bytes:
        return mulaw_encode(pcm) if self.rate == TWILIO_RATE else pcm.astype("<i2").tobytes()

    def _mark_echo(self, name: str) -> MarkEcho:
        entry = self._marks.pending.pop(name, None)
        if entry is None:
            raise ProtocolError("unknown_mark", f"mark {excerpt(name)} was never sent on this stream", param="mark.name")
        item_id, end_ms = entry
        if item_id in self._marks.cleared:
            return MarkEcho(name, None, None)  # echoed because ``clear`` discarded its audio
        played = max(self._marks.played.get(item_id, 0.0), end_ms)
        self._marks.played[item_id] = played
        return MarkEcho(name, item_id, played)

    def played_ms(self, item_id: str) -> float:
        """Milliseconds of assistant item ``item_id`` the caller has heard (from echoed marks)."""
        return self._marks.played.get(item_id, 0.0)

    def fully_played(self, item_id: str) -> bool:
        """True when all of the item was sent (its response completed) and every mark came back."""
        return item_id in self._complete and not any(item == item_id for item, _ in self._marks.pending.values())

    @property
    def marks_pending(self) -> int:
        """Marks sent whose echo has not arrived yet."""
        return len(self._marks.pending)

    # ------------------------------------------------------------------ server → Twilio

    def encode(self, ev: Event) -> list[dict[str, Any]]:
        """Messages for one session event (none for events a phone call has no use for)."""
        if self.stream_sid is None:
            return []
        if isinstance(ev, ResponseCreated):
            self._out[ev.response_id] = _Outgoing(ev.item_id, StreamResampler(self.voice_rate, self.rate))
            return []
        if isinstance(ev, AudioDelta):
            out = self._out.get(ev.response_id)
            if out is None:
                return []
            return self._chunk(out, out.resampler.process(ev.pcm))
        if isinstance(ev, PlaybackCleared):
            self._marks.cleared.add(ev.item_id)
            self._out.pop(ev.response_id, None)
            return [{"event": "clear", "streamSid": self.stream_sid}]
        if isinstance(ev, ResponseDone):
            out = self._out.pop(ev.response_id, None)
            if out is None or ev.status is not ResponseStatus.COMPLETED:
                return []
            self._complete.add(out.item_id)
            return self._chunk(out, out.resampler.flush())
        return []

    def media(self, pcm: Int16Array) -> list[dict[str, Any]]:
        """``media`` messages of audio at :attr:`rate` that belongs to no reply (keypad tones), 20 ms
        each, without marks: no playback position hangs on it."""
        if self.stream_sid is None:
            return []
        frame = self.rate // 50
        if self.sent_audio is not None and len(pcm):
            self.sent_audio(pcm, self.rate)
        payloads = (base64.b64encode(self._encode(pcm[i : i + frame])).decode("ascii") for i in range(0, len(pcm), frame))
        return [{"event": "media", "streamSid": self.stream_sid, "media": {"payload": p}} for p in payloads]

    def _chunk(self, out: _Outgoing, pcm: Int16Array) -> list[dict[str, Any]]:
        if len(pcm) == 0:
            return []
        # soxr's output starts at the item's first sample, so samples sent are item time: the
        # mark is at the end of everything sent so far (the resampler's tail is still inside).
        out.sent += len(pcm)
        if self.sent_audio is not None:
            self.sent_audio(pcm, self.rate)
        name = f"m{next(self._mark_ids)}"
        self._marks.pending[name] = (out.item_id, out.sent * 1000.0 / self.rate)
        payload = base64.b64encode(self._encode(pcm)).decode("ascii")
        return [
            {"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}},
            {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}},
        ]


# ---------------------------------------------------------------------- TwiML


def stream_url(public_url: str, host: str | None, forwarded_proto: str | None = None) -> str:
    """The ``wss://…/twilio`` URL Twilio should open.

    ``public_url`` (``server.public_url``; ws/wss/http/https, with or without a path prefix) wins;
    otherwise it is built from the request's ``Host`` header: ``wss`` (Twilio requires TLS, which a
    tunnel such as ngrok terminates) unless ``X-Forwarded-Proto`` says ``http`` or the host is a
    loopback address.
    """
    if public_url:
        parts = urlsplit(public_url)
        scheme = {"https": "wss", "http": "ws", "wss": "wss", "ws": "ws"}.get(parts.scheme)
        if scheme is None or not parts.netloc:
            raise ValueError(f"server.public_url must be a ws://, wss://, http:// or https:// URL, got {public_url!r}")
        return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/twilio"
    if not host:
        raise ValueError("no Host header and no server.public_url: cannot tell Twilio where to connect")
    hostname = urlsplit(f"//{host}").hostname or ""
    if forwarded_proto:
        scheme = "ws" if forwarded_proto.split(",")[0].strip().lower() == "http" else "wss"
    else:
        scheme = "ws" if hostname in ("localhost", "127.0.0.1", "::1") else "wss"
    return f"{scheme}://{host}/twilio"


def twiml(url: str, action: str | None = None) -> str:
    """The TwiML document that connects a call to the media stream at ``url``; ``action``: where
    Twilio asks what to do once the server ends the stream (a transfer's ``<Dial>``)."""
    after = f' action={quoteattr(action)} method="GET"' if action else ""
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Connect{after}><Stream url={quoteattr(url)}/></Connect></Response>\n'


def after_stream_twiml(target: str | None, refuse: int | None = None) -> str:
    """What a call does once the server ended its stream: dial ``target`` (a transfer: a number,
    ``tel:`` or ``sip:`` URI), be refused (``refuse``: a SIP status, for a call the SIP gateway has
    not answered; Twilio's ``<Reject>`` reads ``reason`` only, the gateway ``status``), or hang up."""
    if refuse is not None:
        body = f'<Reject reason="{"busy" if refuse == 486 else "rejected"}" status="{int(refuse)}"/>'
    elif target is None:
        body = "<Hangup/>"
    elif target.startswith(("sip:", "sips:")):
        body = f"<Dial><Sip>{escape(target)}</Sip></Dial>"
    else:
        body = f"<Dial>{escape(target.removeprefix('tel:'))}</Dial>"
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<Response>{body}</Response>\n'


# ---------------------------------------------------------------------- field helpers


def _obj(msg: dict[str, Any], key: str) -> dict[str, Any]:
    value = msg.get(key)
    if not isinstance(value, dict):
        raise ProtocolError("missing_field", f"'{key}' must be an object", param=key)
    return value


def _opt_str(msg: dict[str, Any], key: str) -> str:
    value = msg.get(key, "")
    return value if isinstance(value, str) else str(value)


def _int(msg: dict[str, Any], key: str, param: str) -> int:
    """A non-negative integer sent as a JSON number or, as Twilio does, as a digit string."""
    value = msg.get(key)
    if isinstance(value, bool):
        raise ProtocolError("invalid_value", f"'{param}' must be a number", param=param)
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        try:
            return int(value)
        except ValueError:  # more digits than Python converts to an int (sys.get_int_max_str_digits)
            pass
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    raise ProtocolError("invalid_value", f"'{param}' must be a non-negative integer (or a digit string), got {shown}", param=param)
