"""GPT-Live sessions that dial out over SIP: the session is created first, then the server's SIP
gateway dials, and a sideband attached to the session watches the call come up.

``POST /v1/live/sessions`` with ``{"session": {…}, "transport": {"type": "sip", "to": "sip:…" |
"tel:…", "timeout_s": 30}}`` (the WebRTC create's shape, with a SIP transport instead of an SDP
offer; OpenAI's SDK types only the WebRTC one, so an application passes this ``transport`` as
it is) checks the session as ``session.start``'s (strictly; ``audio.format`` is refused: the
call negotiates G.711 or G.722), places the call and answers 201 ``{"session": {"id": "live_…"},
"transport": {"type": "sip", "to": …, "call_id": "rtc_…"}}``.  The call's record is also
``GET /v1/sip/calls/{call_id}``.

A sideband may attach by the session's id (``/v1/live/sessions/{id}/attach``) at once: while the
phone rings it is told ``transport.ringing``; when the call is answered, ``transport.answered``
and then, as every sideband, ``session.started`` and the session's events; a call that is not
answered (busy, declined, no answer, unreachable) ends the sideband with ``transport.failed``
(``error.type`` ``call_error``, ``error.code`` ``busy``, ``declined``, ``no_answer`` or
``call_failed``, the SIP status and reason in the message) and a close (1000).  These three
events go to sidebands alone, as OpenAI sends them.

Cancellation: cancelling :func:`follow_placed` stops following (its waits are cancelled) and
re-raises; the socket is the server's to close, and the call goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voiceagent.errors import ProtocolError, VoiceAgentError
from voiceagent.transports.live_config import create_body, parse_start
from voiceagent.transports.phone_calls import CallStateError, OutboundCall, PhoneCalls, valid_uri

__all__ = ["follow_placed", "is_sip_create", "place_live", "transport_event", "transport_failure"]

log = logging.getLogger(__name__)


def is_sip_create(body: bytes) -> bool:
    """Whether a ``POST /v1/live/sessions`` body asks for a SIP transport (else it is WebRTC's)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("transport"), dict) and obj["transport"].get("type") == "sip"


def _parse(body: bytes) -> tuple[dict[str, Any], str, float]:
    session, transport = create_body(body, "{type: sip, to, timeout_s}")
    for key in transport:
        if key not in ("type", "to", "timeout_s"):
            raise ProtocolError("unknown_parameter", f"unknown parameter transport.{key[:64]}", param=f"transport.{key[:64]}")
    to = transport.get("to")
    if not valid_uri(to):
        raise ProtocolError("invalid_value", "transport.to must be a sip:, sips: or tel: URI", param="transport.to")
    timeout_s = transport.get("timeout_s", 30)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 1 <= timeout_s <= 300:
        raise ProtocolError("invalid_value", "transport.timeout_s must be 1-300 (seconds to ring)", param="transport.timeout_s")
    parse_start({k: v for k, v in session.items() if k != "type"}, media=True)  # checked now: never a call answered into a refusal
    return session, to, float(timeout_s)


async def place_live(calls: PhoneCalls, body: bytes) -> tuple[int, dict[str, Any]]:
    """``POST /v1/live/sessions`` with a SIP transport (module docstring): 201 and the created
    session, or raises :class:`ProtocolError` (400) for a bad request; 503 and an error object
    when the server has no SIP gateway running."""
    session, to, timeout_s = _parse(body)
    try:
        call = await calls.place(to, None, timeout_s, live_session=session)
    except CallStateError as exc:
        return 503, {"error": {"type": "invalid_request_error", "code": "sip_off", "message": str(exc), "param": "transport"}}
    except VoiceAgentError as exc:  # the gateway is not running (restarting, or just died)
        return 503, {"error": {"type": "invalid_request_error", "code": "sip_unavailable", "message": exc.message, "param": "transport"}}
    log.info("call %s: GPT-Live session %s dialling %s", call.id, call.live_id, to)
    return 201, {"session": {"id": call.live_id}, "transport": {"type": "sip", "to": to, "call_id": call.id}}


def transport_failure(call: OutboundCall) -> tuple[str, str]:
    """(``error.code``, message) of a placed call that ended unanswered."""
    status = call.sip_status
    code = {486: "busy", 600: "busy", 603: "declined"}.get(status or 0)
    if code is None:
        code = "no_answer" if call.reason == "no answer" else "call_failed"
    message = f"the call to {call.to} was not answered: " + " ".join(str(x) for x in (status, call.reason) if x)
    return code, message.rstrip(": ")


def transport_event(kind: str, call: OutboundCall) -> dict[str, Any]:
    """``transport.ringing``, ``answered`` or ``failed`` (with its ``error``) of a placed session."""
    event: dict[str, Any] = {"type": kind, "event_id": "event_" + secrets.token_hex(12), "session_id": call.live_id}
    if kind == "transport.failed":
        code, message = transport_failure(call)
        event["error"] = {"type": "call_error", "code": code, "message": message}
    return event


async def follow_placed(ws: ServerConnection, call: OutboundCall, started: Callable[[], bool]) -> bool:
    """A sideband attached to a placed GPT-Live session before it began: tell it the call's
    progress until the session runs.  True: the session runs now (``started()`` said so) and the
    sideband goes on as every sideband; False: the call was not answered (the sideband was told
    ``transport.failed`` and closed) or the sideband went away."""
    told: set[str] = set()
    try:
        while True:
            change = call.next_change()  # taken before the state is read: no change is missed
            if call.status == "ringing" and "ringing" not in told:
                told.add("ringing")
                await ws.send(json.dumps(transport_event("transport.ringing", call)))
            running = started()
            if (running or call.status == "answered") and "answered" not in told:
                told.add("answered")
                await ws.send(json.dumps(transport_event("transport.answered", call)))
            if running:
                return True
            if call.status == "ended":
                if not call.was_answered:
                    await ws.send(json.dumps(transport_event("transport.failed", call)))
                await ws.close(1000, "the call ended")
                return False
            if not await _changed_or_gone(change, ws):
                return False  # the sideband went away while the call was placed
    except ConnectionClosed:
        return False


async def _changed_or_gone(change: asyncio.Event, ws: ServerConnection) -> bool:
    """Wait for the call's ``change`` (True) or the sideband's going (False)."""
    changed = asyncio.ensure_future(change.wait())
    gone = asyncio.ensure_future(ws.wait_closed())
    try:
        done, _ = await asyncio.wait((changed, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (changed, gone):
            task.cancel()
        await asyncio.gather(changed, gone, return_exceptions=True)
    return gone not in done
