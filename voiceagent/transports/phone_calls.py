"""OpenAI's call-control API over the SIP gateway's calls: each call has an id (``rtc_…``), rings
until an application accepts or rejects it, and may be transferred (``refer``), hung up, and
watched and steered by Realtime WebSockets attached with ``/v1/realtime?call_id=…``.

The same call has a second name, GPT-Live's (``live_…``): ``POST /v1/live/sessions/{id}/accept``
(and ``reject``, ``refer``, ``hangup``) control it as GPT-Live does, and a call accepted there
speaks GPT-Live to its sidebands (``/v1/live/sessions/{id}/attach``).  The first accept, on
either API, decides the call's protocol; an accept on the other is then a 409, as any second one.

A :class:`PhoneCall` is created by the call's transport (the Twilio stream the gateway opened)
with the three things only it can do: answer with a session configuration, end the call (with a
transfer or a refusal) and tell it apart from calls that ended.  This module keeps the states
and the observers; the HTTP routes (:mod:`voiceagent.transports.server`) and the attached
connections (:mod:`voiceagent.transports.call_attach`) find calls here by id.

Calls the server places (``POST /v1/sip/calls``, ``voiceagent call``) are :class:`OutboundCall`
records while the gateway dials (``dialing``, ``ringing``), and once answered also a
:class:`PhoneCall` under the same id, accepted at once with the configuration they were placed
with; busy, declined, unreachable and unanswered calls end with the SIP status and reason.

States: ``ringing`` → ``accepted`` → ``ended``, or ``ringing`` → ``ended`` (rejected, hung up,
timed out, or the caller gave up).  ``accept`` and ``reject`` are for a ringing call only;
``refer`` for an accepted one; ``hangup`` for any call not ended.  A call in the wrong state is
a :class:`CallStateError` (HTTP 409), never a silent no-op.

Observers: each attached connection gets a bounded queue of the call's session events (and of
the messages only a phone call has, such as the caller's keys); a queue that fills (a watcher
that stopped reading) is dropped and told so with ``None``, never allowed to hold up the call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from websockets.exceptions import ConnectionClosed

from voiceagent.errors import ProtocolError, VoiceAgentError
from voiceagent.events import Event
from voiceagent.session import Session
from voiceagent.transports.machine_answer import MachinePlan, machine_plan
from voiceagent.transports.machine_detection import Answered
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import UpdateSession

if TYPE_CHECKING:
    from voiceagent.transports.live_phone import LivePhoneCall

__all__ = [
    "CallStateError",
    "Dialer",
    "Observed",
    "OutboundCall",
    "PhoneCall",
    "PhoneCalls",
    "call_control",
    "place_call",
    "session_changes",
    "valid_uri",
]

log = logging.getLogger(__name__)

Observed = Event | dict[str, Any] | None
"""What an attached connection reads: a session event, a ready server message, or ``None`` at
the call's end."""

_OBSERVER_QUEUE = 2048
_PLACED_KEPT = 1000  # outbound calls' records kept for GET after they ended, oldest dropped first


class Dialer(Protocol):
    """What places calls: the SIP gateway's supervisor (:class:`voiceagent.sip.supervisor.SipGateway`)."""

    async def dial(self, call_id: str, uri: str, timeout_s: float) -> None: ...

    async def hang_up(self, call_id: str) -> None:
        """Give up a placed call before it is answered."""
        ...


@dataclass
class OutboundCall:
    """A call the server places, as ``GET /v1/sip/calls/{id}`` shows it."""

    id: str
    to: str
    session: dict[str, Any] | None
    status: str = "dialing"
    sip_status: int | None = None
    reason: str | None = None
    created_at: int = field(default_factory=lambda: int(time.time()))
    machine: MachinePlan | None = None
    """Answering-machine detection asked for (:mod:`.machine_answer`); None: off."""
    answered_by: Answered | None = None
    live_session: dict[str, Any] | None = None
    """GPT-Live's session configuration, for a call placed as a GPT-Live session (``POST
    /v1/live/sessions`` with a SIP transport): answered on GPT-Live's terms, not Realtime's."""
    live_id: str = ""
    """That session's id (``live_…``; "" for a Realtime call)."""
    was_answered: bool = False
    """The gateway reported it answered (its status is ``ended`` once it has ended, answered or not)."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def notify(self) -> None:
        """Its status changed, or its GPT-Live session began: every :meth:`next_change` taken
        before is set."""
        self._changed.set()
        self._changed = asyncio.Event()

    def next_change(self) -> asyncio.Event:
        """Set at the next :meth:`notify`: take it before reading the state, so that no change
        after the reading is missed."""
        return self._changed

    def as_object(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "object": "sip.call",
            "id": self.id,
            "to": self.to,
            "status": self.status,
            "sip_status": self.sip_status,
            "reason": self.reason,
            "created_at": self.created_at,
        }
        if self.live_id:
            record["live_session_id"] = self.live_id
        if self.machine is not None:
            verdict = self.answered_by
            record["answered_by"] = verdict.by if verdict else None
            record["answered_by_ms"] = round(verdict.at_ms) if verdict else None
            record["answered_by_reasons"] = list(verdict.reasons) if verdict else []
        return record


class CallStateError(Exception):
    """The call is not in a state that allows this action (HTTP 409)."""


class PhoneCall:
    """One SIP call.  ``answer(session_config)`` applies the configuration (raising
    :class:`~voiceagent.errors.ProtocolError` for a bad one, the call still ringing) and answers;
    ``end(transfer, refuse)`` ends the call's stream."""

    def __init__(
        self,
        session: Session,
        sip_headers: Sequence[tuple[str, str]],
        answer: Callable[[dict[str, Any] | None, str], Awaitable[None]],
        end: Callable[[str | None, int | None], Awaitable[None]],
        call_id: str = "",
    ) -> None:
        self.call_id = call_id or new_call_id()
        self.live_id = "live_" + secrets.token_hex(16)
        """The call's GPT-Live session id (``live.transport.incoming``'s ``session_id``)."""
        self.surface = ""
        """The protocol it was accepted on: ``realtime`` or ``live`` ("" while it rings)."""
        self.live: LivePhoneCall | None = None
        """Its GPT-Live protocol, once accepted on GPT-Live (what its sidebands attach to)."""
        self.session = session
        self.sip_headers = list(sip_headers)
        self.state = "ringing"
        self.observers: set[asyncio.Queue[Observed]] = set()
        self._answer = answer
        self._end = end
        self._lock = asyncio.Lock()  # one action at a time: two accepts never both apply
        self._decided = asyncio.Event()

    async def accept(self, session_config: dict[str, Any] | None = None, surface: str = "realtime") -> None:
        """Answer with ``session_config`` (Realtime's ``session.update`` session, or GPT-Live's
        accept ``session`` for ``surface`` ``live``)."""
        async with self._lock:
            self._expect("ringing", "accepted")
            await self._answer(session_config, surface)
            self.surface = surface
            if self.state == "ringing":  # the caller may have hung up meanwhile
                self.state = "accepted"
            self._decided.set()
        log.info("call %s: accepted on %s (session %s)", self.call_id, surface, self.session.id)

    async def reject(self, status: int = 603) -> None:
        async with self._lock:
            self._expect("ringing", "rejected")
            self.state = "ended"
            self._decided.set()
            await self._end(None, status)
        log.info("call %s: rejected with %d", self.call_id, status)

    async def reject_if_ringing(self, status: int) -> bool:
        """Reject the call unless it was decided first (checked under the call's lock, so that an
        accept in progress wins); whether it was rejected."""
        async with self._lock:
            if self.state != "ringing":
                return False
            self.state = "ended"
            self._decided.set()
            await self._end(None, status)
        log.info("call %s: refused with %d", self.call_id, status)
        return True

    async def refer(self, target: str) -> None:
        async with self._lock:
            self._expect("accepted", "transferred")
            self.state = "ended"
            await self._end(target, None)
        log.info("call %s: transferred to %s", self.call_id, target)

    async def hangup(self) -> None:
        async with self._lock:
            if self.state == "ended":
                raise CallStateError(f"call {self.call_id} has ended")
            ringing = self.state == "ringing"
            self.state = "ended"
            self._decided.set()
            await self._end(None, 603 if ringing else None)
        log.info("call %s: hung up", self.call_id)

    async def decided(self) -> None:
        """Return once the call was accepted or ended (cancellable)."""
        await self._decided.wait()

    def _expect(self, state: str, action: str) -> None:
        if self.state != state:
            raise CallStateError(f"call {self.call_id} is {self.state}: only a {state} call can be {action}")

    # ------------------------------------------------------------------ observers

    def attach(self) -> asyncio.Queue[Observed]:
        queue: asyncio.Queue[Observed] = asyncio.Queue(maxsize=_OBSERVER_QUEUE)
        self.observers.add(queue)
        return queue

    def detach(self, queue: asyncio.Queue[Observed]) -> None:
        self.observers.discard(queue)

    def publish(self, item: Event | dict[str, Any]) -> None:
        """Hand ``item`` to every attached connection, at once (never waits)."""
        for queue in list(self.observers):
            try:
                queue.put_nowait(item)
            except asyncio.QueueFull:
                log.warning("call %s: an attached connection stopped reading; it is detached", self.call_id)
                self._close(queue)

    def ended(self) -> None:
        """The call is over (whoever ended it): every attached connection is told."""
        self.state = "ended"
        self._decided.set()
        for queue in list(self.observers):
            self._close(queue)

    def _close(self, queue: asyncio.Queue[Observed]) -> None:
        self.observers.discard(queue)
        while queue.full():
            queue.get_nowait()
        queue.put_nowait(None)


def new_call_id() -> str:
    return "rtc_" + secrets.token_hex(16)


class PhoneCalls:
    """The server's SIP calls by id, from the first ring to the end, and the calls it placed."""

    def __init__(self) -> None:
        self._calls: dict[str, PhoneCall] = {}
        self._live: dict[str, PhoneCall] = {}  # the same calls by their GPT-Live id
        self.placed: dict[str, OutboundCall] = {}
        self.dialer: Dialer | None = None
        """Set while a SIP gateway runs beside the server (``server.sip_port``)."""

    async def place(
        self,
        to: str,
        session: dict[str, Any] | None,
        timeout_s: float,
        machine: MachinePlan | None = None,
        live_session: dict[str, Any] | None = None,
    ) -> OutboundCall:
        """Dial ``to``; the record follows the call (:meth:`report`).  ``live_session``: answer it
        as a GPT-Live session of that configuration (found by its id, :meth:`placed_live`).  The
        dialer's errors propagate."""
        if self.dialer is None:
            raise CallStateError("the server places calls only with its SIP gateway on (server.sip_port)")
        live_id = "live_" + secrets.token_hex(16) if live_session is not None else ""
        call = OutboundCall(new_call_id(), to, session, machine=machine, live_session=live_session, live_id=live_id)
        while len(self.placed) >= _PLACED_KEPT:
            self.placed.pop(next(iter(self.placed)))
        self.placed[call.id] = call
        try:
            await self.dialer.dial(call.id, to, timeout_s)
        except BaseException as exc:  # never dialled: the record says so (a sideband following it is told)
            self.report({"id": call.id, "status": "ended", "reason": f"not dialled: {exc}"})
            raise
        log.info("call %s: dialling %s", call.id, to)
        return call

    def report(self, fields: dict[str, Any]) -> None:
        """The gateway's word on a placed call (``id``, ``status``, ``sip_status``, ``reason``)."""
        call = self.placed.get(str(fields.get("id")))
        if call is None:
            return
        call.status = str(fields.get("status", call.status))
        call.was_answered = call.was_answered or call.status == "answered"
        if "sip_status" in fields:
            call.sip_status = int(fields["sip_status"])
        if "reason" in fields:
            call.reason = str(fields["reason"])
        if call.status == "ended":
            log.info("call %s to %s: ended (%s %s)", call.id, call.to, call.sip_status or "-", call.reason or "")
        call.notify()

    def placed_live(self, session_id: str) -> OutboundCall | None:
        """The placed call whose GPT-Live session is ``session_id``."""
        return next((c for c in self.placed.values() if c.live_id and c.live_id == session_id), None)

    def add(self, call: PhoneCall) -> None:
        self._calls[call.call_id] = call
        self._live[call.live_id] = call

    def remove(self, call: PhoneCall) -> None:
        self._calls.pop(call.call_id, None)
        self._live.pop(call.live_id, None)
        call.ended()

    def get(self, call_id: str) -> PhoneCall | None:
        return self._calls.get(call_id)

    def get_live(self, session_id: str) -> PhoneCall | None:
        """The call whose GPT-Live session id is ``session_id``."""
        return self._live.get(session_id)

    def __iter__(self) -> Iterator[PhoneCall]:
        return iter(list(self._calls.values()))

    def __len__(self) -> int:
        return len(self._calls)


async def call_control(
    calls: PhoneCalls, call_id: str, action: str, body: bytes, surface: str = "realtime"
) -> tuple[int, dict[str, Any] | None]:
    """Apply ``POST /v1/realtime/calls/{call_id}/{action}`` (``body``: its JSON), or with
    ``surface`` ``live`` ``POST /v1/live/sessions/{session_id}/{action}``; the HTTP status and,
    for a refusal, OpenAI's error object (``{"error": {...}}``, which the ``openai`` package
    raises as ``BadRequestError``, ``NotFoundError`` or ``ConflictError``)."""
    call = calls.get_live(call_id) if surface == "live" else calls.get(call_id)
    placed = calls.placed.get(call_id) if surface == "realtime" else calls.placed_live(call_id)
    if call is None and action == "hangup" and placed is not None and placed.status != "ended" and calls.dialer is not None:
        # Still dialling or ringing, or answered with its session not yet open: the gateway ends
        # it in whatever state it is (CANCEL or BYE); the record ends when it reports so.
        try:
            await calls.dialer.hang_up(placed.id)
        except (VoiceAgentError, OSError) as exc:  # the gateway is not running (restarting, or just died)
            return 503, _error(str(exc), "sip_unavailable")
        return 200, None
    if call is None:
        return 404, _error(f"no call {call_id}", "call_not_found")
    params = _json_object(body)
    if params is None:
        return 400, _error("the body must be a JSON object", "invalid_json")
    try:
        if action == "accept" and surface == "live":
            unknown = sorted(set(params) - {"session"})
            if unknown:
                return 400, _error(f"unknown field(s): {', '.join(unknown)}", "unknown_parameter", unknown[0])
            session = params.get("session")
            if not isinstance(session, dict):
                return 400, _error("session is required: the accepted call's GPT-Live session", "missing_required_parameter", "session")
            if session.get("type") != "live":
                return 400, _error("session.type must be 'live'", "invalid_value", "session.type")
            await call.accept(session, "live")
        elif action == "accept":
            if params.get("type", "realtime") != "realtime":
                why = "type must be 'realtime' (a GPT-Live application accepts at /v1/live/sessions/{session_id}/accept)"
                return 400, _error(why, "invalid_value", "type")
            await call.accept(params or None)
        elif action == "reject":
            status = params.get("status_code", 603)
            if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 699:
                return 400, _error("status_code must be a SIP final status, 400-699", "invalid_value", "status_code")
            await call.reject(status)
        elif action == "refer":
            target = params.get("target_uri")
            if not valid_uri(target):
                return 400, _error(
                    "target_uri must be a sip:, sips: or tel: URI (no spaces, at most 256 characters)", "invalid_value", "target_uri"
                )
            await call.refer(target)
        else:
            await call.hangup()
    except CallStateError as exc:
        return 409, _error(str(exc), "invalid_call_state")
    except ConnectionClosed:  # the caller hung up while the action was being applied
        return 404, _error(f"call {call_id} has ended", "call_not_found")
    except ProtocolError as exc:  # the accept's session configuration
        return 400, _error(exc.message, exc.code, exc.param)
    return 200, None


async def place_call(calls: PhoneCalls, body: bytes, codec: RealtimeCodec) -> tuple[int, dict[str, Any]]:
    """``POST /v1/sip/calls``: ``{"to": "sip:…" | "tel:…", "session": {…}, "timeout_s": 30,
    "machine_detection": {…}}`` (:func:`~.machine_answer.machine_plan`); the
    session configuration is checked now (``codec`` decodes it as a ``session.update``, strictly),
    so that a call is never answered into a session that refuses it.  201 and the call's record,
    or an error object."""
    params = _json_object(body)
    if params is None:
        return 400, _error("the body must be a JSON object", "invalid_json")
    unknown = set(params) - {"to", "session", "timeout_s", "machine_detection"}
    if unknown:
        return 400, _error(f"unknown field(s): {', '.join(sorted(unknown))}", "unknown_parameter", sorted(unknown)[0])
    to, session, timeout_s = params.get("to"), params.get("session"), params.get("timeout_s", 30)
    if not valid_uri(to):
        return 400, _error("to must be a sip:, sips: or tel: URI", "invalid_value", "to")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 1 <= timeout_s <= 300:
        return 400, _error("timeout_s must be 1-300 (seconds to wait for an answer)", "invalid_value", "timeout_s")
    if session is not None:
        if not isinstance(session, dict):
            return 400, _error("session must be an object (a session.update's configuration)", "invalid_value", "session")
        try:
            session_changes(codec, session)
        except ProtocolError as exc:
            return 400, _error(exc.message, exc.code, exc.param)
    machine = None
    if params.get("machine_detection") is not None:
        try:
            machine = machine_plan(params["machine_detection"])
        except ValueError as exc:
            return 400, _error(str(exc), "invalid_value", "machine_detection")
    try:
        call = await calls.place(to, session, float(timeout_s), machine)
    except CallStateError as exc:
        return 503, _error(str(exc), "sip_off")
    except VoiceAgentError as exc:  # the gateway is not running (restarting)
        return 503, _error(exc.message, "sip_unavailable")
    return 201, call.as_object()


def valid_uri(uri: object) -> TypeGuard[str]:
    """A ``sip:``, ``sips:`` or ``tel:`` URI that can go into a SIP header as it is: printable,
    no whitespace (a line break would start a header of the sender's choosing), at most 256."""
    return (
        isinstance(uri, str)
        and uri.startswith(("sip:", "sips:", "tel:"))
        and len(uri) <= 256
        and all(c.isprintable() and not c.isspace() for c in uri)
    )


def session_changes(codec: RealtimeCodec, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a ``session.update``'s session, as an accept or a placed call gives it) read by
    ``codec`` into the changes to apply; strictly: a field this server does not honour, or a bad
    one, is a :class:`~voiceagent.errors.ProtocolError` (there is no session yet to send it to)."""
    cmd = codec.decode(json.dumps({"type": "session.update", "session": config}))
    assert isinstance(cmd, UpdateSession)
    if cmd.refused:
        raise cmd.refused[0]
    return cmd.changes


def _json_object(body: bytes) -> dict[str, Any] | None:
    """The request's JSON object (an empty body: ``{}``), or None when it is not one."""
    try:
        params = json.loads(body or b"{}")
    except ValueError:
        return None
    return params if isinstance(params, dict) else None


def _error(message: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code, "param": param}}
