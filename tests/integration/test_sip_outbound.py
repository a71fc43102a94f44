"""Calls the server places over SIP (#68 item 2), to real phones (baresip): ``POST /v1/sip/calls``
dials; an answered call runs the same session as an incoming one (configured as placed, heard
both ways, attachable and hung up by ``call_id``); a busy phone, one that never answers, one the
application hangs up while it rings and an address where nobody listens end the call with their reason; ``voiceagent call`` follows a call
to its end and says how it went.  The engines are scripted: what is tested is the call."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.sip_caller import Baresip, gateway_for, until_state
from tests.integration.sip_caller import placed_record as _record
from tests.integration.sip_caller import sip_api as _http
from tests.ports import free_port
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt
from voiceagent.config import Config, ServerConfig
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip-core is not installed (scripts/setup.sh installs it)")
pytest.importorskip("pjsua2", reason="the sip extra is not installed (scripts/setup.sh installs it)")


async def _placed(server: VoiceAgentServer, body: dict[str, Any]) -> str:
    status, record = await asyncio.to_thread(_http, server, "/v1/sip/calls", body)
    assert status == 201 and record["status"] == "dialing", record
    return str(record["id"])


def test_a_placed_call_answered_runs_a_session_and_busy_unanswered_and_unreachable_ones_end_with_their_reason(
    speech: dict[str, Path], run: Any, tmp_path: Path
) -> None:
    fakes = FakeEngines(stt=FakeStt(default="hello who is this"), llm=FakeLlm([], default=("This is the Acme reminder line.",)))
    config = dataclasses.replace(Config(), server=ServerConfig(port=0))
    sip_port = free_port()
    phones: list[Baresip] = []

    def phone(name: str, answer: str, speaks: bool = False) -> Baresip:
        p = Baresip(tmp_path / name, speech["capital"], "PCMU", silent=not speaks, user=name, answer=answer)
        phones.append(p)
        return p

    async def scenario() -> None:
        async with VoiceAgentServer(config, fakes.engines) as server:
            gateway = gateway_for(server, sip_port)
            await gateway.start()
            try:
                # Answered at once; the callee speaks, and the agent answers as it would an incoming call.
                bob = phone("bob", "auto", speaks=True)
                call_id = await _placed(
                    server,
                    {"to": f"sip:bob@127.0.0.1:{bob.sip_port}", "session": {"type": "realtime", "instructions": "Remind Bob."}},
                )
                await until_state(lambda: _record(server, call_id)["status"] == "answered", 20, "bob's answer", bob.output)
                await until_state(lambda: server.phone_calls.get(call_id) is not None, 20, "the call's session", bob.output)
                call = server.phone_calls.get(call_id)
                assert call is not None and call.session.settings.instructions == "Remind Bob."
                await until_state(lambda: np.abs(bob.heard()).max(initial=0) > 1000, 30, "the agent heard by bob", bob.output)
                status, _ = await asyncio.to_thread(_http, server, f"/v1/realtime/calls/{call_id}/hangup", {})
                assert status == 200
                await until_state(bob.call_ended, 20, "bob's call hung up", bob.output)
                await until_state(lambda: _record(server, call_id)["status"] == "ended", 20, "the record ended", bob.output)

                # Busy: the phone turns the call down (baresip's hangup of a ringing call: 486).
                carol = phone("carol", "manual")
                call_id = await _placed(server, {"to": f"sip:carol@127.0.0.1:{carol.sip_port}"})
                await until_state(lambda: "Incoming call" in carol.output(), 20, "carol's phone ringing", carol.output)
                assert _record(server, call_id)["status"] in ("dialing", "ringing")
                carol.hangup()
                await until_state(lambda: _record(server, call_id)["status"] == "ended", 20, "carol's refusal", carol.output)
                assert _record(server, call_id)["sip_status"] == 486, _record(server, call_id)

                # Hung up by the application while it rings: cancelled, the phone stops ringing.
                erin = phone("erin", "manual")
                call_id = await _placed(server, {"to": f"sip:erin@127.0.0.1:{erin.sip_port}", "timeout_s": 60})
                await until_state(lambda: "Incoming call" in erin.output(), 20, "erin's phone ringing", erin.output)
                status, _ = await asyncio.to_thread(_http, server, f"/v1/realtime/calls/{call_id}/hangup", {})
                assert status == 200
                await until_state(lambda: _record(server, call_id)["status"] == "ended", 20, "erin's call given up", erin.output)
                assert _record(server, call_id)["reason"] == "hung up before an answer", _record(server, call_id)
                await until_state(erin.call_ended, 20, "erin's phone no longer ringing", erin.output)
                assert server.phone_calls.get(call_id) is None  # never answered: no session was opened
                status, _ = await asyncio.to_thread(_http, server, f"/v1/realtime/calls/{call_id}/hangup", {})
                assert status == 404  # ended
                # Nobody answers within the call's timeout: cancelled, "no answer".
                dave = phone("dave", "manual")
                call_id = await _placed(server, {"to": f"sip:dave@127.0.0.1:{dave.sip_port}", "timeout_s": 2})
                await until_state(lambda: _record(server, call_id)["status"] == "ended", 20, "dave's unanswered call", dave.output)
                assert _record(server, call_id)["reason"] == "no answer" and "Incoming call" in dave.output()

                # Bad requests are refused before anything is dialled.
                status, error = await asyncio.to_thread(_http, server, "/v1/sip/calls", {"to": "mailto:x@y"})
                assert status == 400 and error["error"]["param"] == "to"
                status, error = await asyncio.to_thread(_http, server, "/v1/sip/calls", {"to": "sip:x@y", "session": {"no_such": 1}})
                assert status == 400, error
                body = {"to": "sip:x@y", "machine_detection": {"on_machine": "voicemail"}}
                status, error = await asyncio.to_thread(_http, server, "/v1/sip/calls", body)
                assert status == 400 and error["error"]["param"] == "machine_detection" and "needs the message" in error["error"]["message"]
                await until_state(lambda: not server.sessions, 20, "every call's session closed")
            finally:
                for p in phones:
                    p.close()
                await gateway.stop()

    run(scenario(), 180)


def test_voiceagent_call_follows_a_call_to_its_end_and_says_why_it_was_not_answered(
    speech: dict[str, Path], run: Any, tmp_path: Path
) -> None:
    fakes = FakeEngines(stt=FakeStt(default="hello"), llm=FakeLlm([], default=("Hello.",)))
    config = dataclasses.replace(Config(), server=ServerConfig(port=0))
    sip_port = free_port()
    nobody = free_port()  # a UDP port where nothing listens: the INVITE goes unanswered

    cmd = [sys.executable, "-m", "voiceagent.cli", "call", f"sip:nobody@127.0.0.1:{nobody}", "--timeout", "3"]

    async def scenario() -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        async with VoiceAgentServer(config, fakes.engines) as server:
            at = ["--server", f"http://127.0.0.1:{server.port}"]
            off = await asyncio.to_thread(subprocess.run, [*cmd, *at], capture_output=True, text=True, timeout=60)
            gateway = gateway_for(server, sip_port)
            await gateway.start()
            try:
                return off, await asyncio.to_thread(subprocess.run, [*cmd, *at], capture_output=True, text=True, timeout=60)
            finally:
                await gateway.stop()

    off, proc = run(scenario(), 120)
    assert off.returncode == 2 and "server.sip_port" in off.stderr.strip().splitlines()[-1], off.stderr  # no gateway: one line
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].endswith(f"dialing sip:nobody@127.0.0.1:{nobody}") and lines[-1].split(": ", 1)[1].startswith("ended ("), lines
