"""The WebSocket server: routes connections by path, answers plain HTTP health and metrics.

Routes:
  ``ws://HOST:PORT/v1/realtime``  OpenAI Realtime protocol (query ``voiceagent_metrics=1`` adds
                                  ``voiceagent.turn_metrics`` events with the per-turn spans)
  ``POST /v1/realtime/calls``     a WebRTC call: an SDP offer (``application/sdp``, or the
                                  ``sdp`` and ``session`` fields of a multipart form) answered
                                  ``201`` with the SDP answer (:mod:`voiceagent.transports.webrtc`);
                                  ``POST /v1/realtime`` takes the same offer (the older form)
  ``POST /v1/realtime/calls/ID/hangup``  ends that call (WebRTC or SIP)
  ``POST /v1/realtime/calls/ID/accept|reject|refer``  OpenAI's call control of a SIP call
                                  (:mod:`voiceagent.transports.phone_calls`); 409 in the wrong state
  ``ws://HOST:PORT/v1/realtime?call_id=ID``  a Realtime socket attached to that SIP call
  ``ws://HOST:PORT/v1/live/sessions``  OpenAI's GPT-Live protocol (``client.live.connect()``)
  ``ws://HOST:PORT/v1/live/sessions/ID/attach``  a GPT-Live sideband on that running session
                                  (a WebSocket or WebRTC one, or a SIP call accepted on GPT-Live)
  ``POST /v1/live/sessions/ID/accept|reject|refer|hangup``  GPT-Live's control of a SIP call
  ``POST /v1/live/sessions``      a GPT-Live WebRTC session (``{session, transport: {type: webrtc, sdp}}``),
                                  or one that dials out (``transport: {type: sip, to}``)
  ``POST /v1/sip/calls``          place a SIP call (``{"to": "sip:…", "session": {…}, "timeout_s":
                                  30, "machine_detection": {…}}``): 201 with its record;
                                  ``GET /v1/sip/calls/ID`` follows it (and says who answered)
  ``ws://HOST:PORT/twilio``       Twilio Media Streams (a phone call)
  ``GET /twilio/twiml``           the TwiML that connects a call to ``/twilio``
  ``GET /``                       the browser microphone page (and its scripts)
  ``GET /healthz``                ``ok`` while the process serves (liveness)
  ``GET /readyz``                 ``ready load=0.42`` once the models are loaded and warmed and
                                  new sessions are taken; 503 ``full load=…`` while the load
                                  refuses them, 503 while warming up or draining (readiness: a
                                  load balancer stops sending new sessions)
  ``GET /metrics``                Prometheus text exposition (``?name[]=N``: only those samples)

Access (:mod:`voiceagent.transports.auth`): a WebSocket upgrade (and the TwiML document) without
an accepted token, when auth is on, gets HTTP 401; one from a foreign browser origin gets 403;
both before any session work.  ``/healthz``, ``/readyz`` and ``/metrics`` stay open for probes.
TLS: ``server.certfile``/``server.keyfile`` (or a TLS-terminating proxy in front).

Limits: messages over ``server.max_message_bytes`` close that connection with code 1009.  A new
connection is refused with HTTP 503 and ``Retry-After`` when the measured load leaves no room for
it (:mod:`voiceagent.admission`) or at ``server.max_sessions`` when an operator set that cap; a
place is reserved at the handshake, so a burst of handshakes counts before its sessions open.
With ``server.agent_port`` set, HAProxy's ``agent-check`` reads the load there (a weight, or
``drain``).  One failing session never affects another.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import http
import importlib.util
import json
import logging
import os
import re
import ssl
from collections.abc import Awaitable, Iterator, Sequence
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from urllib.parse import parse_qs, urlsplit

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from websockets.asyncio.server import Server as WsServer
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol

from voiceagent.admission import LoadMeter
from voiceagent.admission import State as Admission
from voiceagent.admission import Verdict as AdmissionVerdict
from voiceagent.backends.registry import Engines
from voiceagent.capacity import capacity
from voiceagent.clock import Clock, MonotonicClock
from voiceagent.config import Config
from voiceagent.errors import ProtocolError
from voiceagent.observability.metrics import CONTENT_TYPE, Metrics
from voiceagent.pipeline.loopload import loop_load
from voiceagent.session import QUEUES, Session
from voiceagent.settings import settings_from_config
from voiceagent.tools.phone import PhoneTools
from voiceagent.transports.auth import SUBPROTOCOL, access_for, is_loopback
from voiceagent.transports.call_attach import AttachedConnection
from voiceagent.transports.call_recording import prune
from voiceagent.transports.http_post import Post, PostConnection
from voiceagent.transports.live import LIVE_PATH, LiveConnection, LiveProtocol
from voiceagent.transports.live_outbound import follow_placed, is_sip_create, place_live
from voiceagent.transports.live_sideband import LiveSideband
from voiceagent.transports.live_webrtc import LiveWebRtcCall, live_offer
from voiceagent.transports.phone_calls import PhoneCalls, call_control, place_call
from voiceagent.transports.probe_log import wire_logger
from voiceagent.transports.realtime import RealtimeConnection
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.twilio import TwilioConnection
from voiceagent.transports.twilio_codec import after_stream_twiml, stream_url, twiml
from voiceagent.transports.webrtc import WebRtcCall, WebRtcError
from voiceagent.web import static_file

__all__ = ["VoiceAgentServer"]

log = logging.getLogger(__name__)

REALTIME_PATH = "/v1/realtime"
TWILIO_PATH = "/twilio"
TWIML_PATH = "/twilio/twiml"
TWIML_NEXT_PATH = "/twilio/twiml/next"
"""The ``<Connect>``'s action: what a call does once the agent ended its stream (GET, with
Twilio's ``CallSid``): the transfer's ``<Dial>``, else ``<Hangup/>``."""
_TRANSFERS_KEPT = 1000
CALLS_PATH = "/v1/realtime/calls"
FIRST_TURN_FACTOR = 5.0
"""A whole turn's CPU seconds (the listening around it included) over its critical path's
(:class:`voiceagent.capacity.TurnCost`): the first estimate, before turns are measured."""
RETRY_AFTER = "5"
"""Seconds a refused client is told to wait: a few load samples, and about a turn's length."""
_LIVE_ATTACH = re.compile(r"/v1/live/sessions/([A-Za-z0-9_]{1,64})/attach")
_CONTROL = re.compile(r"/v1/realtime/calls/([A-Za-z0-9_]{1,64})/(accept|reject|refer|hangup)")
_LIVE_CONTROL = re.compile(r"/v1/live/sessions/([A-Za-z0-9_]{1,64})/(accept|reject|refer|hangup)")
SIP_CALLS_PATH = "/v1/sip/calls"
_SIP_CALL = re.compile(r"/v1/sip/calls/([A-Za-z0-9_]{1,64})")


def _usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _text(status: http.HTTPStatus, body: str, content_type: str = "text/plain; charset=utf-8", **extra: str) -> Response:
    return _bytes(status, body.encode("utf-8"), content_type, **extra)


def _bytes(status: http.HTTPStatus, data: bytes, content_type: str, **extra: str) -> Response:
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(data))), ("Connection", "close")])
    for name, value in extra.items():
        headers[name.replace("_", "-")] = value
    return Response(status.value, status.phrase, headers, data)


def _route_path(raw: str) -> str:
    """The route of a request path: ``/twilio/<token>`` is the Twilio stream."""
    path = urlsplit(raw).path
    if path.startswith(TWILIO_PATH + "/") and path != TWIML_PATH and path.count("/") == 2:
        return TWILIO_PATH
    return path


def _select_subprotocol(connection: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
    # A browser that offers subprotocols (the token travels as one) needs one selected back.
    return Subprotocol(SUBPROTOCOL) if SUBPROTOCOL in offered else None


CLOSE_S = 1.0
"""At shutdown, how long a connection's close handshake may take before its TCP connection is
dropped (a peer that reads nothing never receives the close frame)."""
FINISH_S = 1.5
"""At shutdown, how long connection handlers, then sessions, get to finish before they are
cancelled, and then to end after the cancel."""


async def _close_connection(conn: ServerConnection, timeout: float) -> None:
    """Close ``conn`` with 1001 (going away), dropping it if the handshake takes over ``timeout``;
    a connection still in its opening handshake is dropped at once."""
    if conn.protocol.state is not State.OPEN:
        conn.transport.abort()
        return
    try:
        async with asyncio.timeout(timeout):
            await conn.close(CloseCode.GOING_AWAY, "server shutting down")
    except TimeoutError:
        log.info("shutdown: %s did not complete the close handshake in %g s; dropped", conn.remote_address, timeout)
        conn.transport.abort()


async def _finish(
    what: str, tasks: set[asyncio.Future[None]], timeout: float, names: dict[asyncio.Future[None], str] | None = None
) -> None:
    """Wait up to ``timeout`` for ``tasks``; cancel those still running and wait up to ``timeout``
    again; log by name any that still did not end (they are left behind, never awaited forever)."""
    current = asyncio.current_task()
    if current is not None:
        tasks.discard(current)
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    if not pending:
        return
    for task in pending:
        task.cancel()
    _, stuck = await asyncio.wait(pending, timeout=timeout)
    label = names or {}
    cut = sorted(label.get(t) or (t.get_name() if isinstance(t, asyncio.Task) else repr(t)) for t in pending)
    log.warning("shutdown: %d %s(s) still running after %g s were cancelled: %s", len(pending), what, timeout, ", ".join(cut))
    if stuck:
        left = sorted(label.get(t) or (t.get_name() if isinstance(t, asyncio.Task) else repr(t)) for t in stuck)
        log.error("shutdown: %d %s(s) did not end when cancelled and are left behind: %s", len(stuck), what, ", ".join(left))


def _controlled(status: int, error: dict[str, object] | None) -> Response:
    """A call-control request's answer: its status, empty, or OpenAI's error object as JSON."""
    if error is None:
        return _text(http.HTTPStatus(status), "")
    return _bytes(http.HTTPStatus(status), json.dumps(error).encode(), "application/json")


def _live_error(exc: ProtocolError) -> Response:
    """A refused GPT-Live request, as OpenAI's API answers one (400, JSON)."""
    error = {"type": "invalid_request_error", "code": exc.code, "message": str(exc), "param": exc.param}
    return _bytes(http.HTTPStatus.BAD_REQUEST, json.dumps({"error": error}).encode(), "application/json")


def _offer(content_type: str, body: bytes) -> tuple[str, dict[str, object] | None]:
    """The SDP offer of a call request, and the ``session`` object of a multipart form (None when
    none came): ``application/sdp`` is the offer itself; ``multipart/form-data`` has the fields
    ``sdp`` and (optionally) ``session``, a JSON object.  ValueError says what is wrong."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/sdp":
        return body.decode("utf-8", "replace"), None
    if kind != "multipart/form-data":
        raise ValueError("send the SDP offer as application/sdp, or as the field sdp of a multipart/form-data body")
    message = BytesParser(_class=EmailMessage, policy=policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    fields: dict[str, bytes] = {}
    for part in message.iter_parts() if message.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    if "sdp" not in fields:
        raise ValueError("the form has no sdp field")
    session: dict[str, object] | None = None
    if "session" in fields:
        try:
            parsed = json.loads(fields["session"])
        except ValueError:
            raise ValueError("the session field is not JSON") from None
        if not isinstance(parsed, dict):
            raise ValueError("the session field must be a JSON object")
        session = parsed
    return fields["sdp"].decode("utf-8", "replace"), session


class VoiceAgentServer:
    """Serves every session of one process on one port, sharing ``engines``."""

    def __init__(self, config: Config, engines: Engines, *, clock: Clock | None = None, load: LoadMeter | None = None) -> None:
        """``load``: the admission's meter (made from the configuration and the measured turn
        cost when None; tests pass one with injected clocks)."""
        self.config = config
        self.engines = engines
        self.clock = clock or MonotonicClock()
        self.metrics = Metrics()
        self.metrics.add_collector(self._collect)
        self.sessions: set[Session] = set()
        self._reserved: set[ServerConnection] = set()  # handshakes admitted, sessions not yet open
        self._peers: dict[Session, ServerConnection] = {}  # each WebSocket session's connection
        self._watchers: set[asyncio.Future[None]] = set()
        self.capacity, self.capacity_source = self._capacity()
        self.load = load or self._load_meter()
        self.metrics.on_first_audio(self._turn_heard)
        self.access = access_for(config.server)
        self._idle = asyncio.Event()
        self._idle.set()
        self._server: WsServer | None = None
        self._calls: dict[str, tuple[WebRtcCall, asyncio.Task[None]]] = {}  # WebRTC calls by id
        self._transfers: dict[str, tuple[str | None, int | None]] = {}  # Twilio call id → (transfer target, SIP refusal)
        self.phone_calls = PhoneCalls()
        """The SIP gateway's calls, for OpenAI's call-control API."""
        self.live: dict[str, LiveProtocol] = {}
        """Running GPT-Live sessions by id, for their sidebands."""
        self._load_watch: asyncio.Task[None] | None = None
        self._admission_watch: asyncio.Task[None] | None = None
        self._agent: asyncio.Server | None = None
        self.draining = False

    def _capacity(self) -> tuple[int, str]:
        """The burst capacity: how many sessions' turns may end at the same instant inside the
        latency budget (:mod:`voiceagent.capacity`), from the turn cost measured at start-up.
        Reported (the ready line, ``/metrics``), not a limit: admission goes by the live load."""
        cfg = self.config
        cost = self.engines.turn_cost
        if cost is None:
            return 1, "turn cost not measured"
        n = capacity(cost, cfg.server.latency_budget_ms, cfg.vad.stop_ms)
        busy = f", measured on a busy machine ({100 * cost.contention:.0f} % waiting for a core)" if cost.contended else ""
        return n, f"{cost.work_s * 1000:.0f} ms of work per turn{busy}, {cfg.server.latency_budget_ms} ms budget"

    def _load_meter(self) -> LoadMeter:
        cfg = self.config.server
        cost = self.engines.turn_cost
        # A whole turn, the listening around it included, costs several times its critical path
        # measured at start-up (the reply's whole generation and synthesis, the partials, the
        # VAD): 16 conversations at a natural pace on a 2-core machine measured 4-6 times
        # (docs/decisions/admission.md).  Only a first estimate: the measured CPU per turn takes
        # over after a few turns.
        first = FIRST_TURN_FACTOR * cost.work_s if cost is not None else 2.0
        return LoadMeter(
            cores=_usable_cores(),
            budget_ms=cfg.latency_budget_ms,
            threshold=cfg.load_threshold,
            first_turn_s=first,
            first_turn_suspect=cost is not None and cost.contended,
            max_sessions=cfg.max_sessions,
        )

    def _turn_heard(self, session: str, latency_ms: float | None) -> None:
        """A reply's first audio: the turn is counted from there, not when its reply ends, so the
        CPU per turn does not divide the CPU of replies still playing among the turns before them
        (docs/decisions/admission.md, run 7)."""
        if latency_ms is not None:
            self.load.observe_turn(latency_ms, session)

    def admission_line(self) -> str:
        """One line: how this server admits sessions."""
        cap = self.config.server.max_sessions
        how = f"fixed at {cap} sessions (server.max_sessions)" if cap else f"by load under {self.load.threshold:.2f}"
        return f"admission {how}; {self.capacity} turns ending at once fit the budget ({self.capacity_source})"

    async def wait_idle(self) -> None:
        """Return once no session is open and every connection's handler has returned (at once if
        none is).  Each closed session's stages have been cancelled and awaited by then; a model
        call already handed to an executor may still be finishing there."""
        await self._idle.wait()
        pending = set(self._watchers) | {task for _, task in self._calls.values()}
        pending |= set(self._server.handler_tasks) if self._server is not None else set()
        pending.discard(asyncio.current_task())
        if pending:
            await asyncio.wait(pending)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        sock = next(iter(self._server.sockets))
        return int(sock.getsockname()[1])

    @property
    def tls(self) -> bool:
        return bool(self.config.server.certfile)

    @property
    def url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://{self.config.server.host}:{self.port}{REALTIME_PATH}"

    def how_to_connect(self) -> str:
        """One line: where the clients connect and, with auth on, how they authenticate."""
        host = f"{self.config.server.host}:{self.port}"
        http_scheme = "https" if self.tls else "http"
        ws_scheme = "wss" if self.tls else "ws"
        if not self.access.required:
            return f"browser: {http_scheme}://{host}/   phone (Twilio): {ws_scheme}://{host}/twilio   (no token needed)"
        token = self.access.tokens[0]
        shown = token if self.access.generated else "<token>"
        where = "generated for this run; set server.auth_tokens to keep one" if self.access.generated else "from server.auth_tokens"
        return (
            f"auth on ({where}): browser {http_scheme}://{host}/#token={shown}   clients: 'Authorization: Bearer {shown}'"
            f"   phone (Twilio): {ws_scheme}://{host}/twilio/{shown}"
        )

    async def start(self) -> None:
        cfg = self.config.server
        context: ssl.SSLContext | None = None
        if cfg.certfile:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cfg.certfile, cfg.keyfile)
        if not self.access.required and not is_loopback(cfg.host):
            log.warning("server.auth is off on %s: anyone who can reach this port can open sessions", cfg.host)
        self._server = await serve(
            self._handle,
            cfg.host,
            cfg.port,
            process_request=self._route,
            create_connection=PostConnection,
            select_subprotocol=_select_subprotocol,
            max_size=cfg.max_message_bytes,
            # No permessage-deflate: base64 audio, nearly all of the bytes, shrinks by about a
            # quarter for a zlib call on every message, and CPU, not bandwidth, is what limits how
            # many conversations a server holds (WebRTC's Opus is the answer to bandwidth).
            compression=None,
            logger=wire_logger(),
            ping_interval=20,
            ping_timeout=20,
            ssl=context,
        )
        self._load_watch = asyncio.create_task(loop_load.watch(), name="loop-load")
        self._admission_watch = asyncio.create_task(self._watch_admission(), name="admission")
        if cfg.recordings_dir:  # recordings past their time go at start-up too, not only after a call
            folder = cfg.recordings_dir
            try:
                gone = await asyncio.get_running_loop().run_in_executor(None, prune, folder, cfg.recordings_keep_days)
            except OSError as exc:
                log.error("calls are recorded in %s, but it cannot be read: %s", folder, exc)
            else:
                deleted = f"; {gone} old files deleted" if gone else ""
                log.info("calls are recorded in %s (kept %g days%s)", folder, cfg.recordings_keep_days, deleted)
        if cfg.agent_port:
            self._agent = await asyncio.start_server(self._agent_check, cfg.host, cfg.agent_port)

    @property
    def agent_port(self) -> int:
        """The port of the HAProxy agent (0 when it is off)."""
        if self._agent is None:
            return 0
        return int(next(iter(self._agent.sockets)).getsockname()[1])

    async def _watch_admission(self, interval_s: float = 0.5) -> None:
        """Sample the load every ``interval_s`` and log each change of what the server does with
        new and running sessions (the degrading order of :class:`voiceagent.admission.State`)."""
        while True:
            self.load.sample()
            changed = self.load.update_state(self._taken, self._unheard)
            if changed is Admission.ACCEPTING:
                log.info("admission: taking new sessions again (load %.2f, %d sessions)", self.load.load, len(self.sessions))
            elif changed is Admission.FULL:
                log.warning(
                    "admission: refusing new sessions, the %d running are answered inside the budget (%s)",
                    len(self.sessions),
                    self._verdict().detail,
                )
            elif changed is Admission.OVER_BUDGET:
                log.warning(
                    "admission: refusing new sessions and the running turns pass the %d ms budget (p95 %.0f ms): "
                    "every turn is still answered, late",
                    self.config.server.latency_budget_ms,
                    self.load.latency_p95_ms or 0.0,
                )
            await asyncio.sleep(interval_s)  # a periodic sampler, not a wait for anything

    def _in_use(self, session: Session) -> bool:
        """Whether ``session`` still holds a place: not once its client has gone, although its
        reply may still be being cancelled (a caller who hangs up and dials again at once was
        refused by its own last call)."""
        if session.closing:
            return False
        peer = self._peers.get(session)
        return peer is None or peer.state is State.OPEN

    @property
    def _taken(self) -> int:
        """Places taken: the sessions in use and the handshakes admitted but not yet open."""
        return sum(1 for s in self.sessions if self._in_use(s)) + len(self._reserved)

    @property
    def _unheard(self) -> int:
        """Of :attr:`_taken`, the places whose cost the measured load has not seen: handshakes,
        and sessions that have had no turn answered and no reply audio sent yet.  From its first
        audio a turn's critical path (the final transcript, the first clause and its voice) is
        spent and in the measured CPU share; counting it until the reply ended counted it twice
        for the seconds the reply plays (callers arriving one by one were refused at 12 of 16
        with p95 1.0 s, docs/decisions/admission.md)."""
        return len(self._reserved) + self.load.unheard(s.id for s in self.sessions if self._in_use(s) and not s.spoke)

    def _verdict(self) -> AdmissionVerdict:
        """Whether the load admits one more session now, beside the places taken."""
        return self.load.verdict(self._taken, self._unheard)

    @property
    def taking_sessions(self) -> bool:
        """Ready, and the load admits one more session now."""
        return self.ready and self._verdict().accept

    async def _agent_check(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """HAProxy's agent-check: one line (``ready up NN%`` or ``drain``), then close.  Whatever
        the agent sends (``agent-send``) is not read: the answer is the same for every backend."""
        line = f"ready up {self.load.weight}%\n" if self.taking_sessions else "drain\n"
        try:
            writer.write(line.encode())
            await writer.drain()
        except ConnectionError:
            pass  # the checker went away first; the next check asks again
        finally:
            writer.close()

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def aclose(self) -> None:
        """Stop listening, close every connection and session, and return within about
        :data:`CLOSE_S` + 2 × :data:`FINISH_S` whatever the peers do: a close handshake that a
        peer does not complete in time (it reads nothing, or its TCP window is shut) drops that
        connection, and a handler or session that has not finished after that is cancelled;
        what still did not finish is logged by name and left behind."""
        for watch in (self._load_watch, self._admission_watch):
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
        self._load_watch = self._admission_watch = None
        if self._agent is not None:
            self._agent.close()
            await self._agent.wait_closed()
            self._agent = None
        if self._server is not None:
            server = self._server
            # The listener stops at once; the connections are closed here, each with a bound:
            # websockets' own close waits for a full send buffer to drain, without a limit.
            server.close(close_connections=False)
            await asyncio.gather(*(_close_connection(c, CLOSE_S) for c in list(server.all_connections)))
            await _finish("connection handler", set(server.handler_tasks), FINISH_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FINISH_S):
                    await server.wait_closed()
        calls = dict(self._calls)
        for call, _ in calls.values():
            call.hang_up("server shutting down")
        await _finish("call", {task for _, task in calls.values()}, FINISH_S)
        closing: dict[asyncio.Future[None], str] = {asyncio.ensure_future(s.aclose()): s.id for s in list(self.sessions)}
        await _finish("session", set(closing), FINISH_S, names=closing)
        try:
            async with asyncio.timeout(FINISH_S):
                await self.engines.llm.aclose()  # this loop's pooled connections (the engine outlives the server)
        except TimeoutError:
            log.warning("shutdown: the LLM engine still had generations open after %g s", FINISH_S)

    async def drain(self, grace_s: float) -> None:
        """Shut down gently (SIGTERM): refuse new sessions at once, give replies in progress up to
        ``grace_s`` to finish, then close every session and the listener (:meth:`aclose`, bounded
        too: the whole takes at most ``grace_s`` + :data:`CLOSE_S` + 2 × :data:`FINISH_S`)."""
        self.draining = True
        log.info("draining: %d sessions open, new ones refused; up to %g s for replies in progress", len(self.sessions), grace_s)
        try:
            async with asyncio.timeout(grace_s):
                await asyncio.gather(*(s.quiet() for s in list(self.sessions)))
        except TimeoutError:
            log.warning("drain: replies still running after %g s are cut", grace_s)
        await self.aclose()

    @property
    def ready(self) -> bool:
        """Models loaded and warmed (the turn cost measured), and not draining."""
        return self.engines.turn_cost is not None and not self.draining

    async def __aenter__(self) -> VoiceAgentServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _route(self, connection: ServerConnection, request: Request) -> Response | Awaitable[Response] | None:
        post = connection.post if isinstance(connection, PostConnection) else None
        if post is not None:
            return self._post(request, post)
        path = _route_path(request.path)
        if path == CALLS_PATH:
            return _text(http.HTTPStatus.METHOD_NOT_ALLOWED, "POST an SDP offer here\n", Allow="POST")
        if path in (TWIML_PATH, TWIML_NEXT_PATH):
            refused = self._unauthorized(request)
            if refused is not None:
                return refused
        if path == REALTIME_PATH and "call_id" in parse_qs(urlsplit(request.path).query):
            return self._attach_check(request)
        attach = _LIVE_ATTACH.fullmatch(path)
        if attach is not None:
            return self._unauthorized(request) or self._sideband_check(attach.group(1))
        if path in (REALTIME_PATH, TWILIO_PATH, LIVE_PATH):
            refused = self._admission(request)
            if refused is not None:
                return refused
            # Reserve the place now (not when the session opens): a burst of handshakes must not
            # pass the limit.  It is given back when the session opens or the connection ends.
            self._reserved.add(connection)
            watcher = asyncio.ensure_future(self._unreserve_on_close(connection))
            self._watchers.add(watcher)
            watcher.add_done_callback(self._watchers.discard)
            return None  # go on with the WebSocket handshake
        if path == SIP_CALLS_PATH or _SIP_CALL.fullmatch(path):
            return self._placed_call(request, path)
        if path == "/healthz":
            return _text(http.HTTPStatus.OK, "ok\n")
        if path == "/readyz":
            if self.taking_sessions:
                return _text(http.HTTPStatus.OK, f"ready load={self.load.load:.2f}\n")
            if self.ready:
                return _text(http.HTTPStatus.SERVICE_UNAVAILABLE, f"full load={self.load.load:.2f}\n", Retry_After=RETRY_AFTER)
            return _text(http.HTTPStatus.SERVICE_UNAVAILABLE, "draining\n" if self.draining else "warming up\n", Retry_After="5")
        if path == "/metrics":
            names = parse_qs(urlsplit(request.path).query).get("name[]", [])
            return _bytes(http.HTTPStatus.OK, self.metrics.render(names), CONTENT_TYPE)
        if path == TWIML_PATH:
            try:
                url = stream_url(self.config.server.public_url, request.headers.get("Host"), request.headers.get("X-Forwarded-Proto"))
                token = self.access.token_in(request.path, request.headers)
                action = TWIML_NEXT_PATH
                if token is not None:
                    url += f"/{token}"  # Twilio's stream URL takes no query string: the token is a path segment
                    action += f"?token={token}"
            except ValueError as exc:
                return _text(http.HTTPStatus.BAD_REQUEST, f"{exc}\n")
            return _text(http.HTTPStatus.OK, twiml(url, action), "text/xml; charset=utf-8")
        if path == TWIML_NEXT_PATH:
            call_sid = parse_qs(urlsplit(request.path).query).get("CallSid", [""])[0]
            target, refuse = self._transfers.pop(call_sid, (None, None))
            step = f"refuse {refuse}" if refuse is not None else f"dial {target}" if target else "hang up"
            log.info("twilio call %s: after its stream, %s", call_sid or "-", step)
            return _text(http.HTTPStatus.OK, after_stream_twiml(target, refuse), "text/xml; charset=utf-8")
        static = static_file(path)
        if static is not None:
            body, content_type = static
            return _bytes(http.HTTPStatus.OK, body, content_type)
        return _text(http.HTTPStatus.NOT_FOUND, f"no route for {path}\n")

    def _unauthorized(self, request: Request) -> Response | None:
        """The 401 or 403 of a request without an accepted token (or from a foreign origin),
        counted; None when it may go on."""
        refusal = self.access.check(request.path, request.headers)
        if refusal is None:
            return None
        self.metrics.refused("unauthorized" if refusal.status == http.HTTPStatus.UNAUTHORIZED else "forbidden")
        return _text(http.HTTPStatus(refusal.status), refusal.reason + "\n", WWW_Authenticate="Bearer")

    def _placed_call(self, request: Request, path: str) -> Response:
        """``GET /v1/sip/calls/ID``: how a call the server placed goes."""
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        placed = _SIP_CALL.fullmatch(path)
        record = self.phone_calls.placed.get(placed.group(1)) if placed is not None else None
        if record is None:
            return _text(http.HTTPStatus.NOT_FOUND, "no such call\n" if placed else "POST a call to place here\n")
        return _bytes(http.HTTPStatus.OK, json.dumps(record.as_object()).encode(), "application/json")

    def _admission(self, request: Request) -> Response | None:
        """The refusal of a new session (auth, draining, capacity), or None: it may open."""
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        if self.draining:
            self.metrics.refused("draining")
            return _text(http.HTTPStatus.SERVICE_UNAVAILABLE, "server is shutting down; retry later\n", Retry_After="5")
        verdict = self._verdict()
        if not verdict.accept:
            self.metrics.refused("capacity" if verdict.reason == "max_sessions" else "load")
            log.info("refused a new session: %s", verdict.detail)
            return _text(http.HTTPStatus.SERVICE_UNAVAILABLE, f"{verdict.detail}; retry later\n", Retry_After=RETRY_AFTER)
        return None

    def _remember_next(self, call_sid: str, transfer: str | None, refuse: int | None) -> None:
        """Twilio (or the SIP gateway) asks TWIML_NEXT_PATH what a call does once its stream ends,
        on whichever request: kept by call id, before the stream closes."""
        while len(self._transfers) >= _TRANSFERS_KEPT:
            self._transfers.pop(next(iter(self._transfers)))
        self._transfers[call_sid] = (transfer, refuse)

    def _live_session(self, session_id: str) -> LiveProtocol | None:
        """The running GPT-Live session ``session_id``: a socket's or WebRTC's, or a SIP call's."""
        conn = self.live.get(session_id)
        if conn is None:
            call = self.phone_calls.get_live(session_id)
            conn = call.live.protocol if call is not None and call.live is not None else None
        return conn

    def _live_started(self, session_id: str) -> bool:
        """Whether GPT-Live session ``session_id`` runs and has started (a sideband may join it)."""
        conn = self._live_session(session_id)
        return conn is not None and conn.started is not None and not conn.closed

    def _sideband_check(self, session_id: str) -> Response | None:
        """A GPT-Live sideband: the session must be running and started (it opens none, so
        admission does not count it)."""
        conn = self._live_session(session_id)
        placed = self.phone_calls.placed_live(session_id)
        if conn is None and placed is not None and placed.status != "ended":
            return None  # a session still dialling: the sideband follows the call until it runs (live_outbound)
        call = self.phone_calls.get_live(session_id)
        if conn is None and call is not None and call.state != "ended":
            why = f"call {session_id} is {call.state if call.state != 'accepted' else 'accepted on Realtime'}: accept it on GPT-Live first"
            return _text(http.HTTPStatus.CONFLICT, why + "\n")
        if conn is None or conn.closed:
            return _text(http.HTTPStatus.NOT_FOUND, f"no live session {session_id}\n")
        if conn.started is None:
            return _text(http.HTTPStatus.CONFLICT, f"session {session_id} has not started: its primary sends session.start first\n")
        return None

    def _attach_check(self, request: Request) -> Response | None:
        """A socket attaching to a call: auth as any other, then the call must exist (404).  It
        opens no session, so admission does not count it."""
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        call_id = parse_qs(urlsplit(request.path).query)["call_id"][0]
        call = self.phone_calls.get(call_id)
        if call is None:
            return _text(http.HTTPStatus.NOT_FOUND, f"no call {call_id[:64]}\n")
        if call.state != "accepted":  # as OpenAI's: a call is watched once it has been accepted
            return _text(http.HTTPStatus.CONFLICT, f"call {call_id} is {call.state}: accept it first\n")
        if call.surface == "live":
            why = f"call {call_id} was accepted on GPT-Live: its sidebands attach at /v1/live/sessions/{call.live_id}/attach"
            return _text(http.HTTPStatus.CONFLICT, why + "\n")
        return None

    async def _post(self, request: Request, post: Post) -> Response:
        """A plain POST: a WebRTC offer (a new call) or a call's control."""
        if post.error is not None:
            return _text(post.error[0], post.error[1] + "\n")
        path = urlsplit(request.path).path
        live_control = _LIVE_CONTROL.fullmatch(path)
        if live_control is not None:
            refused = self._unauthorized(request)
            if refused is not None:
                return refused
            return _controlled(*await call_control(self.phone_calls, live_control.group(1), live_control.group(2), post.body, "live"))
        control = _CONTROL.fullmatch(path)
        known = control is not None and (self.phone_calls.get(control.group(1)) is not None or control.group(1) in self.phone_calls.placed)
        if control is not None and (known or control.group(2) != "hangup"):
            refused = self._unauthorized(request)
            if refused is not None:
                return refused
            return _controlled(*await call_control(self.phone_calls, control.group(1), control.group(2), post.body))
        if path == SIP_CALLS_PATH:
            refused = self._unauthorized(request)
            if refused is not None:
                return refused
            codec = RealtimeCodec(settings_from_config(self.config), self.engines.tts.sample_rate)
            status, body = await place_call(self.phone_calls, post.body, codec)
            return _bytes(http.HTTPStatus(status), json.dumps(body).encode(), "application/json")
        hangup = control  # a WebRTC call's hangup: every other action returned above
        if hangup is not None:
            refusal = self.access.check(request.path, request.headers)
            if refusal is not None:
                return _text(http.HTTPStatus(refusal.status), refusal.reason + "\n", WWW_Authenticate="Bearer")
            found = self._calls.get(hangup.group(1))
            if found is None:
                return _text(http.HTTPStatus.NOT_FOUND, f"no call {hangup.group(1)}\n")
            found[0].hang_up("hangup requested")
            return _text(http.HTTPStatus.OK, "ok\n")
        if path == LIVE_PATH and is_sip_create(post.body):  # a GPT-Live session that dials out
            refused = self._unauthorized(request)
            if refused is not None:
                return refused
            try:
                status, created = await place_live(self.phone_calls, post.body)
            except ProtocolError as exc:
                return _live_error(exc)
            return _bytes(http.HTTPStatus(status), json.dumps(created).encode(), "application/json")
        if path not in (CALLS_PATH, REALTIME_PATH, LIVE_PATH):
            return _text(http.HTTPStatus.NOT_FOUND, f"no route for POST {path}\n")
        refused = self._admission(request)
        if refused is not None:
            return refused
        if importlib.util.find_spec("aiortc") is None:
            return _text(http.HTTPStatus.NOT_IMPLEMENTED, "WebRTC needs aiortc: pip install 'voiceagent[webrtc]'\n")
        if path == LIVE_PATH:
            try:
                live, sdp = live_offer(post.body)
            except ProtocolError as exc:
                return _live_error(exc)
            return await self._call(sdp, None, live=live)
        try:
            sdp, session_update = _offer(request.headers.get("Content-Type", ""), post.body)
        except ValueError as exc:
            return _text(http.HTTPStatus.BAD_REQUEST, f"{exc}\n")
        metrics = parse_qs(urlsplit(request.path).query).get("voiceagent_metrics") == ["1"]
        return await self._call(sdp, session_update, send_metrics=metrics)

    async def _call(
        self, sdp: str, session_update: dict[str, object] | None, *, send_metrics: bool = False, live: dict[str, object] | None = None
    ) -> Response:
        """Answer the offer ``sdp`` with a new call (its session configured by ``session_update``
        first, as the multipart form's ``session``), or refuse it with 400.  ``live``: a GPT-Live
        session's configuration instead (the answer is then GPT-Live's JSON)."""
        session = Session(self.engines, self.config, clock=self.clock, metrics=self.metrics)
        self.sessions.add(session)
        self._idle.clear()
        cfg = self.config.server
        call: WebRtcCall
        if live is not None:
            call = LiveWebRtcCall(
                session, self.engines.tts.sample_rate, ice_servers=cfg.ice_servers, media_timeout_s=cfg.webrtc_media_timeout_s
            )
        else:
            call = WebRtcCall(
                session,
                self.engines.tts.sample_rate,
                ice_servers=cfg.ice_servers,
                media_timeout_s=cfg.webrtc_media_timeout_s,
                send_metrics=send_metrics,
            )
        try:
            await session.start()
            if isinstance(call, LiveWebRtcCall):
                await call.configure(live or {})
            elif session_update is not None:
                cmd = call.codec.decode(json.dumps({"type": "session.update", "session": session_update}))
                await call.commands.apply(cmd)
            answer = await call.answer(sdp)
        except (ProtocolError, WebRtcError) as exc:
            await self._end_session(session)
            self.metrics.error(exc.code if isinstance(exc, ProtocolError) else "bad_offer")
            if isinstance(call, LiveWebRtcCall) and isinstance(exc, ProtocolError):
                return _live_error(exc)
            return _text(http.HTTPStatus.BAD_REQUEST, f"{exc}\n")
        except BaseException:
            await self._end_session(session)
            raise
        task = asyncio.create_task(self._run_call(call), name=f"{session.id}.call")
        self._calls[call.call_id] = (call, task)
        log.info("session %s opened as a WebRTC call", session.id)
        if isinstance(call, LiveWebRtcCall):
            self.live[call.live.id] = call.live
            created = {"session": {"id": call.live.id}, "transport": {"type": "webrtc", "sdp": answer}}
            return _bytes(http.HTTPStatus.CREATED, json.dumps(created).encode(), "application/json")
        return _bytes(http.HTTPStatus.CREATED, answer.encode(), "application/sdp", Location=f"{CALLS_PATH}/{call.call_id}")

    async def _run_call(self, call: WebRtcCall) -> None:
        try:
            await call.run()
        finally:
            self._calls.pop(call.call_id, None)
            if isinstance(call, LiveWebRtcCall):
                self.live.pop(call.live.id, None)
            await self._end_session(call.session)
            log.info("session %s closed", call.id)

    async def _end_session(self, session: Session) -> None:
        """Close ``session`` and stop counting it (the server is idle once none is left)."""
        try:
            await session.aclose()
        finally:
            self.sessions.discard(session)
            self._peers.pop(session, None)
            self.load.forget(session.id)
            if not self.sessions:
                self._idle.set()

    async def _unreserve_on_close(self, connection: ServerConnection) -> None:
        await connection.wait_closed()
        self._reserved.discard(connection)

    def _collect(self) -> Iterator[Metric]:
        """Values owned by the engine and the sessions, read at each scrape of ``/metrics``."""
        st = self.engines.llm.stats()
        yield GaugeMetricFamily(
            "voiceagent_capacity_sessions",
            "sessions whose turns may end at the same instant inside the latency budget (start-up estimate; admission goes by load)",
            value=self.capacity,
        )
        load = GaugeMetricFamily(
            "voiceagent_load",
            "the measured load, 0-1: cpu (CPU seconds / wall seconds / cores), latency (recent turns' p95 / budget), "
            "and the larger (admission)",
            labels=["measure"],
        )
        load.add_metric(["admission"], self.load.load)
        load.add_metric(["cpu"], self.load.cpu_load)
        load.add_metric(["latency"], self.load.latency_load)
        yield load
        yield GaugeMetricFamily("voiceagent_accepting_sessions", "1 while new sessions are admitted", value=int(self.taking_sessions))
        state = GaugeMetricFamily(
            "voiceagent_admission_state",
            "1 for what the server does now: accepting, full (new sessions refused, running ones inside the budget), "
            "over_budget (running turns pass the budget, still answered)",
            labels=["state"],
        )
        for each in Admission:
            state.add_metric([each.value], int(self.load.state is each))
        yield state
        yield CounterMetricFamily(
            "voiceagent_turns_over_budget", "turns whose first audio came after server.latency_budget_ms", value=self.load.turns_over_budget
        )
        slots = GaugeMetricFamily(
            "voiceagent_llm_slots", "exclusive sequence slots of the LLM engine (busy: leased now)", labels=["engine", "state"]
        )
        slots.add_metric([st.engine, "total"], st.slots)
        slots.add_metric([st.engine, "busy"], st.busy)
        yield slots
        waiting = GaugeMetricFamily("voiceagent_llm_waiting", "generations waiting for an LLM slot", labels=["engine"])
        waiting.add_metric([st.engine], st.waiting)
        yield waiting
        prompt = CounterMetricFamily(
            "voiceagent_llm_prompt_tokens",
            "prompt tokens, those already in the KV cache (reused), those evaluated while the user spoke (prefilled), and those "
            "copied from another conversation's evaluated instructions (shared), and those moved back over the turns a "
            "cut dropped (shifted)",
            labels=["engine", "kind"],
        )
        prompt.add_metric([st.engine, "all"], st.prompt_tokens)
        prompt.add_metric([st.engine, "reused"], st.reused_tokens)
        prompt.add_metric([st.engine, "prefilled"], st.prefilled_tokens)
        prompt.add_metric([st.engine, "shared"], st.shared_tokens)
        prompt.add_metric([st.engine, "shifted"], st.shifted_tokens)
        yield prompt
        generated = CounterMetricFamily("voiceagent_llm_generated_tokens", "tokens generated by the LLM engine", labels=["engine"])
        generated.add_metric([st.engine], st.generated_tokens)
        yield generated
        decode = CounterMetricFamily("voiceagent_llm_decode_seconds", "seconds the LLM engine spent in forward passes", labels=["engine"])
        decode.add_metric([st.engine], st.decode_seconds)
        yield decode
        if st.steps:
            steps = CounterMetricFamily(
                "voiceagent_llm_steps", "forward passes of the batched engine, and the tokens they carried", labels=["engine", "kind"]
            )
            steps.add_metric([st.engine, "passes"], st.steps)
            steps.add_metric([st.engine, "tokens"], st.step_tokens)
            yield steps
        if st.breaker:
            breaker = GaugeMetricFamily(
                "voiceagent_llm_breaker_open", "1 while the LLM circuit breaker sends turns to the fallback", labels=["engine", "state"]
            )
            breaker.add_metric([st.engine, st.breaker], int(st.breaker != "closed"))
            yield breaker
        depth = GaugeMetricFamily("voiceagent_queue_depth", "events waiting in front of each stage, summed over sessions", labels=["queue"])
        totals: collections.Counter[str] = collections.Counter()
        for session in list(self.sessions):
            totals.update(session.queue_depths())
        for queue in QUEUES:
            depth.add_metric([queue], totals[queue])
        yield depth

    async def _handle(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self._reserved.discard(ws)
        parts = urlsplit(ws.request.path)
        path = _route_path(ws.request.path)
        query = parse_qs(parts.query)
        if path == REALTIME_PATH and "call_id" in query:
            call = self.phone_calls.get(query["call_id"][0])
            if call is not None:  # it may have ended since the handshake's check
                await AttachedConnection(ws, call, self.engines.tts.sample_rate).run()
            return
        attach = _LIVE_ATTACH.fullmatch(path)
        if attach is not None:
            session_id = attach.group(1)
            live = self._live_session(session_id)
            placed = self.phone_calls.placed_live(session_id)
            if live is None and placed is not None and await follow_placed(ws, placed, functools.partial(self._live_started, session_id)):
                live = self._live_session(session_id)
            if live is not None:  # it may have ended since the handshake's check
                await LiveSideband(ws, live).run()
            return
        phone = PhoneTools(self.config.phone.targets) if path == TWILIO_PATH and self.config.phone.tools else None
        session = Session(self.engines, self.config, clock=self.clock, metrics=self.metrics, phone=phone)
        self.sessions.add(session)
        self._peers[session] = ws
        self._idle.clear()
        live_id: str | None = None
        try:
            await session.start()
            conn: RealtimeConnection | TwilioConnection | LiveConnection
            if path == LIVE_PATH:
                conn = LiveConnection(ws, session, self.engines.tts.sample_rate)
                live_id = conn.live.id
                self.live[live_id] = conn.live
            elif path == TWILIO_PATH:
                cfg = self.config.server
                webhook = (cfg.sip_webhook_url, cfg.sip_webhook_secret, cfg.webhook_events) if cfg.sip_webhook_url else None
                conn = TwilioConnection(ws, session, self.engines.tts.sample_rate, self.phone_calls, webhook, self._remember_next)
            else:
                conn = RealtimeConnection(ws, session, self.engines.tts.sample_rate, send_metrics=query.get("voiceagent_metrics") == ["1"])
            log.info("session %s opened on %s from %s", session.id, path, ws.remote_address)
            await conn.run()
        finally:
            if live_id is not None:
                self.live.pop(live_id, None)
            await self._end_session(session)
            log.info("session %s closed", session.id)
