"""The agent's call control on a SIP call, with real phones: ``transfer_call`` sends baresip a
REFER once the announcement has played, and baresip places the new call to the named target (a
second baresip); ``end_call`` ends the call with a BYE after the goodbye.  The engines are
scripted (the tool call is the model's choice; what is tested is the call).  The agent's
``send_dtmf`` reaches baresip as RFC 4733 telephone events.  And a caller past
``server.sip_max_calls`` is told busy (486) while the first call goes on."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.sip_caller import Baresip, gateway_for, until_state
from tests.ports import free_port
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt, tone
from voiceagent.audio import write_wav
from voiceagent.config import Config, PhoneConfig, ServerConfig
from voiceagent.tools.spec import ToolCall
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip-core is not installed (scripts/setup.sh installs it)")
pytest.importorskip("pjsua2", reason="the sip extra is not installed (scripts/setup.sh installs it)")


def test_the_agents_transfer_sends_a_refer_and_the_caller_calls_the_target(speech: dict[str, Path], run: Any, tmp_path: Path) -> None:
    fakes = FakeEngines(
        stt=FakeStt(default="can I talk to sales"),
        llm=FakeLlm([[ToolCall("c1", "transfer_call", '{"target": "sales"}')], ["I am putting you through to sales."]], default=("Yes.",)),
    )
    # One segment of "speech" for the scripted VAD (a spoken sentence's pauses would make several
    # turns, each taking a scripted reply).
    said = tmp_path / "said.wav"
    write_wav(said, np.concatenate([np.zeros(3 * 8000, dtype=np.int16), tone(800, rate=8000)]), 8000)  # well into the call
    sip_port = free_port()

    async def scenario() -> str:
        sales = Baresip(tmp_path / "sales", speech["capital"], "PCMU", silent=True, user="sales")
        target = f"sip:sales@127.0.0.1:{sales.sip_port}"
        config = dataclasses.replace(
            Config(), server=ServerConfig(port=0), phone=PhoneConfig(tools=True, transfer_targets=f"sales={target}")
        )
        try:
            async with VoiceAgentServer(config, fakes.engines) as server:
                gateway = gateway_for(server, sip_port)
                await gateway.start()
                caller = Baresip(tmp_path / "caller", said, "PCMU")
                try:
                    caller.dial(f"sip:agent@127.0.0.1:{sip_port}")
                    await until_state(
                        lambda: "Incoming call" in sales.output(),
                        30,
                        "the transferred call at the target",
                        lambda: (
                            str(
                                [
                                    (type(i).__name__, getattr(i, "text", ""), getattr(i, "status", ""))
                                    for s in server.sessions
                                    for i in s.history.items
                                ]
                            )
                            + caller.output()[-600:]
                        ),
                    )
                    return caller.output()
                finally:
                    caller.close()
                    await gateway.stop()
        finally:
            sales.close()

    try:
        output = run(scenario(), 90)
    finally:
        fakes.close()
    assert "transfer" in output.lower(), output


def _call_the_agent(heard: str, llm: FakeLlm, tmp_path: Path, run: Any, done: Callable[[Baresip], bool], what: str) -> tuple[str, int]:
    """A baresip call to a server with the phone tools whose scripted transcriber hears ``heard``
    (a tone a few seconds into the call) and whose scripted model answers as ``llm`` says: the
    caller's output once ``done(caller)``, and the sessions left then."""
    fakes = FakeEngines(stt=FakeStt(default=heard), llm=llm)
    said = tmp_path / "said.wav"
    write_wav(said, np.concatenate([np.zeros(3 * 8000, dtype=np.int16), tone(800, rate=8000)]), 8000)
    sip_port = free_port()

    async def scenario() -> tuple[str, int]:
        config = dataclasses.replace(Config(), server=ServerConfig(port=0), phone=PhoneConfig(tools=True))
        async with VoiceAgentServer(config, fakes.engines) as server:
            gateway = gateway_for(server, sip_port)
            await gateway.start()
            caller = Baresip(tmp_path / "caller", said, "PCMU")
            try:
                caller.dial(f"sip:agent@127.0.0.1:{sip_port}")
                await until_state(lambda: done(caller), 30, what, caller.output)
                return caller.output(), len(server.sessions)
            finally:
                caller.close()
                await gateway.stop()

    try:
        return run(scenario(), 90)
    finally:
        fakes.close()


def test_the_agents_end_call_hangs_up_with_a_bye_after_the_goodbye(run: Any, tmp_path: Path) -> None:
    llm = FakeLlm([[ToolCall("c1", "end_call", "{}")], ["Goodbye, and thank you for calling."]], default=("Yes.",))
    output, sessions = _call_the_agent("thank you, goodbye", llm, tmp_path, run, Baresip.call_ended, "the agent's hang-up at the caller")
    assert "Call with sip:agent@" in output and sessions == 0, output[-2000:]


def test_a_call_past_sip_max_calls_is_busy_and_the_first_goes_on(speech: dict[str, Path], run: Any, tmp_path: Path) -> None:
    fakes = FakeEngines()
    sip_port = free_port()

    async def scenario() -> tuple[str, int]:
        async with VoiceAgentServer(dataclasses.replace(Config(), server=ServerConfig(port=0)), fakes.engines) as server:
            gateway = gateway_for(server, sip_port, max_calls=1)
            await gateway.start()
            first = Baresip(tmp_path / "first", speech["capital"], "PCMU", silent=True)
            second = Baresip(tmp_path / "second", speech["capital"], "PCMU", silent=True, user="second")
            try:
                first.dial(f"sip:agent@127.0.0.1:{sip_port}")
                await until_state(lambda: "Call established" in first.output(), 20, "the first call answered", first.output)
                second.dial(f"sip:agent@127.0.0.1:{sip_port}")
                await until_state(lambda: "486" in second.output(), 20, "the second caller told busy", second.output)
                return second.output(), len(server.sessions)
            finally:
                first.close()
                second.close()
                await gateway.stop()

    try:
        output, sessions = run(scenario(), 60)
    finally:
        fakes.close()
    assert "486 Busy Here" in output and sessions == 1, output[-1500:]


def test_the_agents_keys_reach_the_caller_as_rfc_4733_events(run: Any, tmp_path: Path) -> None:
    llm = FakeLlm([[ToolCall("c1", "send_dtmf", '{"digits": "42#"}')], ["I pressed them."]], default=("Yes.",))
    output, _ = _call_the_agent(
        "press four two and hash", llm, tmp_path, run, lambda caller: "received event: '#'" in caller.output(), "the last key at the caller"
    )
    # baresip reports telephone-events it receives over RTP (keypad tones in the audio it would not).
    keys = re.findall(r"received event: '(.)' \(end=0\)", output)
    assert keys == ["4", "2", "#"], output[-3000:]
