"""The SIP gateway against SIPp (Debian's ``sip-tester``), a peer built to misbehave (issue #68):
an INVITE sent twice byte for byte (a retransmission) makes one call; malformed messages, a
caller outside ``server.sip_allow`` and a flood of INVITEs past ``server.sip_max_calls`` get SIP
errors, while a baresip call already in progress goes on talking.  And SIPp as a registrar that
asks for digest credentials: the gateway registers (``server.sip_register``), a wrong password is
refused, and the registrar's calls are taken from outside the allow-list.  The engines are
scripted: what is tested is the SIP side and that the other session is untouched."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.sip_caller import Baresip, gateway_for, until_state
from tests.ports import free_port
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt, tone
from voiceagent.audio import write_wav
from voiceagent.config import Config, ServerConfig
from voiceagent.sip.registration import PASSWORD_ENV
from voiceagent.sip.supervisor import SipGateway
from voiceagent.transports.server import VoiceAgentServer

pytestmark = [
    pytest.mark.skipif(shutil.which("sipp") is None, reason="sip-tester is not installed (scripts/setup.sh installs it)"),
    pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip-core is not installed (scripts/setup.sh installs it)"),
]
pytest.importorskip("pjsua2", reason="the sip extra is not installed (scripts/setup.sh installs it)")

SCENARIOS = Path(__file__).parent / "sipp"


def _sessions_opened(server: VoiceAgentServer) -> int:
    """The server's count of sessions ever opened (``voiceagent_sessions_total``)."""
    text = server.metrics.render(["voiceagent_sessions_total"]).decode()
    match = re.search(r"^voiceagent_sessions_total (\S+)$", text, re.M)
    assert match, text
    return int(float(match.group(1)))


def _read(folder: Path, pattern: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(folder.glob(pattern)))


async def _sipp(folder: Path, *args: str, source: str = "127.0.0.1") -> tuple[int, str, str]:
    """Run SIPp (bound to ``source``, loopback) with ``args`` until its scenario ends: its exit
    status (0: every call succeeded, 1: some failed), its errors and its trace of messages."""
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    errors = folder / "errors.log"
    proc = await asyncio.create_subprocess_exec(
        "sipp",
        *("-i", source, "-mi", source, "-nostdin", "-trace_err", "-trace_msg", "-error_file", str(errors), "-timeout", "60s"),
        *args,
        cwd=folder,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await proc.communicate()
    log = await asyncio.to_thread(_read, folder, errors.name)
    return int(proc.returncode or 0), stderr.decode(errors="replace") + log, await asyncio.to_thread(_read, folder, "*_messages.log")


async def _call(sip_port: int, folder: Path, scenario: str, *args: str, source: str = "127.0.0.1") -> tuple[int, str, str]:
    """SIPp calling the gateway with ``scenario`` (a file of :data:`SCENARIOS`)."""
    return await _sipp(folder, f"127.0.0.1:{sip_port}", "-p", str(free_port()), "-sf", str(SCENARIOS / scenario), *args, source=source)


async def _call_twice(sip_port: int, folder: Path, source: str = "127.0.0.1") -> tuple[int, str, str]:
    """SIPp calling the gateway once with its INVITE sent twice (``invite_twice.xml``).

    SIPp reads the socket between its two sends, so the gateway's 100 Trying can come in before
    the copy is out; SIPp would abort on that "unexpected" message, a race of its own (any caller
    ignores a provisional answer it did not wait for).  So it is told to go on past messages its
    scenario does not expect: the 200 and the BYE's 200 are still required, and a call refused or
    never answered still fails it."""
    return await _call(sip_port, folder, "invite_twice.xml", "-m", "1", "-default_behaviors", "all,-abortunexp", source=source)


def test_an_invite_sent_twice_makes_one_call(run: Any, tmp_path: Path) -> None:
    fakes = FakeEngines()
    sip_port = free_port()

    async def scenario() -> tuple[int, str, list[int]]:
        async with VoiceAgentServer(dataclasses.replace(Config(), server=ServerConfig(port=0)), fakes.engines) as server:
            gateway = gateway_for(server, sip_port)
            await gateway.start()
            try:
                sipp = asyncio.create_task(_call_twice(sip_port, tmp_path / "sipp"))
                await until_state(lambda: bool(server.sessions), 20, "a session for the call")
                counts = [_sessions_opened(server)]
                status, log, _ = await sipp
                counts.append(_sessions_opened(server))
                await until_state(lambda: not server.sessions, 10, "the session ended with the BYE")
                return status, log, counts
            finally:
                await gateway.stop()

    try:
        status, log, counts = run(scenario(), 90)
    finally:
        fakes.close()
    assert status == 0, log[-2000:]
    assert counts == [1, 1], counts


def _responses(trace: str, status: str) -> int:
    """How many INVITEs SIPp's message trace shows answered with ``status`` (first copies only:
    a retransmitted answer is counted once per call)."""
    calls = set()
    for message in re.split(r"^\S+ message received", trace, flags=re.M):
        if re.search(rf"^SIP/2.0 {status} ", message, re.M) and re.search(r"^CSeq: *1 INVITE", message, re.M | re.I):
            call_id = re.search(r"^Call-ID: *(\S+)", message, re.M | re.I)
            calls.add(call_id.group(1) if call_id else message)
    return len(calls)


def _malformed(sip_port: int) -> dict[str, str]:
    """Malformed SIP over UDP, each from a socket of its own: what the gateway answered to each
    (its status line; empty when it answered nothing within 2 s)."""
    via = "Via: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bK-bad-{n}\r\n"
    messages = {
        # Not SIP at all: there is nobody to answer.
        "garbage": b"\x00\xff\x13 not a SIP message at all \r\n\r\n",
        # A request missing From, To, Call-ID and CSeq.
        "headers missing": "INVITE sip:agent@127.0.0.1 SIP/2.0\r\n{via}Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
        # A CSeq that is no number.
        "bad CSeq": (
            "INVITE sip:agent@127.0.0.1 SIP/2.0\r\n{via}From: <sip:x@127.0.0.1>;tag=1\r\nTo: <sip:agent@127.0.0.1>\r\n"
            "Call-ID: bad-cseq\r\nCSeq: one INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        ),
        # An INVITE that has run out of hops.
        "no hops left": (
            "INVITE sip:agent@127.0.0.1 SIP/2.0\r\n{via}From: <sip:x@127.0.0.1>;tag=4\r\nTo: <sip:agent@127.0.0.1>\r\n"
            "Call-ID: hops\r\nCSeq: 1 INVITE\r\nMax-Forwards: 0\r\nContent-Length: 0\r\n\r\n"
        ),
        # An INVITE that requires an extension the gateway does not have.
        "unknown extension": (
            "INVITE sip:agent@127.0.0.1 SIP/2.0\r\n{via}From: <sip:x@127.0.0.1>;tag=5\r\nTo: <sip:agent@127.0.0.1>\r\n"
            "Call-ID: require\r\nCSeq: 1 INVITE\r\nRequire: frobnication\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        ),
        # A body shorter than its Content-Length says.
        "short body": (
            "INVITE sip:agent@127.0.0.1 SIP/2.0\r\n{via}From: <sip:x@127.0.0.1>;tag=2\r\nTo: <sip:agent@127.0.0.1>\r\n"
            "Call-ID: short-body\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Type: application/sdp\r\n"
            "Content-Length: 900\r\n\r\nv=0\r\n"
        ),
    }
    answers: dict[str, str] = {}
    for n, (name, message) in enumerate(messages.items()):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            data = message if isinstance(message, bytes) else message.format(via=via.format(port=port, n=n)).encode()
            sock.settimeout(2.0)
            sock.sendto(data, ("127.0.0.1", sip_port))
            try:
                answers[name] = sock.recv(65535).decode(errors="replace").split("\r\n", 1)[0]
            except TimeoutError:
                answers[name] = ""
    return answers


def test_malformed_sip_an_unallowed_source_and_a_flood_get_sip_errors_while_a_call_goes_on(run: Any, tmp_path: Path) -> None:
    fakes = FakeEngines(stt=FakeStt(default="are you still there"), llm=FakeLlm(default=("I am still here and talking to you.",)))
    # The caller in progress speaks (a tone: speech for the scripted VAD) once the hostile traffic
    # has begun, and is answered.
    said = tmp_path / "said.wav"
    write_wav(said, np.concatenate([np.zeros(4 * 8000, dtype=np.int16), tone(800, rate=8000)]), 8000)
    sip_port = free_port()

    async def scenario() -> dict[str, Any]:
        config = dataclasses.replace(Config(), server=ServerConfig(port=0))
        async with VoiceAgentServer(config, fakes.engines) as server:
            gateway = gateway_for(server, sip_port, allow="127.0.0.1", max_calls=3)
            await gateway.start()
            pid = gateway.pid
            caller = Baresip(tmp_path / "caller", said, "PCMU")
            try:
                caller.dial(f"sip:agent@127.0.0.1:{sip_port}")
                await until_state(lambda: "Call established" in caller.output(), 20, "the call in progress answered", caller.output)
                [session] = server.sessions
                malformed = await asyncio.to_thread(_malformed, sip_port)
                # 127.0.0.2 is loopback too, but not in the allow-list.
                refused = await _call(sip_port, tmp_path / "refused", "refused.xml", "-m", "1", source="127.0.0.2")
                flood = await _call(sip_port, tmp_path / "flood", "flood.xml", "-m", "40", "-r", "20", "-l", "40")
                # The call in progress is answered: its caller hears the agent's voice.
                heard = caller.heard
                await until_state(lambda: bool(np.abs(heard()).max(initial=0) > 500), 30, "the agent heard on the call", caller.output)
                return {
                    "malformed": malformed,
                    "refused": refused,
                    "flood": flood,
                    "busy": _responses(flood[2], "486"),
                    "answered": _responses(flood[2], "200"),
                    "same_session": session in server.sessions,
                    "call_ended": caller.call_ended(),
                    "same_gateway": gateway.pid == pid,
                }
            finally:
                caller.close()
                await gateway.stop()

    try:
        r = run(scenario(), 120)
    finally:
        fakes.close()
    answers = r["malformed"]
    # PJSIP drops what it cannot parse or answer (no Call-ID or CSeq to copy into a response), and
    # answers the rest with a 400.
    assert answers["garbage"] == answers["headers missing"] == answers["bad CSeq"] == "", answers
    assert all(answers[k].startswith("SIP/2.0 4") for k in ("no hops left", "unknown extension", "short body")), answers
    assert r["refused"][0] == 0, r["refused"][1][-2000:]  # 403, acknowledged
    # Every INVITE of the flood got a final answer (none timed out): some answered, the rest busy.
    assert r["flood"][0] == 0, r["flood"][1][-2000:]
    assert r["busy"] > 0 and r["answered"] > 0, r
    # The call in progress went on: same session, not hung up, the same gateway process.
    assert r["same_session"] and not r["call_ended"] and r["same_gateway"], r


@pytest.mark.parametrize("password", ["s3cret-pw", "wrong"])
def test_the_gateway_registers_with_digest_credentials_and_takes_the_registrars_calls(
    password: str, run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The registrar (SIPp) is at 127.0.0.3, outside the allow-list: its calls are admitted only
    # because the gateway registered there.
    monkeypatch.setenv(PASSWORD_ENV, password)
    fakes = FakeEngines()
    sip_port, registrar_port = free_port(), free_port()

    async def scenario() -> dict[str, Any]:
        async with VoiceAgentServer(dataclasses.replace(Config(), server=ServerConfig(port=0)), fakes.engines) as server:
            serve = ("-sf", str(SCENARIOS / "registrar.xml"), "-p", str(registrar_port), "-m", "1")
            registrar = asyncio.create_task(_sipp(tmp_path / "registrar", *serve, source="127.0.0.3"))
            url = f"ws://127.0.0.1:{server.port}"
            gateway = SipGateway("127.0.0.1", sip_port, url, "127.0.0.1", 4, register=f"sip:1001@127.0.0.3:{registrar_port}")
            try:
                await gateway.start()
                await until_state(lambda: bool(gateway.registered), 20, "the registration's outcome")
                status, log, trace = await registrar
                out: dict[str, Any] = {"registered": gateway.registered, "registrar": (status, log), "trace": trace}
                if gateway.registered.startswith("sip gateway: registered"):
                    out["call"] = await _call_twice(sip_port, tmp_path / "call", source="127.0.0.3")
                    out["sessions"] = _sessions_opened(server)
                return out
            finally:
                await gateway.stop()
                registrar.cancel()

    try:
        r = run(scenario(), 90)
    finally:
        fakes.close()
    assert r["trace"].count("REGISTER sip:127.0.0.3") >= 2, r["trace"][-2000:]  # challenged, then with credentials
    assert 'Authorization: Digest username="1001"' in r["trace"], r["trace"][-2000:]
    assert password not in r["trace"]  # digest: the password itself never travels
    if password == "wrong":
        assert "registration at sip:127.0.0.3" in r["registered"] and "403 Forbidden" in r["registered"], r["registered"]
        return
    assert r["registered"].startswith(f"sip gateway: registered at sip:127.0.0.3:{registrar_port} (200 OK"), r["registered"]
    assert r["registrar"][0] == 0, r["registrar"][1][-2000:]
    status, log, _ = r["call"]
    assert status == 0 and r["sessions"] == 1, (r["sessions"], log[-2000:])
