"""SIP calls on GPT-Live's terms, driven by an application that uses only the ``openai`` package
(base URL pointed here), with a real phone (baresip): the signed ``live.transport.incoming``
webhook verified by ``client.webhooks.unwrap``; ``client.live.sessions.accept`` with the
application's own instructions (a bad session refused, the call still ringing); a sideband
attached by ``client.live.sideband.connect(session_id=…)`` that sees the session start, the
caller's key (``transport.dtmf.received``), the caller's turn and the agent's answer, presses a
key on the call (``transport.dtmf.send``: baresip receives it over RTP) and appends
instructions; ``client.live.sessions.hangup`` ending the call (``session.closed`` on the
sideband); a second call rejected busy; a third whose caller hangs up (``remote_hangup``).  Every sideband event validates against
``openai.types.live`` and parses in the SDK.  The engines are scripted: what is tested is the call
and the protocol, not the model's words."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from openai import AsyncOpenAI

from tests.integration.live_client import Live, answered_after
from tests.integration.sip_caller import Baresip, gateway_for, until_state
from tests.integration.webhook_app import SECRET, Application, serving
from tests.ports import free_port
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt, tone
from voiceagent.audio import write_wav
from voiceagent.config import Config, ServerConfig
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip-core is not installed (scripts/setup.sh installs it)")
pytest.importorskip("pjsua2", reason="the sip extra is not installed (scripts/setup.sh installs it)")

INSTRUCTIONS = "You answer the phone for the Acme front desk."


@pytest.fixture
def app() -> Iterator[Application]:
    yield from serving()


def test_an_openai_live_application_accepts_a_call_watches_it_presses_a_key_and_hangs_up(
    speech: dict[str, Path], app: Application, run: Any, tmp_path: Path
) -> None:
    fakes = FakeEngines(stt=FakeStt(default="hello"), llm=FakeLlm([], default=("Thank you for calling.",)))
    config = dataclasses.replace(Config(), server=ServerConfig(port=0, sip_webhook_url=app.url, sip_webhook_secret=SECRET))
    # One segment of "speech" for the scripted VAD, well after the answer: the sideband attaches first.
    said = tmp_path / "said.wav"
    write_wav(said, np.concatenate([np.zeros(6 * 8000, dtype=np.int16), tone(800, rate=8000)]), 8000)
    sip_port = free_port()
    phones: list[Baresip] = []

    def phone(name: str, wav: Path) -> Baresip:
        p = Baresip(tmp_path / name, wav, "PCMU", silent=wav != said, user=name)
        phones.append(p)
        return p

    async def scenario() -> dict[str, Any]:
        async with VoiceAgentServer(config, fakes.engines) as server:
            gateway = gateway_for(server, sip_port)
            await gateway.start()
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0)
            try:
                caller = phone("caller", said)
                caller.dial(f"sip:agent@127.0.0.1:{sip_port}")
                incoming = await app.next_call("live.transport.incoming")
                session_id = incoming.data.session_id
                assert incoming.data.type == "sip" and session_id.startswith("live_"), incoming
                froms = [h.value for h in incoming.data.sip_headers if h.name == "From"]
                assert froms and "sip:caller@127.0.0.1" in froms[0], incoming.data.sip_headers
                with pytest.raises(openai.BadRequestError):  # GPT-Live requires the model: refused, still ringing
                    await client.live.sessions.accept(session_id, session={"type": "live"})  # type: ignore[typeddict-item]
                assert "Call established" not in caller.output()
                await client.live.sessions.accept(session_id, session={"type": "live", "model": "gpt-live-1", "instructions": INSTRUCTIONS})
                await until_state(lambda: "Call established" in caller.output(), 20, "the accepted call answered", caller.output)
                call = server.phone_calls.get_live(session_id)
                assert call is not None and call.surface == "live"
                assert call.session.settings.instructions == INSTRUCTIONS
                with pytest.raises(openai.ConflictError):  # the first accept chose GPT-Live
                    await client.realtime.calls.accept(call.call_id, type="realtime")

                async with client.live.sideband.connect(session_id=session_id) as conn:
                    sideband = Live(conn)
                    pump = asyncio.create_task(sideband.pump())
                    try:
                        await sideband.wait(lambda ev: bool(ev) and ev[0]["type"] == "session.started", 20, "the session's start")
                        caller.command("sndcode", "7")  # RFC 4733, as a phone's keypad sends it
                        await sideband.wait(lambda _: bool(sideband.of("transport.dtmf.received")), 20, "the caller's key")
                        await conn.transport.dtmf.send(event="4", event_id="key_1")
                        await sideband.wait(lambda _: bool(sideband.of("transport.dtmf.sent")), 20, "the key sent")
                        await until_state(lambda: "received event: '4'" in caller.output(), 20, "the key at the caller", caller.output)
                        await conn.session.instructions.append(content="Offer the caller a callback.", delegation_id=None)
                        await sideband.wait(lambda _: bool(sideband.of("session.instructions.appended")), 20, "the append")
                        await sideband.wait(answered_after("hello"), 40, "the caller's turn, and an answer after it")
                        await client.live.sessions.hangup(session_id)
                        await sideband.wait(lambda _: bool(sideband.of("session.closed")), 20, "the session closed")
                    finally:
                        pump.cancel()
                        await asyncio.gather(pump, return_exceptions=True)
                await until_state(caller.call_ended, 20, "the call hung up", caller.output)
                await until_state(lambda: server.phone_calls.get_live(session_id) is None, 20, "the call gone")
                with pytest.raises(openai.NotFoundError):
                    await client.live.sessions.hangup(session_id)

                # A second call, rejected busy on GPT-Live's terms.
                second = phone("second", speech["capital"])
                second.dial(f"sip:agent@127.0.0.1:{sip_port}")
                await client.live.sessions.reject((await app.next_call("live.transport.incoming")).data.session_id, status_code=486)
                await until_state(lambda: "486" in second.output(), 20, "the second call refused busy", second.output)

                # A third, accepted, whose caller hangs up: its sideband is told so.
                third = phone("third", speech["capital"])
                third.dial(f"sip:agent@127.0.0.1:{sip_port}")
                third_id = (await app.next_call("live.transport.incoming")).data.session_id
                await client.live.sessions.accept(third_id, session={"type": "live", "model": "gpt-live-1"})
                await until_state(lambda: "Call established" in third.output(), 20, "the third call answered", third.output)
                async with client.live.sideband.connect(session_id=third_id) as conn:
                    watcher = Live(conn)
                    pump = asyncio.create_task(watcher.pump())
                    try:
                        await watcher.wait(lambda ev: bool(ev) and ev[0]["type"] == "session.started", 20, "the third call's start")
                        third.hangup()
                        await watcher.wait(lambda _: bool(watcher.of("session.closed")), 20, "the third call closed")
                    finally:
                        pump.cancel()
                        await asyncio.gather(pump, return_exceptions=True)
                await until_state(lambda: not server.sessions, 20, "every call's session closed")
                return {
                    "sideband": sideband,
                    "watcher": watcher,
                    "caller": caller.output(),
                    "instructions": call.session.settings.instructions,
                    "history": [str(getattr(item, "text", "")) for item in call.session.history.items],
                }
            finally:
                for p in phones:
                    p.close()
                await gateway.stop()

    try:
        out = run(scenario(), 180)
    finally:
        fakes.close()
    sideband: Live = out["sideband"]
    sideband.check_clean()  # every event validates against openai.types.live; no error came
    assert sideband.events[0]["session"]["instructions"] == INSTRUCTIONS
    assert [e["event"] for e in sideband.of("transport.dtmf.received")] == ["7"]
    assert not any("pressed" in text for text in out["history"]), out["history"]  # keys go to the sidebands alone
    assert [(e["event"], e.get("client_event_id")) for e in sideband.of("transport.dtmf.sent")] == [("4", "key_1")]
    assert re.findall(r"received event: '(.)' \(end=0\)", out["caller"]) == ["4"]
    assert "hello" in sideband.heard().lower(), sideband.heard()  # the caller's turn, as the sideband hears it
    assert sideband.of("session.output_audio.delta"), "the agent's voice reflected to the sideband"
    assert sideband.of("session.input_audio.append"), "the caller's voice reflected to the sideband"
    assert [e["reason"] for e in sideband.of("session.closed")] == ["close_requested"]
    assert out["instructions"].startswith(INSTRUCTIONS) and "callback" in out["instructions"]
    watcher: Live = out["watcher"]
    watcher.check_clean()
    assert [e["reason"] for e in watcher.of("session.closed")] == ["remote_hangup"]
