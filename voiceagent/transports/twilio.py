"""The Twilio Media Streams transport: one phone call's WebSocket ↔ one :class:`~voiceagent.session.Session`.

Reader: each text frame is decoded by :class:`~voiceagent.transports.twilio_codec.TwilioCodec`;
caller audio goes to the session at 16 kHz, echoed marks advance the playback position, ``stop``
ends the call.  Media Streams has no error message, so a frame the codec refuses (bad JSON, an
unknown event, bad base64, media before ``start``, a binary frame) is logged and the connection is
closed with code 1008 and the reason; other calls are not affected.

Writer: reply audio goes out as ``media`` + ``mark`` pairs as soon as each chunk exists.  On
barge-in (:class:`~voiceagent.events.PlaybackCleared`) a ``clear`` is sent at once and the
assistant item is truncated to what the echoed marks say the caller heard.

Keys and call control (issue #68, item 4): the caller's ``dtmf`` keys are collected until ``#``
or ``phone.dtmf_gap_ms`` without another, then become one user message and a response (a reply
being spoken is cancelled first: a key press answers a question, as speech would).  The
session's call-control tools (:class:`~voiceagent.events.CallControl`): ``send_dtmf`` plays
keypad tones in the call's audio (Media Streams has no key message; on the SIP gateway's calls it
is a ``dtmf`` message instead, which the gateway sends as RFC 4733 telephone events); ``end_call`` and
``transfer_call`` end the stream once the goodbye after the tool call has been heard (every mark
echoed).  Twilio then runs the ``<Connect>``'s ``action``: the server answers it with a
``<Dial>`` for a transfer (:attr:`TwilioConnection.transfer`), else ``<Hangup/>``.

Calls from the SIP gateway (its ``start`` carries ``customParameters.voiceagent_gateway =
"sip"``) are also :class:`~voiceagent.transports.phone_calls.PhoneCall` objects, for OpenAI's
call-control API: the gateway answers the call only when this connection sends it ``{"event":
"answer"}``, at once, or, with ``server.sip_webhook_url`` set, once the application accepted
the ``realtime.call.incoming`` or ``live.transport.incoming`` webhook (``server.sip_webhook_events``;
a call neither accepted nor rejected within ``server.sip_accept_timeout_s`` of the webhook's
delivery is refused with 480).  Accepted on Realtime, the session's events and the caller's keys
(``input_audio_buffer.dtmf_event_received``) go to the connections attached to the call; on
GPT-Live, to its sidebands (:mod:`~voiceagent.transports.live_phone`).

Recordings (``server.recordings_dir``, off by default): the call's audio both ways and its
transcript are written when the stream ends (:mod:`~voiceagent.transports.call_recording`), named
by the gateway's call id or Twilio's call sid.

Cancellation: the key collector's timer and the ringing call's wait are tasks of the
connection, cancelled with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection

from voiceagent.audio import PIPELINE_RATE, Int16Array
from voiceagent.echo import echo_cancellation_on
from voiceagent.errors import ProtocolError
from voiceagent.events import CallControl, InputTranscriptDone, PlaybackCleared, ResponseDone
from voiceagent.session import Session
from voiceagent.tools.phone import HangUp, SendDigits, Transfer
from voiceagent.transports.call_recording import CallRecorder, prune
from voiceagent.transports.connection import SessionConnection
from voiceagent.transports.dtmf import dtmf_tones
from voiceagent.transports.live_phone import LivePhoneCall
from voiceagent.transports.machine_answer import MachineWatch
from voiceagent.transports.machine_detection import Answered
from voiceagent.transports.phone_calls import CallStateError, OutboundCall, PhoneCall, PhoneCalls, session_changes
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.stream_echo import StreamEcho
from voiceagent.transports.twilio_codec import Dtmf, MarkEcho, Media, Start, Stop, TwilioCodec
from voiceagent.transports.webhooks import WEBHOOK_POOL, WebhookError, deliver, incoming_call, incoming_live

__all__ = ["CLOSE_POLICY", "TwilioConnection"]

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008  # RFC 6455 "policy violation": the peer broke the protocol


def _file_name(call_sid: str) -> str:
    """A call id as a file name: what a peer sent, so only letters, digits, ``-`` and ``_``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", call_sid)[:64] or "call"


CLOSE_UNSUPPORTED = 1003  # RFC 6455 "unsupported data": a binary frame


class TwilioConnection(SessionConnection):
    """Serves one Media Streams connection.  ``dtmf``: every key the caller pressed, in order."""

    def __init__(
        self,
        ws: ServerConnection,
        session: Session,
        voice_rate: int,
        calls: PhoneCalls | None = None,
        webhook: tuple[str, str, tuple[str, ...]] | None = None,
        after_stream: Callable[[str, str | None, int | None], None] = lambda call_sid, transfer, refuse: None,
    ) -> None:
        super().__init__(ws, session)
        self.codec = TwilioCodec(voice_rate)
        self._voice_rate = voice_rate
        self._calls = calls
        self._webhook = webhook  # (url, secret, events) announcing the gateway's calls
        self.call: PhoneCall | None = None
        """The gateway's call this stream carries (None for a Twilio call)."""
        self.live: LivePhoneCall | None = None
        """Set when the call was accepted on GPT-Live's terms."""
        self._ended_here = False  # the server ended the call (an application's action, the agent's tool)
        self._stopped = False  # the gateway said the call ended: the caller hung up
        self.refuse: int | None = None
        """A SIP status the call is refused with (the application rejected it, or no answer came)."""
        self._ringing: asyncio.Task[None] | None = None
        self._after_stream = after_stream
        """Told (call sid, transfer target, refusal) before the stream closes: the call's next
        step must be known before the gateway or Twilio asks for it."""
        self.dtmf: list[str] = []
        self._gateway = False  # the SIP gateway's call (its start says so): keys go to it as a message
        self._echo: StreamEcho | None = None  # the agent's voice sent back, removed (a Twilio call's: its start decides)
        self.dropped_ms = 0.0
        """Caller audio refused for arriving faster than real time (``server.audio_burst_s``)."""
        self.transfer: Transfer | None = None
        """Set when the agent transferred the call: the ``<Connect>`` action's answer dials it."""
        self._keys: list[str] = []  # pressed and not yet given to the conversation
        self._keys_due: asyncio.Task[None] | None = None
        self._ending: CallControl | None = None  # a hang-up or transfer waiting for its goodbye
        self._goodbye_done = False
        self._played = asyncio.Condition()  # notified at each mark echo
        folder = session.config.server.recordings_dir
        self.recorder: CallRecorder | None = None
        """The call's recording (``server.recordings_dir``), named once the stream starts."""
        self._recordings = Path(folder).expanduser() if folder else None
        self._call_name = ""
        self._placed: OutboundCall | None = None
        self.machine: MachineWatch | None = None
        """Answering-machine detection, for a placed call that asked for it."""

    def _record(self, pcm: Int16Array) -> None:
        """The caller's audio to the recording, which starts with the first of it (a SIP call
        rings before it has any; one never answered leaves no recording)."""
        if self.recorder is None:
            assert self._recordings is not None
            clock = self.session.clock
            started = clock.now() - len(pcm) / PIPELINE_RATE  # this chunk's first sample, not its arrival
            self.recorder = CallRecorder(self._recordings, self._call_name or _file_name(self.session.id), clock, started)
        self.recorder.caller(pcm)

    async def run(self) -> None:
        """As every connection's, then the recording: once the writer has seen the call's last
        event and the session is closed (its engines and its place are free meanwhile)."""
        try:
            await super().run()
        finally:
            await self._save_recording()

    async def serve(self) -> None:
        """Serve until ``stop`` or the peer goes away."""
        try:
            await self._serve()
        finally:
            try:
                tasks = [t for t in (self._keys_due, self._ringing) if t is not None]
                for task in tasks:
                    task.cancel()
                # Their own failures are logged, not raised here; a cancellation of serve() itself
                # still propagates from the gather.
                for task, result in zip(tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True):
                    if isinstance(result, Exception):
                        log.warning("twilio stream %s: %s failed: %r", self.codec.stream_sid or "-", task.get_name(), result)
            finally:
                try:
                    if self.live is not None:
                        reason = "remote_hangup" if self._stopped else "close_requested" if self._ended_here else "connection_lost"
                        await self.live.stop(reason)
                finally:
                    if self.call is not None and self._calls is not None:
                        self._calls.remove(self.call)

    async def _save_recording(self) -> None:
        """Write the call's recording and drop those past their time; a disk that refuses is
        logged, never the call's failure."""
        recorder = self.recorder
        if recorder is None:
            return
        try:
            wav, _ = await recorder.save()
            keep = self.session.config.server.recordings_keep_days
            gone = await asyncio.get_running_loop().run_in_executor(None, prune, recorder.directory, keep)
            log.info("twilio call %s: recorded in %s%s", recorder.call_id, wav, f" ({gone} old files deleted)" if gone else "")
        except OSError as exc:
            log.error("twilio call %s: the recording could not be written: %s", recorder.call_id, exc)
        finally:
            self.recorder = None  # saved once

    async def _serve(self) -> None:
        async for frame in self.frames():
            if isinstance(frame, bytes):
                await self._refuse(CLOSE_UNSUPPORTED, "binary frames are not part of Media Streams")
                return
            try:
                cmd = self.codec.decode(frame)
            except ProtocolError as exc:
                await self._refuse(CLOSE_POLICY, f"{exc.code}: {exc.message}")
                return
            if isinstance(cmd, Stop):
                self._stopped = True
                log.info("twilio call %s stopped (session %s)", cmd.call_sid or self.codec.call_sid, self.session.id)
                await self.ws.close()
                return
            await self._apply(cmd)

    async def expire(self, code: str, message: str) -> None:
        """Media Streams has no error message: the close code and reason (1008) say it.  A call
        on GPT-Live tells its sidebands (an ``error``, then ``session.closed``)."""
        log.warning("twilio stream %s: %s: %s", self.codec.stream_sid or "-", code, message)
        if self.live is not None:
            await self.live.expire(code, message)

    async def _refuse(self, code: int, reason: str) -> None:
        log.warning("twilio stream %s: closing: %s", self.codec.stream_sid or "-", reason)
        # A close reason is at most 123 bytes (RFC 6455); keep it readable rather than cut mid-character.
        await self.ws.close(code, reason.encode("utf-8")[:120].decode("utf-8", "ignore"))

    async def _apply(self, cmd: object) -> None:
        if isinstance(cmd, Media):
            if len(cmd.pcm) and self.audio_allowed(len(cmd.pcm) * 1000.0 / PIPELINE_RATE):
                if self._recordings is not None:
                    self._record(cmd.pcm)  # the line as it came
                pcm = self._without_echo(cmd.pcm)
                if not len(pcm):
                    return  # the canceller works in whole 10 ms frames: this one's samples come with the next
                await (self.live.microphone(pcm) if self.live is not None else self.session.append_audio(pcm))
                if self.machine is not None:
                    await self.machine.audio(pcm)
            elif len(cmd.pcm):
                self.dropped_ms += len(cmd.pcm) * 1000.0 / PIPELINE_RATE  # faster than a phone line can send
        elif isinstance(cmd, MarkEcho):
            # The codec recorded the playback position; a goodbye waiting to be heard looks again.
            async with self._played:
                self._played.notify_all()
        elif isinstance(cmd, Dtmf):
            self.dtmf.append(cmd.digit)
            log.info("twilio stream %s: caller pressed %s", self.codec.stream_sid, cmd.digit)
            if self.live is not None:
                self.live.key(cmd.digit)  # GPT-Live tells its sidebands alone: the model never hears keys (a PIN)
                return
            if self.call is not None:
                event = {"type": "input_audio_buffer.dtmf_event_received", "event": cmd.digit, "received_at": int(time.time())}
                self.call.publish(event)
            await self._key(cmd.digit)
        elif isinstance(cmd, Start):
            log.info("twilio call %s started: stream %s, session %s", cmd.call_sid, cmd.stream_sid, self.session.id)
            self._gateway = cmd.custom_parameters.get("voiceagent_gateway") == "sip"
            # The SIP gateway cancels its calls' echo on their own clock; a Twilio call's is
            # cancelled here, against a copy of the media server's playout buffer.
            if not self._gateway and echo_cancellation_on(self.session.config.phone.echo_cancellation):
                self._echo = StreamEcho(f"twilio stream {cmd.stream_sid}")
                self.codec.sent_audio = self._echo.sent
            if self._gateway and self._calls is not None and self.call is None:
                self._ring(cmd)
            self._call_name = self.call.call_id if self.call is not None else _file_name(cmd.call_sid or self.session.id)

    def _without_echo(self, pcm: Int16Array) -> Int16Array:
        """The caller's audio with the agent's own voice removed (as it came where nothing
        cancels: :mod:`~voiceagent.transports.stream_echo`, which logs the line's verdict once)."""
        return pcm if self._echo is None else self._echo.heard(pcm)

    # ------------------------------------------------------------------ the gateway's calls

    def _ring(self, start: Start) -> None:
        """Make the gateway's call a :class:`PhoneCall` and answer it when it is accepted."""
        try:
            headers = [(str(h[0]), str(h[1])) for h in json.loads(start.custom_parameters.get("sip_headers", "[]"))]
        except (ValueError, TypeError, IndexError, KeyError):
            headers = []
        assert self._calls is not None
        placed = self._calls.placed.get(start.custom_parameters.get("voiceagent_outbound", ""))
        self.call = PhoneCall(self.session, headers, self._answer_call, self._end_call, placed.id if placed else "")
        if placed is not None and placed.live_id:
            self.call.live_id = placed.live_id  # placed as a GPT-Live session: its sidebands know it by that id
        self._placed = placed
        if placed is not None and placed.machine is not None:
            self.machine = MachineWatch(self.session, placed.machine, self._answered_by, self._hang_up, self._hang_up_when_heard)
        self._calls.add(self.call)
        self._ringing = asyncio.create_task(self._until_answered(self.call, placed), name=f"{self.session.id}.ringing")

    async def _until_answered(self, call: PhoneCall, placed: OutboundCall | None) -> None:
        if placed is not None:  # a call the server placed: answered by the callee already, configured when placed
            config = placed.live_session or placed.session
            surface = "live" if placed.live_session is not None else "realtime"
            try:
                await call.accept(config, surface)
            except ProtocolError as exc:  # checked when placed; a session that cannot take it keeps its own
                log.error("call %s: its session configuration was refused (%s); the server's is kept", call.call_id, exc.message)
                fallback = {"type": "live", "model": str((config or {}).get("model") or "gpt-live-1")} if surface == "live" else None
                await call.accept(fallback, surface)
            if self.machine is not None:
                self.machine.hold()
            return
        if self._webhook is None:
            await call.accept(None)
            return
        url, secret, kinds = self._webhook
        log.info("call %s: ringing; %s to %s", call.call_id, " and ".join(kinds), url)
        loop = asyncio.get_running_loop()
        headers = call.sip_headers
        live = incoming_live(call.live_id, headers)
        events = [incoming_call(call.call_id, headers) if k == "realtime.call.incoming" else live for k in kinds]
        # Their own threads: a slow application never holds up the pool the engines use.
        sent = [loop.run_in_executor(WEBHOOK_POOL, deliver, url, secret, event) for event in events]
        results = await asyncio.gather(*sent, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        for failure in failures:
            if not isinstance(failure, WebhookError):
                raise failure
            log.warning("call %s: a webhook was not taken (%s)", call.call_id, failure)
        if len(failures) == len(results):
            log.error("call %s: no webhook was taken: the call is refused", call.call_id)
            await call.reject_if_ringing(503)
            return
        try:
            async with asyncio.timeout(self.session.config.server.sip_accept_timeout_s):
                await call.decided()
        except TimeoutError:
            if await call.reject_if_ringing(480):
                log.warning("call %s: neither accepted nor rejected in time: refused (480)", call.call_id)

    async def _answer_call(self, session_config: dict[str, Any] | None, surface: str) -> None:
        """Apply the accept's session configuration (strictly: a field this server does not honour
        is a :class:`ProtocolError`, the call still ringing), then tell the gateway to answer.
        ``surface`` ``live``: GPT-Live's accept, whose sidebands then speak GPT-Live."""
        if surface == "live":
            assert self.call is not None
            live = LivePhoneCall(
                self.session,
                self._voice_rate,
                self.call.live_id,
                press=self._press,
                hang_up=self._hang_up,
                audio_allowed=self.audio_allowed,
            )
            await live.start(session_config or {})
            try:
                # The caller may have hung up while the session was set up (this connection's
                # clean-up then found no protocol to stop): the send fails, and it is stopped here.
                await self.send({"event": "answer", "streamSid": self.codec.stream_sid})
            except BaseException:
                await live.stop("remote_hangup")
                raise
            # Published once answered: a sideband never attaches to a call still ringing (one
            # waiting for a placed call's answer is told now).
            self.live = self.call.live = live
            if self._placed is not None:
                self._placed.notify()
            return
        if session_config is not None:
            changes = session_changes(RealtimeCodec(self.session.settings, self._voice_rate), session_config)
            await self.session.check_update(**changes)
            self.session.update(**changes)
        await self.send({"event": "answer", "streamSid": self.codec.stream_sid})

    async def _press(self, keys: str) -> None:
        """The gateway presses ``keys`` as RFC 4733 events, at once: a menu listens while it
        speaks.  ``ConnectionClosed`` when the call's stream has closed."""
        await self.send({"event": "dtmf", "streamSid": self.codec.stream_sid, "dtmf": {"digits": keys}})
        log.info("twilio stream %s: sent keys %s to the SIP gateway", self.codec.stream_sid, keys)

    def _answered_by(self, verdict: Answered) -> None:
        """Who answered the placed call: its record says so (``GET /v1/sip/calls/{id}``)."""
        if self._placed is not None:
            self._placed.answered_by = verdict

    async def _hang_up_when_heard(self, response_id: str) -> None:
        """End the call once reply ``response_id`` (a message left on a machine) has been heard."""
        self._ending = CallControl(t=time.monotonic(), gen=0, session=self.session.id, response_id=response_id, action=HangUp())
        self._goodbye_done = True
        await self._end_when_heard()

    async def _hang_up(self) -> None:
        """A GPT-Live sideband closed the session: the call ends (unless it has already)."""
        if self.call is not None:
            with contextlib.suppress(CallStateError):  # it ended meanwhile: nothing to hang up
                await self.call.hangup()

    async def _end_call(self, transfer: str | None, refuse: int | None) -> None:
        """End the stream; the gateway then transfers the call, refuses it or hangs up."""
        self._ended_here = True
        self.transfer = Transfer(transfer, transfer) if transfer else None
        self.refuse = refuse
        self._after_stream(self.codec.call_sid, transfer, refuse)
        await self.ws.close()

    async def _key(self, digit: str) -> None:
        """Collect ``digit``; ``#`` or ``phone.dtmf_gap_ms`` without another key sends the keys."""
        if self._keys_due is not None:
            self._keys_due.cancel()
            self._keys_due = None
        if digit != "#":
            self._keys.append(digit)
            self._keys_due = asyncio.create_task(self._keys_after_gap(), name=f"{self.session.id}.keys")
        elif self._keys:
            await self._send_keys()

    async def _keys_after_gap(self) -> None:
        clock = self.session.clock
        await clock.sleep_until(clock.now() + self.session.config.phone.dtmf_gap_ms / 1000.0)
        self._keys_due = None
        await self._send_keys()

    async def _send_keys(self) -> None:
        keys, self._keys = " ".join(self._keys), []
        if self.session.active_response_id is not None:
            await self.session.cancel_response("dtmf")
        await self.session.add_text(f"(The caller pressed {keys} on the phone keypad.)")
        try:
            await self.session.create_response()
        except ProtocolError as exc:  # a session that cannot answer now: the keys stay in its history
            log.warning("twilio stream %s: keys %s not answered: %s", self.codec.stream_sid, keys, exc.message)

    async def _control(self, event: CallControl) -> None:
        action = event.action
        if isinstance(action, SendDigits) and self._gateway:
            await self._press(action.digits)
        elif isinstance(action, SendDigits):
            tones = dtmf_tones(action.digits, self.codec.rate)
            for message in self.codec.media(tones):
                await self.send(message)
            log.info("twilio stream %s: sent keys %s", self.codec.stream_sid, action.digits)
        elif isinstance(action, HangUp | Transfer) and self._ending is None:
            self._ending = event

    async def _end_when_heard(self) -> None:
        """End the stream once every mark came back: the goodbye was heard to its end."""
        async with self._played:
            await self._played.wait_for(lambda: self.codec.marks_pending == 0)
        assert self._ending is not None
        self._ended_here = True
        action = self._ending.action
        self.transfer = action if isinstance(action, Transfer) else None
        if self.transfer is not None:
            self._after_stream(self.codec.call_sid, self.transfer.target, None)
        log.info(
            "twilio call %s: the agent %s",
            self.codec.call_sid or self.codec.stream_sid,
            f"transfers it to {action.name}" if isinstance(action, Transfer) else "hangs up",
        )
        await self.ws.close()

    async def write(self) -> None:
        async for event in self.session.events():
            for message in self.codec.encode(event):
                await self.send(message)
            if self.recorder is not None:
                self.recorder.event(event)
            if self.live is not None:
                await self.live.on_event(event)
            elif self.call is not None:
                self.call.publish(event)
            if self.machine is not None and self.live is None:
                await self.machine.event(event)
            if isinstance(event, CallControl):
                await self._control(event)
            elif (
                isinstance(event, ResponseDone)
                and self._ending is not None
                and event.response_id != self._ending.response_id
                and not self._goodbye_done
            ):
                # The reply after the tool call (its goodbye) has ended: hang up once it is heard.
                # On the writer, so every one of its marks was sent before the wait starts.
                self._goodbye_done = True
                await self._end_when_heard()
            if isinstance(event, PlaybackCleared):
                if self._echo is not None:
                    self._echo.cleared()  # the codec sent ``clear``: the media server drops what it holds
                await self._cut_to_heard(event)
            elif isinstance(event, InputTranscriptDone) and self.session.config.log_transcripts:
                log.info("twilio stream %s: caller: %s", self.codec.stream_sid, event.text)
            elif isinstance(event, ResponseDone) and self.session.config.log_transcripts:
                log.info("twilio stream %s: agent (%s): %s", self.codec.stream_sid, event.status.value, event.text)

    async def _cut_to_heard(self, event: PlaybackCleared) -> None:
        # The session cut the item to its own estimate; the marks are what the phone actually
        # played, and ``truncate`` only ever cuts further.
        if self.codec.fully_played(event.item_id):
            return  # the caller heard all of it: nothing to cut
        heard = self.codec.played_ms(event.item_id)
        try:
            await self.session.truncate(event.item_id, heard)
        except ProtocolError as exc:  # the item was deleted meanwhile: nothing left to cut
            log.debug("twilio truncate of %s skipped: %s", event.item_id, exc.message)
        log.info("twilio stream %s: barge-in, caller heard %.0f ms of %s", self.codec.stream_sid, heard, event.item_id)
