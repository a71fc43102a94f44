"""The GPT-Live transport: one ``/v1/live/sessions`` WebSocket ↔ one :class:`~voiceagent.session.Session`.

The client sends ``session.start`` first and waits for ``session.started``; until then anything
else is refused (``session_not_started``).  Each later frame is decoded by :class:`LiveCodec` and
applied in order; a bad frame gets an ``error`` and changes nothing, the connection stays open.

Delegation (client delegation, the default and the one served): the session's model is offered one
tool, :data:`~voiceagent.transports.live_codec.DELEGATE`.  When it calls it the client gets
``session.delegation.created``; after ``acknowledgement_delay_ms`` (unless commentary or
thinking is appended first, which cancels every pending acknowledgement) the agent says in a few
words that it is on it; the application's ``session.commentary.append`` with that
``delegation_id`` is the call's output, and the agent speaks it.  Speech the application asks
for waits, in order, for the reply being spoken to end: one reply at a time.

Cancellation: cancelling :meth:`LiveConnection.run` cancels the speaker, the acknowledgement
timers and the usage reports with it, and closes the session.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from websockets.asyncio.server import ServerConnection

from voiceagent.audio import PIPELINE_RATE, Int16Array
from voiceagent.config.prompts import LIVE_ACKNOWLEDGEMENT, LIVE_COMMENTARY, LIVE_THINKING
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.errors import ProtocolError, excerpt
from voiceagent.events import AudioDelta, Event, FunctionCallAdded, PlaybackCleared, ResponseCreated, ResponseDone
from voiceagent.session import Session
from voiceagent.transports.audio_budget import too_fast
from voiceagent.transports.connection import SessionConnection
from voiceagent.transports.live_codec import (
    AUDIO_DELTA,
    DELEGATE,
    AppendAudio,
    AppendContext,
    Close,
    Command,
    LiveCodec,
    Mute,
    SendKey,
    Start,
    Update,
)
from voiceagent.transports.live_config import LIVE_VOICES, session_resource
from voiceagent.transports.realtime_audio import WireAudio
from voiceagent.transports.realtime_wire import WIRE_RATE

__all__ = ["LIVE_PATH", "LiveConnection", "LiveProtocol", "Reply", "Sideband"]

log = logging.getLogger(__name__)

LIVE_PATH = "/v1/live/sessions"

Reply = Callable[[dict[str, Any]], Awaitable[None]]
"""Where an answer to one client event goes (its error, when it is refused)."""


class Sideband(Protocol):
    """A sideband as the session sees it (:class:`~voiceagent.transports.live_sideband.LiveSideband`)."""

    def put(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for it (never waits: a sideband that stops reading is detached)."""

    def end(self) -> None:
        """The session is over: close it."""


USAGE_EVERY_S = 60.0
_ACK_TOKENS = 24


class LiveProtocol:
    """GPT-Live for one session, whatever carries it: client events in (:meth:`handle_frame`),
    session events out (:meth:`on_event`), sidebands.  ``send`` reaches the primary client,
    ``close`` ends its connection, ``audio_allowed`` is the transport's real-time budget;
    ``fixed_audio``: the audio travels on tracks (WebRTC), not as events.  :meth:`start` before
    the first event, :meth:`stop` after the last (cancels the speaker, the acknowledgement timers
    and the usage reports; closes the sidebands)."""

    def __init__(
        self,
        session: Session,
        voice_rate: int,
        *,
        send: Reply,
        close: Callable[[str], Awaitable[None]],
        audio_allowed: Callable[[float], bool],
        started_at: float,
        fixed_audio: bool = False,
        session_id: str = "",
        press: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.session = session
        self._clock = session.clock
        self.started_at = started_at
        self._send_primary = send
        self._close_primary = close
        self.audio_allowed = audio_allowed
        self._fixed_audio = fixed_audio
        self._tasks: list[asyncio.Task[None]] = []
        self.id = session_id or f"sess_{secrets.token_hex(16)}"
        """The GPT-Live session's id (``session.started``'s, a sideband's address): random, so
        that nobody attaches to a session by counting (the conversation's own ids count up)."""
        self.closed = False
        """Set once :meth:`stop` begins: no sideband may attach any more."""
        self._apply_lock = asyncio.Lock()  # the primary and each sideband apply events in their own tasks
        self._acks_cancelled = 0  # bumped by appended commentary or thinking: older acknowledgements are not said
        self.codec = LiveCodec(voice_rate)
        self._voice_rate = voice_rate
        self._press = press  # a SIP call's keypad (None: transport.dtmf.send is refused)
        self._muted = False
        self._idle = asyncio.Event()  # no response is being generated or spoken
        self._idle.set()
        self._speech: asyncio.Queue[tuple[ResponseOptions, int | None]] = asyncio.Queue()
        """What to say, in order: (options, None), or an acknowledgement (options, the
        cancellations counted when it was asked for)."""
        self._acks: set[asyncio.Task[None]] = set()
        self._server_instructions = session.settings.instructions
        self._expires_at = 0
        self._closed_told = False
        self.sidebands: set[Sideband] = set()
        """Trusted servers' sockets attached to this session (:mod:`.live_sideband`)."""
        self.started: dict[str, Any] | None = None
        """The ``session.started`` event, replayed to each sideband as it attaches."""

    # ------------------------------------------------------------------ timeline and sending

    def now_ms(self) -> float:
        """Milliseconds since the connection opened: the session's timeline."""
        return (self._clock.now() - self.started_at) * 1000.0

    def _resource(self) -> dict[str, Any]:
        assert self.codec.config is not None
        return session_resource(self.codec.config, self.id, self._expires_at, self.session.settings.instructions)

    def _usage(self) -> dict[str, Any]:
        return {"seconds": float(int(self.now_ms() / 1000.0))}

    async def error(self, exc: ProtocolError, reply: Reply | None = None) -> None:
        """Tell whoever sent the bad event (the primary unless ``reply`` says otherwise)."""
        self.session.metrics.error(exc.code)
        message = self.codec.error(exc)
        await (reply(message) if reply is not None else self.send_primary(message))

    async def send_primary(self, message: dict[str, Any]) -> None:
        await self._send_primary(message)

    async def send(self, message: dict[str, Any]) -> None:
        """To the primary socket and every sideband."""
        await self.send_primary(message)
        self.tell_sidebands(message)

    def tell_sidebands(self, message: dict[str, Any]) -> None:
        for sideband in list(self.sidebands):
            sideband.put(message)

    async def handle_frame(self, frame: str | bytes, reply: Reply | None = None) -> Command | None:
        """Decode one client frame and apply it; its error goes to ``reply`` (the primary's by
        default).  The command applied, or None."""
        if isinstance(frame, bytes):
            why = "send JSON text frames; audio goes base64 in session.input_audio.append"
            await self.error(ProtocolError("binary_not_supported", why), reply)
            return None
        try:
            cmd = self.codec.decode(frame)
            await self.apply(cmd)
        except ProtocolError as exc:
            await self.error(exc, reply)
            return None
        return cmd

    # ------------------------------------------------------------------ lifetime

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._speak(), name=f"{self.session.id}.speaker"),
            asyncio.create_task(self._report_usage(), name=f"{self.session.id}.usage"),
        ]

    async def stop(self, reason: str = "connection_lost") -> None:
        """``reason``: ``session.closed``'s, unless it was told already (the primary went
        without closing the session, or a SIP call ended: ``remote_hangup``)."""
        self.closed = True
        if self.codec.config is not None and not self._closed_told:
            self._closed_told = True
            self.tell_sidebands(self._closed_message(reason))
        for sideband in list(self.sidebands):
            sideband.end()
        tasks = [*self._tasks, *self._acks]
        for task in tasks:
            task.cancel()
        for task, result in zip(tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True):
            if isinstance(result, Exception):
                log.error("session %s: GPT-Live task %s failed: %r", self.session.id, task.get_name(), result)

    async def apply(self, cmd: Command) -> None:
        """Apply one decoded client event; :class:`ProtocolError` when the session refuses it.
        One at a time, whoever sent it (the primary, a sideband): an append reads the
        instructions, then writes them."""
        try:
            async with self._apply_lock:
                await self._apply(cmd)
        except ProtocolError as exc:
            if exc.event_id is None:
                exc.event_id = cmd.event_id
            raise

    async def _apply(self, cmd: Command) -> None:
        s = self.session
        if isinstance(cmd, Start):
            await self._start(cmd)
        elif isinstance(cmd, Update):
            self.codec.config = cmd.config
            await self.send(self.codec.message("session.updated", cmd.event_id, session=self._resource()))
        elif isinstance(cmd, AppendAudio):
            if not self.audio_allowed(len(cmd.pcm) * 1000.0 / PIPELINE_RATE):
                raise too_fast(s.config.server.audio_burst_s)
            await self.microphone(cmd.pcm)
        elif isinstance(cmd, Mute):
            self._muted = cmd.muted
            kind = "session.input_audio.muted" if cmd.muted else "session.input_audio.unmuted"
            await self.send(self.codec.message(kind, cmd.event_id))
        elif isinstance(cmd, AppendContext):
            await self._append(cmd)
        elif isinstance(cmd, Close):
            await self._close("close_requested", cmd.event_id)
        elif isinstance(cmd, SendKey):
            if self._press is None:
                raise ProtocolError("unsupported_event", "transport.dtmf.send is for SIP calls only", param="type")
            await self._press(cmd.key)
            self.tell_sidebands(self.codec.key_sent(cmd.key, cmd.event_id))

    def key_received(self, key: str) -> None:
        """The caller pressed ``key`` (a SIP call): its sidebands are told."""
        self.tell_sidebands(self.codec.key_received(key))

    async def microphone(self, pcm: Int16Array) -> None:
        """The caller's audio at 16 kHz (from events or a track): reflected to the sidebands
        before muting, as OpenAI's sideband hears it; muted, the model hears silence instead, so
        the session's timeline goes on."""
        if self.sidebands:
            reflected = self.codec.reflect_input(pcm)
            if reflected is not None:
                self.tell_sidebands(reflected)
        await self.session.append_audio(pcm * 0 if self._muted else pcm)

    async def _start(self, cmd: Start) -> None:
        s, cfg = self.session, cmd.config
        voice = s.resolve_voice(cfg.voice) or (s.config.tts.model if cfg.voice in LIVE_VOICES else None)
        if voice is None:
            raise ProtocolError(
                "unsupported_value",
                f"voice {excerpt(cfg.voice)} is neither one of GPT-Live's nor of this server's ({', '.join(s.voice_names)})",
                param="session.audio.output.voice",
            )
        developer = [text for role, text in cfg.input if role == "developer"]
        instructions = "\n\n".join([cfg.instructions or self._server_instructions, *developer])
        changes: dict[str, Any] = {"instructions": instructions, "voice": voice, "tools": (DELEGATE,), "tool_choice": "auto"}
        await s.check_update(**changes)
        s.update(**changes)
        for role, text in cfg.input:
            if role != "developer":
                await s.add_text(text, role)
        if not self._fixed_audio:  # on tracks the audio is the track's, whatever a format says
            audio = WireAudio(self._voice_rate, pcm_rate=cfg.rate if cfg.format == "audio/pcm" else WIRE_RATE)
            audio.set_input_format(cfg.format)
            audio.output_format = cfg.format
            self.codec.audio = audio
        self.codec.config = cfg
        limit = s.config.server.max_session_s
        self._expires_at = int(time.time() + (limit if limit > 0 else 24 * 3600))
        if cfg.safety_identifier is not None:
            log.info("session %s: safety_identifier %s", s.id, excerpt(cfg.safety_identifier))
        self.started = self.codec.message("session.started", cmd.event_id, session=self._resource())
        await self.send(self.started)

    async def _append(self, cmd: AppendContext) -> None:
        s = self.session
        at = int(self.now_ms())
        if cmd.kind in ("thinking", "commentary"):
            self._cancel_acks()
        if cmd.kind == "commentary" and cmd.delegation_id is not None and await self._answer(cmd.delegation_id, cmd.content):
            self._speech.put_nowait((ResponseOptions(tools=()), None))
        elif cmd.kind == "commentary":
            told = LIVE_COMMENTARY.format(content=cmd.content)
            self._speech.put_nowait((ResponseOptions(closing=told, tools=()), None))
        else:
            note = cmd.content if cmd.kind == "instructions" else LIVE_THINKING.format(content=cmd.content)
            instructions = f"{s.settings.instructions}\n\n{note}"
            await s.check_update(instructions=instructions)
            s.update(instructions=instructions)
        await self.send(self.codec.message(f"session.{cmd.kind}.appended", cmd.event_id, start_ms=at, end_ms=at))

    def _closed_message(self, reason: str, event_id: str | None = None) -> dict[str, Any]:
        return self.codec.message("session.closed", event_id, reason=reason, session=self._resource(), usage=self._usage())

    async def _close(self, reason: str, event_id: str | None = None) -> None:
        """``session.closed`` (once, however many ask), then the close frame (1000)."""
        if self.codec.config is not None and not self._closed_told:
            self._closed_told = True
            await self.send(self._closed_message(reason, event_id))
        await self._close_primary(reason)

    async def expire(self, code: str, message: str) -> None:
        """The session ends for ``code`` (a limit): an ``error`` saying why, then ``session.closed``."""
        await self.error(ProtocolError(code, message))
        if self.codec.config is not None:
            self._closed_told = True
            await self.send(self._closed_message("expired" if code == "session_expired" else "connection_lost"))

    async def _answer(self, delegation_id: str, content: str) -> bool:
        """The application's result becomes the delegation's output; False when the conversation
        has moved on and closed the call meanwhile (a later turn's prompt does): the result is
        then told as the session's commentary instead, never lost."""
        try:
            await self.session.add_tool_output(delegation_id, content)
        except ProtocolError as exc:
            if exc.code != "tool_output_already_received":
                raise
            log.info("session %s: delegation %s was closed before its result came; told as commentary", self.session.id, delegation_id)
            return False
        finally:
            self.codec.delegations.pop(delegation_id, None)
        return True

    # ------------------------------------------------------------------ speaking

    def _cancel_acks(self) -> None:
        """Every pending acknowledgement: its timer, or its place in the queue, is dropped."""
        self._acks_cancelled += 1
        for task in self._acks:
            task.cancel()

    async def _acknowledge(self, delay_ms: int) -> None:
        """After ``delay_ms``, ask for the spoken acknowledgement (cancelled: never asked)."""
        await self._clock.sleep_until(self._clock.now() + delay_ms / 1000.0)
        s = self.session
        ack = ResponseOptions(
            instructions=s.settings.instructions + LIVE_ACKNOWLEDGEMENT, tools=(), out_of_band=True, max_tokens=_ACK_TOKENS
        )
        self._speech.put_nowait((ack, self._acks_cancelled))

    async def _speak(self) -> None:
        """Answer each request for speech in order, each once no reply is active; a reply that a
        user turn starts first is waited out (the core refuses a second one at once)."""
        while True:
            options, ack = await self._speech.get()
            while True:
                await self._idle.wait()
                if ack is not None and ack != self._acks_cancelled:
                    break  # commentary or thinking came while it waited: not said
                try:
                    await self.session.respond(options)
                    break
                except ProtocolError as exc:
                    if self.session.active_response_id is None:
                        await self.error(exc)
                        break
                    self._idle.clear()
                except Exception:  # a model or a send failing must not silence later speech
                    log.exception("session %s: GPT-Live speech failed", self.session.id)
                    break

    async def _report_usage(self) -> None:
        """``session.usage.updated`` once a minute of the session."""
        while True:
            await self._clock.sleep_until(self.started_at + (int(self.now_ms() / 1000.0 / USAGE_EVERY_S) + 1) * USAGE_EVERY_S)
            if self.codec.config is not None:
                await self.send(self.codec.message("session.usage.updated", usage=self._usage()))

    # ------------------------------------------------------------------ writing

    async def on_event(self, event: Event) -> None:
        """One session event to the client and the sidebands, as soon as it exists."""
        if isinstance(event, ResponseCreated):
            self._idle.clear()
        elif isinstance(event, ResponseDone) and self.session.active_response_id is None:
            self._idle.set()
        now = self.now_ms()
        if self.sidebands and isinstance(event, AudioDelta | ResponseDone | PlaybackCleared):
            for reflected in self.codec.reflect_output(event, now):
                self.tell_sidebands(reflected)
        for message in self.codec.encode(event, now):
            # Reply audio goes to the primary in its format; sidebands got theirs above.
            await (self.send_primary(message) if message["type"] == AUDIO_DELTA else self.send(message))
        if isinstance(event, FunctionCallAdded) and event.name == DELEGATE.name and self.codec.config is not None and not self.closed:
            ack = asyncio.create_task(self._acknowledge(self.codec.config.acknowledgement_delay_ms), name=f"{self.session.id}.ack")
            self._acks.add(ack)
            ack.add_done_callback(self._acks.discard)


class LiveConnection(SessionConnection):
    """GPT-Live over its primary WebSocket (``/v1/live/sessions``, ``client.live.connect()``)."""

    def __init__(self, ws: ServerConnection, session: Session, voice_rate: int) -> None:
        super().__init__(ws, session)
        self.live = LiveProtocol(
            session, voice_rate, send=self.send, close=self._close, audio_allowed=self.audio_allowed, started_at=self.started_at
        )

    async def _close(self, reason: str) -> None:
        await self.ws.close(1000, reason)

    async def serve(self) -> None:
        self.live.start()
        try:
            async for frame in self.frames():
                if isinstance(await self.live.handle_frame(frame), Close):
                    return
        finally:
            await self.live.stop()

    async def expire(self, code: str, message: str) -> None:
        await self.live.expire(code, message)

    async def write(self) -> None:
        async for event in self.session.events():
            await self.live.on_event(event)
