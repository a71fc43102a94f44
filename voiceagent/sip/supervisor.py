"""``voiceagent serve``'s side of the SIP gateway: start it as a child process, restart it when it
dies, stop it at shutdown.

The gateway is a process of its own so that a fault in PJSIP's native code ends its calls only,
never the server's WebSocket and WebRTC sessions (docs/decisions/sip-stack.md).  A gateway that
exits by itself is started again after a pause that doubles up to 30 s; each restart is logged
and counted (``restarts``).  A gateway that cannot start at all (the extra not installed, the port
taken) stops ``serve`` at start-up with its one line, as any other bad setting does.

Cancellation: cancelling :meth:`SipGateway.start` kills the child; :meth:`SipGateway.stop` is
idempotent and always reaps it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any

from voiceagent.errors import VoiceAgentError
from voiceagent.sip.registration import PASSWORD_ENV
from voiceagent.transports.phone_calls import PhoneCalls

__all__ = ["TOKEN_ENV", "SipGateway", "SipGatewayError", "check_port", "check_registration"]

log = logging.getLogger(__name__)

READY = "sip gateway: listening on"
OUTBOUND = "sip gateway: outbound "
"""The gateway's lines about the calls it places: this prefix, then a JSON object (``id``,
``status``: dialing, ringing, answered or ended, and ``sip_status`` and ``reason`` at the end)."""
REGISTRATION = ("sip gateway: registered", "sip gateway: unregistered", "sip gateway: registration")
START_S = 30.0
TOKEN_ENV = "VOICEAGENT_SIP_GATEWAY_TOKEN"
"""The server's client token reaches the child here, not on its command line (which ``ps`` shows
to every user of the machine)."""


def check_registration(register: str, env: Mapping[str, str]) -> None:
    """Raise :class:`SipGatewayError` when ``server.sip_register`` is set and its password is not
    in ``env`` (asked before the models load, as :func:`check_port` is)."""
    if register and not env.get(PASSWORD_ENV):
        raise SipGatewayError(f"server.sip_register needs its password in the environment: {PASSWORD_ENV} is not set")


def check_port(host: str, port: int) -> None:
    """Raise :class:`SipGatewayError` with the gateway's own line when ``host:port`` cannot be
    bound over UDP and TCP now.  ``serve`` asks before it loads its models, so a port that is
    taken costs the user one second rather than a model load; the gateway's own bind stays the
    authority (the port may be taken in between)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(family, kind) as probe:
            if kind == socket.SOCK_STREAM:  # as PJSIP binds: a listener lingering in TIME_WAIT is no owner
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host.strip("[]"), port))
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise SipGatewayError(f"the SIP gateway did not start: sip gateway: cannot listen on {host}:{port}: {reason}") from None


class SipGatewayError(VoiceAgentError):
    """The gateway could not start; the message is its own last line."""


class SipGateway:
    """The child process: ``python -m voiceagent.sip.gateway`` with these arguments."""

    def __init__(
        self,
        host: str,
        port: int,
        server_url: str,
        allow: str,
        max_calls: int,
        token: str = "",
        register: str = "",
        auth_user: str = "",
        echo_cancellation: bool = False,
    ) -> None:
        """``register``, ``auth_user``: ``server.sip_register`` and ``sip_auth_user`` (its password
        is the child's from this process's environment: :mod:`.registration`).
        ``echo_cancellation``: ``phone.echo_cancellation``."""
        self.args = [
            "-m",
            "voiceagent.sip.gateway",
            "--host",
            host,
            "--port",
            str(port),
            "--server",
            server_url,
            "--allow",
            allow,
            "--max-calls",
            str(max_calls),
            *(["--register", register, "--auth-user", auth_user] if register else []),
            "--echo-cancellation",
            "on" if echo_cancellation else "off",
        ]
        self.registered = ""
        """The gateway's last line about its registration ("" until one: :mod:`.registration`)."""
        self._token = token
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False
        self.ready_line = ""
        self.listening = False
        """The current child has said it listens (false from its exit until the next one has)."""
        self.on_report: Callable[[dict[str, Any]], None] = lambda fields: None
        """Told each line the gateway reports about a call it places (:data:`OUTBOUND`'s JSON)."""
        self._placing: set[str] = set()  # calls placed and not yet ended

    async def start(self) -> None:
        """Start the gateway and wait for it to listen; raises :class:`SipGatewayError` with its
        last line when it exits first or says nothing within 30 s."""
        await self._spawn()
        self._watch = asyncio.create_task(self._supervise(), name="sip-gateway")

    async def _spawn(self) -> None:
        env = {**os.environ, TOKEN_ENV: self._token}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        self._proc = proc
        assert proc.stdout is not None
        last = ""
        try:
            async with asyncio.timeout(START_S):
                while raw := await proc.stdout.readline():  # b"" only at its end: a blank line is not one
                    line = raw.decode(errors="replace").rstrip()
                    if line.startswith(READY):
                        self.ready_line = line
                        self.listening = True
                        log.info(line)
                        return
                    last = line
        except TimeoutError:
            last = last or f"no answer within {START_S:.0f} s"
        except BaseException:
            await self._kill(proc)
            raise
        await self._kill(proc)
        raise SipGatewayError(f"the SIP gateway did not start: {last or 'it exited'}")

    async def _supervise(self) -> None:
        pause = 1.0
        while True:
            proc = self._proc
            assert proc is not None and proc.stdout is not None
            async for raw in proc.stdout:  # its log, into ours
                line = raw.decode(errors="replace").rstrip()
                log.info("%s", line)
                if line.startswith(OUTBOUND):
                    self._reported(line)
                elif line.startswith(REGISTRATION):
                    self.registered = line
            code = await proc.wait()
            self.listening = False
            for call_id in list(self._placing):  # the calls it was placing ended with it
                self._reported(OUTBOUND + json.dumps({"id": call_id, "status": "ended", "reason": "the SIP gateway exited"}))
            if self._stopping:
                return
            self.restarts += 1
            log.error("the SIP gateway exited (%s); its calls ended; starting it again in %.0f s", code, pause)
            await asyncio.sleep(pause)
            pause = min(30.0, pause * 2)
            try:
                await self._spawn()
            except (SipGatewayError, OSError) as exc:  # tried again after the next pause
                log.error("%s", exc)

    def place_calls_for(self, calls: PhoneCalls) -> None:
        """Make this gateway the one ``calls`` places its calls through (``POST /v1/sip/calls``)."""
        calls.dialer = self
        self.on_report = calls.report

    async def dial(self, call_id: str, uri: str, timeout_s: float) -> None:
        """Ask the gateway to call ``uri`` as ``call_id`` (its progress comes to :attr:`on_report`);
        :class:`SipGatewayError` while no gateway runs."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None or not self.listening:
            raise SipGatewayError("the SIP gateway is not running")
        self._placing.add(call_id)
        proc.stdin.write((json.dumps({"dial": uri, "id": call_id, "timeout_s": timeout_s}) + "\n").encode())
        await proc.stdin.drain()

    async def hang_up(self, call_id: str) -> None:
        """Ask the gateway to give up placed call ``call_id`` before it is answered (a CANCEL);
        :class:`SipGatewayError` while no gateway runs."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise SipGatewayError("the SIP gateway is not running")
        proc.stdin.write((json.dumps({"hangup": call_id}) + "\n").encode())
        await proc.stdin.drain()

    def _reported(self, line: str) -> None:
        try:
            fields = json.loads(line[len(OUTBOUND) :])
        except ValueError:
            log.warning("an unreadable line from the SIP gateway: %.120r", line)
            return
        if fields.get("status") == "ended":
            self._placing.discard(str(fields.get("id")))
        self.on_report(fields)

    @property
    def pid(self) -> int | None:
        """The running child's process id."""
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def stop(self) -> None:
        """End the gateway (its calls get a BYE) and wait for it."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)  # a cancellation of stop() itself still propagates
            self._watch = None
        if self._proc is not None:
            await self._kill(self._proc, gently=True)
            self._proc = None

    @staticmethod
    async def _kill(proc: asyncio.subprocess.Process, gently: bool = False) -> None:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM if gently else signal.SIGKILL)
            try:
                async with asyncio.timeout(5.0):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
