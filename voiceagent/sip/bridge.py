"""One SIP call's side of the server: a WebSocket to the server's own Twilio Media Streams
endpoint, on loopback, as a Twilio call would open it.

The server already does everything a phone call needs on that endpoint: playback position from
echoed marks, barge-in by ``clear``, the caller's keys as ``dtmf``,
the phone tools (hang-up and transfer end the stream; where the call goes next is answered at
``/twilio/twiml/next``).  Bridging to it keeps one implementation of all that; the gateway only
turns RTP into those messages and back.

Threads: the bridge lives on the gateway's event loop.  PJSIP's threads reach it only through
``loop.call_soon_threadsafe`` (see :mod:`.gateway`); the agent's audio reaches PJSIP's clock
thread through :class:`~.playout.Playout`, which has its own lock.

Cancellation: cancelling :meth:`CallBridge.run` closes the WebSocket and re-raises; the call's
end (BYE) is then the gateway's to send.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote
from xml.sax.saxutils import unescape

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from voiceagent.audio import Int16Array
from voiceagent.transports.twilio_codec import WIDEBAND

from .playout import Playout

__all__ = ["RATE", "CallBridge", "Next", "next_step"]

log = logging.getLogger(__name__)

RATE = 16000
"""The call's audio towards the server: 16-bit PCM at 16 kHz, the stream's wideband format, for
every call: PJSIP's bridge turns G.722 into it as it is and G.711 up to it, so a wideband call
reaches the transcriber wideband and one code path serves both."""


@dataclass(frozen=True)
class Next:
    """What the call does once its stream ended: hang up, ``transfer`` to a URI, or, when the
    stream never opened (the server full, draining or gone), be refused with SIP ``refuse``."""

    transfer: str | None = None
    refuse: int | None = None


def next_step(twiml: str) -> Next:
    """Read the server's after-stream TwiML: ``<Dial><Sip>uri</Sip></Dial>`` and
    ``<Dial>number</Dial>`` transfer (a number as ``tel:``); ``<Reject status="N"/>`` refuses
    the call with SIP status N (``reason="busy"`` alone: 486, else 603); anything else hangs up."""
    reject = re.search(r"<Reject\b([^>]*)/?>", twiml)
    if reject:
        status = re.search(r'status="(\d{3})"', reject.group(1))
        busy = 'reason="busy"' in reject.group(1)
        return Next(refuse=int(status.group(1)) if status else 486 if busy else 603)
    sip = re.search(r"<Sip>([^<]+)</Sip>", twiml)
    if sip:
        return Next(unescape(sip.group(1)).strip())
    dial = re.search(r"<Dial>([^<]+)</Dial>", twiml)
    if dial:
        return Next("tel:" + unescape(dial.group(1)).strip())
    return Next(None)


class CallBridge:
    """One call's WebSocket session.  ``on_open`` is called once the server says to answer (at
    once, or once an application accepted the call: OpenAI's call-control API); ``on_end`` once,
    at the end, with what the call does next (``None`` when the caller hung up first).  Both are
    called on the loop.  ``sip_headers``: the INVITE's headers, for the server's webhook.
    ``on_keys``: the keys the agent presses (``send_dtmf``), also on the loop."""

    def __init__(
        self,
        ws_url: str,
        next_url: str,
        call_id: str,
        caller: str,
        on_open: Callable[[], None],
        on_end: Callable[[Next | None], None],
        sip_headers: list[tuple[str, str]] | None = None,
        outbound: str = "",
        on_keys: Callable[[str], None] = lambda digits: None,
    ) -> None:
        self.ws_url = ws_url
        self.next_url = next_url
        self.call_id = call_id
        self.caller = caller
        self.sip_headers = sip_headers or []
        self.outbound = outbound
        """The server's id of a call the gateway placed (it was answered before the stream opened)."""
        self._answered = False
        self.playout = Playout()
        self._on_open = on_open
        self._on_end = on_end
        self._on_keys = on_keys
        self._ws: ClientConnection | None = None
        self._outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=500)
        self._chunk = 0
        self._seq = 0
        self._hung_up = False
        self._ended = False
        self.stream_sid = "MZ" + call_id

    # ------------------------------------------------------------------ from PJSIP (via the loop)

    def inbound(self, pcm: Int16Array) -> None:
        """One frame of the caller's audio at :data:`RATE`.  A full outbox drops it (the server
        has stopped reading; the call is ending or the loop is far behind): audio is not queued
        without bound.  After the call's end, frames are dropped without a word."""
        if self._hung_up or self._ended:
            return
        self._chunk += 1
        payload = base64.b64encode(pcm.astype("<i2").tobytes()).decode()
        msg = {"event": "media", "streamSid": self.stream_sid, "media": {"track": "inbound", "chunk": str(self._chunk), "payload": payload}}
        self._offer(msg)

    def dtmf(self, digit: str) -> None:
        self._offer({"event": "dtmf", "streamSid": self.stream_sid, "dtmf": {"track": "inbound_track", "digit": digit}})

    def marks_passed(self, names: list[str]) -> None:
        for name in names:
            self._offer({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})

    def hung_up(self) -> None:
        """The caller ended the call: ``stop`` the stream, then close."""
        if not self._hung_up:
            self._hung_up = True
            while not self._outbox.empty():  # a full outbox must not swallow the end of the call
                self._outbox.get_nowait()
            self._offer({"event": "stop", "streamSid": self.stream_sid, "stop": {"callSid": self.call_id}})
            self._offer(None)

    def _offer(self, msg: dict[str, Any] | None) -> None:
        try:
            self._outbox.put_nowait(msg)
        except asyncio.QueueFull:
            log.warning("sip call %s: the server is not reading; a frame was dropped", self.call_id)

    # ------------------------------------------------------------------ the session

    async def run(self) -> None:
        """Open the stream, carry audio both ways until either side ends, then tell ``on_end``
        (once, whatever happened: a bridge that fails still ends its call, never leaves it open)."""
        try:
            await self._run()
        except Exception:
            log.exception("sip call %s: the bridge failed; the call is ended", self.call_id)
            self._on_end(None if self._hung_up else Next(None))
        finally:
            self._ended = True

    async def _run(self) -> None:
        ended_by_server = False
        opened = False
        try:
            async with connect(self.ws_url, max_size=2**20) as ws:
                opened = True
                self._ws = ws
                await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
                start = {
                    "streamSid": self.stream_sid,
                    "callSid": self.call_id,
                    "accountSid": "sip",
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": WIDEBAND[0], "sampleRate": WIDEBAND[1], "channels": 1},
                    "customParameters": {
                        "From": self.caller,
                        "voiceagent_gateway": "sip",
                        "sip_headers": json.dumps(self.sip_headers),
                        **({"voiceagent_outbound": self.outbound} if self.outbound else {}),
                    },
                }
                await self._send({"event": "start", "streamSid": self.stream_sid, "start": start})
                writer = asyncio.create_task(self._write(ws), name=f"sip-{self.call_id}-out")
                try:
                    await self._read(ws)
                    ended_by_server = not self._hung_up
                finally:
                    writer.cancel()
                    await asyncio.gather(writer, return_exceptions=True)  # our own cancellation still propagates
        except InvalidStatus as exc:  # refused at the door: admission (503), auth (401/403)
            status = exc.response.status_code
            log.warning("sip call %s: the server refused the session (HTTP %d)", self.call_id, status)
            self._on_end(None if self._hung_up else Next(refuse=503 if status == 503 else 403 if status in (401, 403) else 500))
            return
        except (OSError, ConnectionClosed) as exc:
            log.warning("sip call %s: the server's stream failed: %s", self.call_id, exc)
        if not opened and not self._hung_up:
            self._on_end(Next(refuse=503))
            return
        if self._hung_up:
            self._on_end(None)
            return
        step = await self._next() if ended_by_server else Next(None)
        self._on_end(step)

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                try:
                    self._apply(raw)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a message we cannot read: skipped, the call goes on
                    log.warning("sip call %s: unreadable message from the server skipped (%s): %.120r", self.call_id, exc, raw)
        except ConnectionClosed:
            pass

    def _apply(self, raw: str | bytes) -> None:
        if not isinstance(raw, str):
            return
        msg = json.loads(raw)
        event = msg.get("event")
        if event == "media":
            data = base64.b64decode(msg["media"]["payload"], validate=True)
            self.playout.write(np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.int16))
        elif event == "mark":
            self.playout.mark(str(msg["mark"]["name"]))
        elif event == "clear":
            self.marks_passed(self.playout.clear())
        elif event == "dtmf":  # the agent presses keys (send_dtmf): RFC 4733 events on the call
            self._on_keys(str(msg["dtmf"]["digits"]))
        elif event == "answer" and not self._answered:  # the server's word to answer the call
            self._answered = True
            self._on_open()

    async def _write(self, ws: ClientConnection) -> None:
        while (msg := await self._outbox.get()) is not None:
            await self._send(msg)
        await ws.close()

    async def _send(self, msg: dict[str, Any]) -> None:
        assert self._ws is not None
        self._seq += 1
        await self._ws.send(json.dumps({**msg, "sequenceNumber": str(self._seq)}))

    async def _next(self) -> Next:
        """Ask the server what the call does now that it ended the stream."""
        url = f"{self.next_url}{'&' if '?' in self.next_url else '?'}CallSid={quote(self.call_id)}"

        def fetch() -> str:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.read().decode("utf-8", "replace")  # type: ignore[no-any-return]

        try:
            return next_step(await asyncio.to_thread(fetch))
        except OSError as exc:
            log.warning("sip call %s: no answer from %s (%s): hanging up", self.call_id, url.split("?", 1)[0], exc)  # no token in logs
            return Next(None)
