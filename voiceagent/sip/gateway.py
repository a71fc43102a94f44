"""The SIP gateway process: PJSIP answers calls and bridges each to a server session.

Run by ``voiceagent serve`` when ``server.sip_port`` is set (:mod:`.supervisor`), or by hand::

    python -m voiceagent.sip.gateway --port 5060 --server ws://127.0.0.1:8765 --allow 127.0.0.1

Threads, and why:
* the **main thread** owns PJSIP (``threadCnt = 0``): it polls ``libHandleEvents`` and carries
  out what the loop asks of a call (answer, hang up, transfer) from a queue, because PJSIP's
  objects must be driven from threads it knows and its callbacks arrive here;
* PJSIP's **clock thread** calls each call's media port every 20 ms: frames go to the loop by
  ``call_soon_threadsafe`` and the agent's audio comes from the call's :class:`~.playout.Playout`;
* an **event loop thread** runs one :class:`~.bridge.CallBridge` per call.

A call is admitted by its source address (:class:`~.allow.AllowList`), else refused 403 before
any session exists.  At most ``--max-calls`` calls at once; more are refused 486 (busy).  The
codecs offered are PCMU, PCMA and G.722 (with telephone-event); PJSIP's conference bridge turns
each into 8 kHz frames for the server.  No TLS or SRTP transport is configured (the wheel's
bundled OpenSSL is old: docs/decisions/sip-stack.md).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from voiceagent.config.schema import SIP_CALLS_LIMIT
from voiceagent.denoise import livekit_rtc
from voiceagent.echo import EchoCanceller
from voiceagent.errors import MissingDependencyError

from .allow import AllowList, source_host
from .bridge import RATE, CallBridge, Next
from .registration import PASSWORD_ENV, Registration, describe, parse_register
from .supervisor import OUTBOUND, TOKEN_ENV

log = logging.getLogger("voiceagent.sip")

FRAME_MS = 20
_SAMPLES = RATE * FRAME_MS // 1000
"""Samples in one frame of the call's audio."""
KEYS = "0123456789*#ABCD"
"""The keys RFC 4733 carries (telephone-events 0-15)."""
CODECS = {"G722/16000": 255, "PCMU/8000": 254, "PCMA/8000": 253}
"""Codec priorities (PJSIP's names), the wideband one first where the caller offers it; every
other codec is disabled."""

try:  # the extra `voiceagent[sip]`; without it the gateway says so in one line
    import pjsua2 as pj
except ImportError:  # pragma: no cover - exercised where the wheel is missing
    pj = None

# PJSIP's classes are subclassed for their callbacks; without the module the names stay plain
# objects so that this file imports (and says what is missing) everywhere.
_PortBase: Any = pj.AudioMediaPort if pj is not None else object
_CallBase: Any = pj.Call if pj is not None else object
_AccountBase: Any = pj.Account if pj is not None else object


def _require_pjsua2() -> Any:
    if pj is None:
        raise SystemExit(
            "server.sip_port needs PJSIP's Python bindings: pip install 'voiceagent[sip]' "
            "(wheels exist for CPython 3.11-3.12 on x86_64 Linux)"
        )
    return pj


_PRIVATE_HEADERS = {"authorization", "proxy-authorization"}


def invite_headers(message: str) -> list[tuple[str, str]]:
    """The headers of a SIP request's text, in order, repeats kept, credentials left out (OpenAI's
    webhook carries them so; an application treats them as untrusted metadata)."""
    head = message.replace("\r\n", "\n").split("\n\n", 1)[0].split("\n")[1:]
    headers: list[tuple[str, str]] = []
    for line in head:
        if line[:1] in (" ", "\t") and headers:  # a folded continuation line
            name, value = headers[-1]
            headers[-1] = (name, f"{value} {line.strip()}")
            continue
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() not in _PRIVATE_HEADERS:
            headers.append((name.strip(), value.strip()))
    return headers


class MediaPort(_PortBase):  # type: ignore[misc]
    """One call's audio: caller frames to the bridge, the agent's from its playout.  Its two
    callbacks run on PJSIP's clock thread every 20 ms: they only copy, cancel the echo and hand
    over.

    ``canceller``: the agent's own voice coming back (a speakerphone, a line's echo) is removed
    from the caller's audio before the server hears it.  Both streams are this port's, on the
    call's one media clock: every frame played is the reference, and every tick's input counts,
    silence included, so the two stay in step (:mod:`voiceagent.echo`)."""

    def __init__(self, bridge: CallBridge, loop: asyncio.AbstractEventLoop, name: str, canceller: EchoCanceller | None = None) -> None:
        super().__init__()
        self._bridge = bridge
        self._loop = loop
        self._canceller = canceller
        fmt = pj.MediaFormatAudio()
        fmt.type = pj.PJMEDIA_TYPE_AUDIO
        fmt.clockRate = RATE
        fmt.channelCount = 1
        fmt.bitsPerSample = 16
        fmt.frameTimeUsec = FRAME_MS * 1000
        self.createPort(f"call-{name}", fmt)

    def onFrameReceived(self, frame: Any) -> None:  # noqa: N802 - PJSIP's name
        audio = frame.type == pj.PJMEDIA_FRAME_TYPE_AUDIO and frame.size
        if not audio and self._canceller is None:
            return
        # A tick with no audio is silence to the canceller: its count keeps the two streams in step.
        pcm = np.frombuffer(bytes(frame.buf), dtype="<i2").copy() if audio else np.zeros(_SAMPLES, dtype=np.int16)
        if self._canceller is not None:
            pcm = self._canceller.heard(pcm)  # it logs how the line was judged, once
        if audio:
            self._loop.call_soon_threadsafe(self._bridge.inbound, pcm)

    def onFrameRequested(self, frame: Any) -> None:  # noqa: N802 - PJSIP's name
        pcm, passed = self._bridge.playout.pull(_SAMPLES)
        if self._canceller is not None:
            self._canceller.played(pcm, RATE)
        if passed:
            self._loop.call_soon_threadsafe(self._bridge.marks_passed, passed)
        frame.type = pj.PJMEDIA_FRAME_TYPE_AUDIO
        frame.buf = pj.ByteVector(pcm.astype("<i2").tobytes())
        frame.size = len(pcm) * 2


class SipCall(_CallBase):  # type: ignore[misc]
    """One call, from ringing to its end.  Its callbacks run on PJSIP's thread."""

    def __init__(self, gateway: Gateway, account: Any, call_id: int) -> None:
        super().__init__(account, call_id)
        self.gateway = gateway
        self.pj_id = call_id
        self.sid = f"sip{next(gateway.ids)}"
        self.caller = ""
        self.sip_headers: list[tuple[str, str]] = []
        self.bridge: CallBridge | None = None
        self.port: MediaPort | None = None
        self.ended = False
        self.answered = False
        self.outbound = ""
        """The server's id of a call this gateway placed ("" for an incoming call)."""
        self.deadline: float | None = None  # an outbound call not answered by then is cancelled
        self.given_up = False  # the application hung up an outbound call before its answer
        self.timed_out = False

    def start_bridge(self) -> None:
        """Ask the server for a session; the call is answered once it has one (``on_open``)."""
        gateway, pj_id = self.gateway, self.pj_id

        # The callbacks name the call by its id, not by reference: a bridge holding its call would
        # make a cycle that only the garbage collector frees, on whatever thread it runs (PJSIP's
        # objects must be freed on its own thread, and before libDestroy).
        def on_open() -> None:  # on the loop; the answer on PJSIP's thread
            gateway.later(lambda: gateway.call_do(pj_id, lambda call: call.answer_now()))

        def on_end(step: Next | None) -> None:
            if step is not None:
                gateway.later(lambda: gateway.call_do(pj_id, lambda call: call.finish(step)))

        def on_keys(digits: str) -> None:
            gateway.later(lambda: gateway.call_do(pj_id, lambda call: call.press(digits)))

        self.bridge = CallBridge(
            gateway.ws_url, gateway.next_url, self.sid, self.caller, on_open, on_end, self.sip_headers, self.outbound, on_keys
        )
        asyncio.run_coroutine_threadsafe(self.bridge.run(), gateway.loop)
        if self.outbound:  # answered already: its media may be up before the bridge was
            self._connect_media()

    def onCallMediaState(self, prm: Any) -> None:  # noqa: N802 - PJSIP's name
        self._connect_media()

    def _connect_media(self) -> None:
        info = self.getInfo()  # held: its media vector points into it (a temporary's would be freed)
        for media in info.media:
            if media.type == pj.PJMEDIA_TYPE_AUDIO and media.status == pj.PJSUA_CALL_MEDIA_ACTIVE and self.bridge is not None:
                audio = self.getAudioMedia(media.index)
                if self.port is None:
                    canceller = EchoCanceller(line=True, label=f"sip call {self.sid}") if self.gateway.echo_cancellation else None
                    self.port = MediaPort(self.bridge, self.gateway.loop, self.sid, canceller)
                audio.startTransmit(self.port)  # again after a re-INVITE (hold, resume)
                self.port.startTransmit(audio)

    def onDtmfDigit(self, prm: Any) -> None:  # noqa: N802 - PJSIP's name
        if self.bridge is not None:
            self.gateway.loop.call_soon_threadsafe(self.bridge.dtmf, prm.digit)

    def onCallTransferStatus(self, prm: Any) -> None:  # noqa: N802 - PJSIP's name
        # The transferee reports the new call's progress; this side's part ends with it either
        # way (PJSIP does not hang up the transferor by itself).
        if prm.finalNotify or prm.statusCode >= 300:
            log.info("sip call %s: transfer %s (%s)", self.sid, "done" if prm.statusCode < 300 else "failed", prm.statusCode)
            prm.cont = False
            self.end(200)

    def onCallState(self, prm: Any) -> None:  # noqa: N802 - PJSIP's name
        info = self.getInfo()
        if self.outbound and info.state == pj.PJSIP_INV_STATE_EARLY and not self.answered:
            report(self.outbound, "ringing")
        elif self.outbound and info.state == pj.PJSIP_INV_STATE_CONFIRMED and not self.answered and self.given_up:
            # The callee's 200 crossed the application's CANCEL: PJSIP acknowledges it; end it.
            self.end(200)
        elif self.outbound and info.state == pj.PJSIP_INV_STATE_CONFIRMED and not self.answered:
            self.answered = True
            log.info("sip call %s to %s: answered", self.sid, self.caller)
            report(self.outbound, "answered")
            self.start_bridge()
        if info.state == pj.PJSIP_INV_STATE_DISCONNECTED:
            log.info("sip call %s: ended (%s %s)", self.sid, info.lastStatusCode, info.lastReason)
            if self.outbound:
                reason = "no answer" if self.timed_out else "hung up before an answer" if self.given_up else str(info.lastReason)
                report(self.outbound, "ended", 0 if self.timed_out else int(info.lastStatusCode), reason)
            self.ended = True
            if self.bridge is not None:
                self.gateway.loop.call_soon_threadsafe(self.bridge.hung_up)
            self.gateway.calls.pop(self.pj_id, None)

    def press(self, digits: str) -> None:
        """The agent's keys (``send_dtmf``) as RFC 4733 telephone events; SIP INFO when the other
        side offered no telephone-event (PJSIP then refuses the RTP events)."""
        keys = "".join(d for d in digits.upper() if d in KEYS)
        if self.ended or not self.answered or not keys:
            return
        try:
            self.dialDtmf(keys)
            log.info("sip call %s: pressed %s (RFC 4733)", self.sid, keys)
        except pj.Error as exc:
            log.info("sip call %s: no telephone-event (%s): pressing %s by SIP INFO", self.sid, exc.reason, keys)
            param = pj.CallSendDtmfParam()
            param.method = pj.PJSUA_DTMF_METHOD_SIP_INFO
            param.digits = keys
            self.sendDtmf(param)

    def answer_now(self) -> None:
        if not self.ended and not self.answered:
            op = pj.CallOpParam()
            op.statusCode = 200
            self.answer(op)
            self.answered = True
            log.info("sip call %s from %s: answered", self.sid, self.caller)

    def finish(self, step: Next) -> None:
        """The call's end as the server's side decided it: refused, transferred or hung up."""
        if self.ended:
            return
        if not self.answered:  # never answered: a final error, never a 200 that would connect it
            log.info("sip call %s: refused %d (the server did not take the session)", self.sid, step.refuse or 503)
            self.end(step.refuse or 503)
        elif step.refuse is not None:
            log.info("sip call %s: refused %d (the server did not take the session)", self.sid, step.refuse)
            self.end(step.refuse)
        elif step.transfer:
            log.info("sip call %s: transferred to %s", self.sid, step.transfer)
            try:
                self.xfer(step.transfer, pj.CallOpParam(True))
            except Exception as exc:  # a URI PJSIP refuses: the call must not stay up without its bridge
                log.warning("sip call %s: the transfer failed (%s): hanging up", self.sid, exc)
                self.end(200)
        else:
            self.end(200)

    def end(self, status: int) -> None:
        """Hang up (BYE once answered; before that, this final status)."""
        if not self.ended:
            op = pj.CallOpParam()
            op.statusCode = status
            try:
                self.hangup(op)
            except Exception as exc:  # PJSIP raises its own Error for a call already gone
                log.info("sip call %s: hang-up: %s", self.sid, exc)


class SipAccount(_AccountBase):  # type: ignore[misc]
    """The gateway's one account: where INVITEs arrive and are admitted or refused."""

    def __init__(self, gateway: Gateway) -> None:
        super().__init__()
        self.gateway = gateway

    def onRegState(self, prm: Any) -> None:  # noqa: N802 - PJSIP's name
        # Printed, not only logged: the supervisor reads the gateway's lines (a test waits for it).
        registration = self.gateway.registration
        if registration is not None:
            print(describe(int(prm.code), str(prm.reason), int(prm.expiration), registration.registrar), flush=True)

    def onIncomingCall(self, prm: Any) -> None:  # noqa: N802 - PJSIP's name
        # An exception escaping a PJSIP callback would abort the process: a call we fail on is
        # refused with 500, and the gateway goes on.
        try:
            self._incoming(prm)
        except Exception:
            log.exception("sip: an incoming call failed")
            call = self.gateway.calls.get(prm.callId)
            if call is not None:
                call.end(500)

    def _incoming(self, prm: Any) -> None:
        gateway = self.gateway
        call = SipCall(gateway, self, prm.callId)
        source = prm.rdata.srcAddress
        busy = sum(1 for c in gateway.calls.values() if c.bridge is not None)
        # Held until PJSIP says the call is over, refused ones too: a Python call object freed
        # while PJSIP still reports on its call would take the process down.
        gateway.calls[prm.callId] = call
        if not gateway.allow.admits(source_host(source)):
            log.warning("sip: refused a call from %s (not in server.sip_allow)", source)
            call.end(403)
            return
        if busy >= gateway.max_calls:
            log.warning("sip: refused a call from %s: %d calls already", source, busy)
            call.end(486)
            return
        call.caller = call.getInfo().remoteUri
        call.sip_headers = invite_headers(prm.rdata.wholeMsg)
        op = pj.CallOpParam()
        op.statusCode = 180  # ringing while the server opens the session: answered once it has
        call.answer(op)
        call.start_bridge()


def report(call_id: str, status: str, status_code: int = 0, reason: str = "", **more: Any) -> None:
    """Tell the supervisor how a call this gateway placed goes: one line on stdout."""
    fields = {"id": call_id, "status": status, **({"sip_status": status_code} if status_code else {}), **more}
    if reason:
        fields["reason"] = reason
    print(OUTBOUND + json.dumps(fields), flush=True)


class Gateway:
    """PJSIP's endpoint, account and calls, on the thread that calls :meth:`run`.  Calls to place
    arrive on stdin, one JSON object a line (``{"dial": uri, "id": call_id, "timeout_s": 30}``);
    how each goes is reported on stdout (:func:`report`)."""

    def __init__(
        self,
        host: str,
        port: int,
        server: str,
        allow: AllowList,
        max_calls: int,
        token: str = "",
        registration: tuple[Registration, str] | None = None,
        echo_cancellation: bool = False,
    ) -> None:
        """``registration``: where to REGISTER, and the password (:mod:`.registration`).
        ``echo_cancellation``: each call's :class:`MediaPort` removes the agent's own voice from
        what the caller sends (``phone.echo_cancellation``)."""
        self.host = host
        self.echo_cancellation = echo_cancellation
        self.registration: Registration | None = registration[0] if registration is not None else None
        self._password = registration[1] if registration is not None else ""
        self.port = port
        self.ws_url = server.rstrip("/") + "/twilio" + (f"/{token}" if token else "")
        self.shown_url = server.rstrip("/") + "/twilio"  # the token left out: for lines that are logged
        self.next_url = server.replace("ws://", "http://").replace("wss://", "https://").rstrip("/") + "/twilio/twiml/next"
        if token:
            self.next_url += f"?token={token}"
        self.allow = allow
        self.max_calls = max_calls
        self.calls: dict[int, SipCall] = {}
        self.ids = itertools.count(1)
        self._todo: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self.loop.run_forever, name="sip-loop", daemon=True)
        self.account: Any = None

    def run(self) -> None:
        """Listen and serve calls until :meth:`stop`; then every call gets a BYE (or 503)."""
        lib = _require_pjsua2()
        ep = lib.Endpoint()
        ep.libCreate()
        cfg = lib.EpConfig()
        cfg.uaConfig.threadCnt = 0
        # This build's most (PJSIP caps any more without a word).  Below it, the gateway's own count
        # refuses first and says so; at it, PJSIP answers the next caller 486 itself.
        cfg.uaConfig.maxCalls = SIP_CALLS_LIMIT
        cfg.uaConfig.userAgent = "voiceagent"
        cfg.logConfig.level = 2
        cfg.logConfig.consoleLevel = 2
        cfg.medConfig.clockRate = 16000
        cfg.medConfig.sndClockRate = 16000
        cfg.medConfig.noVad = True
        ep.libInit(cfg)
        ep.audDevManager().setNullDev()  # no sound card: the bridge's clock still runs
        for name in [c.codecId for c in ep.codecEnum2()]:
            ep.codecSetPriority(name, next((p for k, p in CODECS.items() if name.startswith(k)), 0))
        tcfg = lib.TransportConfig()
        tcfg.port = self.port
        tcfg.boundAddress = self.host
        try:
            ep.transportCreate(lib.PJSIP_TRANSPORT_UDP, tcfg)
            ep.transportCreate(lib.PJSIP_TRANSPORT_TCP, tcfg)
        except lib.Error as exc:
            ep.libDestroy()
            raise SystemExit(f"sip gateway: cannot listen on {self.host}:{self.port}: {exc.reason}") from None
        ep.libStart()
        account = SipAccount(self)
        acfg = lib.AccountConfig()
        acfg.idUri = f"sip:agent@{self.host}:{self.port}"
        if self.registration is not None:
            self.registration.configure(lib, acfg, self._password)
        account.create(acfg)
        self.account = account
        self._loop_thread.start()
        threading.Thread(target=self._read_commands, name="sip-commands", daemon=True).start()
        print(f"sip gateway: listening on {self.host}:{self.port} (udp, tcp), calls to {self.shown_url}", flush=True)
        try:
            while not self._stop.is_set():
                ep.libHandleEvents(10)
                self._run_todo()
                self._cancel_unanswered()
        finally:
            self._end_all()
            ep.libHandleEvents(100)
            self.calls.clear()
            self.account = None
            account.shutdown()
            del account  # no Python reference to a PJSIP object may outlive libDestroy()
            self.loop.call_soon_threadsafe(self.loop.stop)
            ep.libDestroy()

    def _end_all(self) -> None:
        # In a function of its own: no loop variable may keep a call alive past libDestroy().
        for call in list(self.calls.values()):
            call.end(503)

    # ------------------------------------------------------------------ calls this gateway places

    def _read_commands(self) -> None:
        """stdin's commands (a thread of its own: reading blocks); its end stops nothing."""
        for line in sys.stdin:
            try:
                cmd = json.loads(line)
                if "hangup" in cmd:
                    hang = str(cmd["hangup"])
                    self.later(lambda c=hang: self._hang_up(c))  # type: ignore[misc]
                    continue
                call_id, uri, timeout_s = str(cmd["id"]), str(cmd["dial"]), float(cmd.get("timeout_s", 30))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("sip: a command that cannot be read was skipped (%s): %.120r", exc, line)
                continue
            self.later(lambda c=call_id, u=uri, t=timeout_s: self._dial(c, u, t))  # type: ignore[misc]

    def _dial(self, call_id: str, uri: str, timeout_s: float) -> None:
        """On PJSIP's thread: call ``uri``; once answered it is bridged as an incoming call is."""
        if sum(1 for c in self.calls.values() if not c.ended) >= self.max_calls:
            report(call_id, "ended", 0, f"{self.max_calls} calls already (server.sip_max_calls)")
            return
        call = SipCall(self, self.account, pj.PJSUA_INVALID_ID)
        call.outbound, call.caller = call_id, uri
        try:
            call.makeCall(uri, pj.CallOpParam(True))
        except pj.Error as exc:  # a URI PJSIP cannot call: nothing was sent
            report(call_id, "ended", 0, f"cannot call {uri}: {exc.reason}")
            return
        call.pj_id = call.getId()
        call.deadline = time.monotonic() + timeout_s
        self.calls[call.pj_id] = call
        log.info("sip call %s: dialling %s for %s", call.sid, uri, call_id)
        report(call_id, "dialing")

    def _hang_up(self, call_id: str) -> None:
        """On PJSIP's thread: end placed call ``call_id`` in whatever state the application's
        hangup finds it: a CANCEL while it rings, a BYE once answered (the answer may have
        crossed the request)."""
        for call in [c for c in self.calls.values() if c.outbound == call_id and not c.ended]:
            call.given_up = not call.answered
            log.info("sip call %s: hung up by the application%s", call.sid, " before an answer" if call.given_up else "")
            call.end(487 if call.given_up else 200)

    def _cancel_unanswered(self) -> None:
        now = time.monotonic()
        for call in [c for c in self.calls.values() if c.deadline is not None and not c.answered and not c.ended]:
            if now >= call.deadline:  # type: ignore[operator]
                call.deadline = None
                call.timed_out = True
                log.info("sip call %s: no answer; cancelled", call.sid)
                call.end(487)

    def _run_todo(self) -> None:
        while True:
            try:
                job = self._todo.get_nowait()
            except queue.Empty:
                return
            try:
                job()
            except Exception:  # a call's failure (a REFER to a bad URI) ends that call's work, not the gateway
                log.exception("sip: a call's step failed")

    def call_do(self, pj_id: int, step: Callable[[SipCall], None]) -> None:
        """On PJSIP's thread: ``step`` on call ``pj_id``, if it is still there."""
        call = self.calls.get(pj_id)
        if call is not None:
            step(call)

    def stop(self) -> None:
        self._stop.set()

    def later(self, job: Callable[[], None]) -> None:
        """Run ``job`` on PJSIP's thread (from any thread)."""
        self._todo.put(job)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="voiceagent's SIP gateway: answers calls and bridges each to a server session")
    ap.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    ap.add_argument("--port", type=int, default=5060)
    ap.add_argument("--server", default="ws://127.0.0.1:8765", help="the voiceagent server (its WebSocket base URL)")
    ap.add_argument("--allow", default="127.0.0.1,::1", help="comma-separated addresses or networks that may call ('*': any)")
    ap.add_argument("--max-calls", type=int, default=SIP_CALLS_LIMIT)
    ap.add_argument("--register", default="", help=f"REGISTER as this account, sip:user@registrar[:port] (password: ${PASSWORD_ENV})")
    ap.add_argument("--auth-user", default="", help="the digest user name, when it is not the account's user")
    ap.add_argument("--echo-cancellation", choices=("on", "off"), default="off", help="remove the agent's own voice from what callers send")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registration: tuple[Registration, str] | None = None
    try:
        entries = args.allow.split(",")
        if args.register:
            reg = parse_register(args.register, args.auth_user)
            password = os.environ.get(PASSWORD_ENV, "")
            if not password:
                raise ValueError(f"{PASSWORD_ENV} is not set: the registrar's password comes in the environment")
            entries += reg.addresses()  # the registrar sends the extension's calls
            registration = (reg, password)
        allow = AllowList(entries)
        if args.echo_cancellation == "on":
            livekit_rtc("sip")  # the canceller's library, asked for before any call needs it
    except (ValueError, MissingDependencyError) as exc:
        print(f"sip gateway: {exc}", flush=True)
        return 2
    # The server's token comes in the environment: a command line is visible to every user (ps).
    token = os.environ.get(TOKEN_ENV, "")
    gateway = Gateway(args.host, args.port, args.server, allow, args.max_calls, token, registration, args.echo_cancellation == "on")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: gateway.stop())
    gateway.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
