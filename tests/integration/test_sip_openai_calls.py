"""OpenAI's call-control API on SIP calls, driven by an application that uses only the ``openai``
package (base URL pointed here), with real phones (baresip): the signed ``realtime.call.incoming``
webhook verified by ``client.webhooks.unwrap``, ``client.realtime.calls.accept`` with the
application's own instructions, a Realtime socket attached by ``call_id`` that sees the caller's
keys, ``refer`` (baresip gets the REFER and calls the target, a second baresip), ``hangup`` of
another call and ``reject`` of a third with 486.  The engines are scripted: what is tested is the
call, not the model's words."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from tests.integration.sip_caller import Baresip, gateway_for, until_state
from tests.integration.webhook_app import SECRET, Application, serving
from tests.ports import free_port
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt
from voiceagent.config import Config, ServerConfig
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip-core is not installed (scripts/setup.sh installs it)")
pytest.importorskip("pjsua2", reason="the sip extra is not installed (scripts/setup.sh installs it)")

INSTRUCTIONS = "You answer the phone for the Acme front desk."


@pytest.fixture
def app() -> Iterator[Application]:
    yield from serving()


def test_an_openai_application_accepts_attaches_hears_keys_transfers_hangs_up_and_rejects(
    speech: dict[str, Path], app: Application, run: Any, tmp_path: Path
) -> None:
    fakes = FakeEngines(stt=FakeStt(default="hello"), llm=FakeLlm([], default=("Thank you.",)))
    config = dataclasses.replace(Config(), server=ServerConfig(port=0, sip_webhook_url=app.url, sip_webhook_secret=SECRET))
    sip_port = free_port()
    phones: list[Baresip] = []

    def phone(name: str) -> Baresip:
        p = Baresip(tmp_path / name, speech["capital"], "PCMU", silent=True, user=name)
        phones.append(p)
        return p

    async def scenario() -> None:
        async with VoiceAgentServer(config, fakes.engines) as server:
            gateway = gateway_for(server, sip_port)
            await gateway.start()
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            try:
                sales, caller = phone("sales"), phone("caller")
                caller.dial(f"sip:agent@127.0.0.1:{sip_port}")
                incoming = await app.next_call()
                call_id = incoming.data.call_id
                froms = [h.value for h in incoming.data.sip_headers if h.name == "From"]
                assert froms and "sip:caller@127.0.0.1" in froms[0], incoming.data.sip_headers
                assert "Call established" not in caller.output()  # it rings until the application accepts
                await client.realtime.calls.accept(call_id, type="realtime", instructions=INSTRUCTIONS)
                await until_state(lambda: "Call established" in caller.output(), 20, "the accepted call answered", caller.output)
                call = server.phone_calls.get(call_id)
                assert call is not None and call.session.settings.instructions == INSTRUCTIONS

                async with client.realtime.connect(call_id=call_id) as conn:
                    first = await asyncio.wait_for(conn.recv(), 10)
                    assert first.type == "session.created" and first.session.instructions == INSTRUCTIONS
                    caller.command("sndcode", "7")  # RFC 4733, as a phone's keypad sends it
                    async with asyncio.timeout(20):
                        async for event in conn:
                            if event.type == "input_audio_buffer.dtmf_event_received":
                                assert event.event == "7" and event.received_at > 0
                                break
                    with pytest.raises(openai.ConflictError):  # accepted already
                        await client.realtime.calls.accept(call_id, type="realtime")
                    target = f"sip:sales@127.0.0.1:{sales.sip_port}"
                    await client.realtime.calls.refer(call_id, target_uri=target)
                    await until_state(lambda: "Incoming call" in sales.output(), 30, "the transferred call at the target", sales.output)
                    async with asyncio.timeout(20):  # the call's end closes the attached socket
                        async for _ in conn:
                            pass
                await until_state(lambda: server.phone_calls.get(call_id) is None, 20, "the transferred call gone", caller.output)

                # A second call, accepted with the server's session, then hung up by the application.
                second = phone("second")
                second.dial(f"sip:agent@127.0.0.1:{sip_port}")
                call_id = (await app.next_call()).data.call_id
                await client.realtime.calls.accept(call_id, type="realtime")
                await until_state(lambda: "Call established" in second.output(), 20, "the second call answered", second.output)
                await client.realtime.calls.hangup(call_id)
                await until_state(second.call_ended, 20, "the second call hung up", second.output)

                # A third, rejected as busy; an action on a call that has ended is refused.
                third = phone("third")
                third.dial(f"sip:agent@127.0.0.1:{sip_port}")
                call_id = (await app.next_call()).data.call_id
                await client.realtime.calls.reject(call_id, status_code=486)
                await until_state(lambda: "486" in third.output(), 20, "the third call refused busy", third.output)
                assert "Call established" not in third.output()
                with pytest.raises(openai.NotFoundError):
                    await client.realtime.calls.accept(call_id, type="realtime")
                await until_state(lambda: not server.sessions, 20, "every call's session closed")
            finally:
                for p in phones:
                    p.close()
                await gateway.stop()

    run(scenario(), 180)


def test_a_call_the_application_does_not_answer_in_time_is_refused_480(
    speech: dict[str, Path], app: Application, run: Any, tmp_path: Path
) -> None:
    fakes = FakeEngines(stt=FakeStt(default="hello"), llm=FakeLlm([], default=("Yes.",)))
    server_cfg = ServerConfig(port=0, sip_webhook_url=app.url, sip_webhook_secret=SECRET, sip_accept_timeout_s=2)
    config = dataclasses.replace(Config(), server=server_cfg)
    sip_port = free_port()

    async def scenario() -> None:
        async with VoiceAgentServer(config, fakes.engines) as server:
            gateway = gateway_for(server, sip_port)
            await gateway.start()
            caller = Baresip(tmp_path / "caller", speech["capital"], "PCMU", silent=True)
            try:
                caller.dial(f"sip:agent@127.0.0.1:{sip_port}")
                await app.next_call()  # taken, and never answered
                await until_state(lambda: "480" in caller.output(), 20, "the unanswered call refused (480)", caller.output)
                assert "Call established" not in caller.output()
                await until_state(lambda: not server.sessions, 20, "its session closed")
            finally:
                caller.close()
                await gateway.stop()

    run(scenario(), 90)
