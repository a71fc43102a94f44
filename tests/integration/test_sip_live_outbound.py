"""GPT-Live sessions that dial out (#69 item 5), driven by an application that uses only the
``openai`` package, to real phones (baresip): ``client.live.create`` with a SIP transport
dials; a sideband attached at once sees ``transport.ringing``, then ``transport.answered`` when
the phone is picked up, then ``session.started`` and the conversation, and its ``session.close``
hangs up; a phone that never answers ends its sideband with ``transport.failed``; a session the
server cannot honour is refused before anything is dialled.  Every sideband event validates
against ``openai.types.live`` and parses in the SDK.  The engines are scripted: what is tested is
the call and the protocol."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from tests.integration.live_client import Live, answered_after
from tests.integration.sip_caller import Baresip, gateway_for, placed_record, until_state
from tests.ports import free_port
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt
from voiceagent.config import Config, ServerConfig
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip-core is not installed (scripts/setup.sh installs it)")
pytest.importorskip("pjsua2", reason="the sip extra is not installed (scripts/setup.sh installs it)")

SESSION = {"type": "live", "model": "gpt-live-1", "instructions": "Remind Bob of his appointment."}


def test_a_live_session_dials_out_its_sideband_follows_the_call_and_an_unanswered_one_fails(
    speech: dict[str, Path], run: Any, tmp_path: Path
) -> None:
    fakes = FakeEngines(stt=FakeStt(default="hello"), llm=FakeLlm([], default=("This is the Acme reminder line.",)))
    config = dataclasses.replace(Config(), server=ServerConfig(port=0))
    phones: list[Baresip] = []

    def phone(name: str, speaks: bool) -> Baresip:
        p = Baresip(tmp_path / name, speech["capital"], "PCMU", silent=not speaks, user=name, answer="manual")
        phones.append(p)
        return p

    async def scenario() -> tuple[Live, Live, str]:
        async with VoiceAgentServer(config, fakes.engines) as server:
            gateway = gateway_for(server, free_port())
            await gateway.start()
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0)
            try:
                # Refused before anything is dialled: a SIP call negotiates its own audio format.
                bad = {**SESSION, "audio": {"format": {"type": "audio/pcm", "rate": 24000}}}
                with pytest.raises(openai.BadRequestError, match=r"audio\.format"):
                    await client.live.create(session=bad, transport={"type": "sip", "to": "sip:x@127.0.0.1:9"})  # type: ignore[arg-type,typeddict-item]
                assert not server.phone_calls.placed

                bob = phone("bob", speaks=True)
                created = await client.live.create(
                    session=SESSION,  # type: ignore[arg-type]
                    transport={"type": "sip", "to": f"sip:bob@127.0.0.1:{bob.sip_port}"},  # type: ignore[typeddict-item]
                )
                session_id = created.session.id
                assert session_id.startswith("live_")
                async with client.live.sideband.connect(session_id=session_id) as conn:
                    sideband = Live(conn)
                    pump = asyncio.create_task(sideband.pump())
                    try:
                        await sideband.wait(lambda _: bool(sideband.of("transport.ringing")), 20, "the phone ringing")
                        assert not sideband.of("session.started")
                        bob.command("accept")  # picked up
                        await sideband.wait(lambda _: bool(sideband.of("session.started")), 20, "the session's start")
                        await sideband.wait(answered_after("hello"), 40, "bob's turn, and an answer after it")
                        call = server.phone_calls.get_live(session_id)
                        assert call is not None and call.surface == "live" and call.session.settings.instructions == SESSION["instructions"]
                        await conn.session.close()
                        await sideband.wait(lambda _: bool(sideband.of("session.closed")), 20, "the session closed")
                    finally:
                        pump.cancel()
                        await asyncio.gather(pump, return_exceptions=True)
                await until_state(bob.call_ended, 20, "bob's call hung up", bob.output)

                # A phone nobody picks up: the sideband is told why, and closed.
                dave = phone("dave", speaks=False)
                created = await client.live.create(
                    session=SESSION,  # type: ignore[arg-type]
                    transport={"type": "sip", "to": f"sip:dave@127.0.0.1:{dave.sip_port}", "timeout_s": 3},  # type: ignore[typeddict-item]
                )
                placed = server.phone_calls.placed_live(created.session.id)
                assert placed is not None
                async with client.live.sideband.connect(session_id=created.session.id) as conn:
                    failed = Live(conn)
                    pump = asyncio.create_task(failed.pump())
                    try:
                        await failed.wait(lambda _: bool(failed.of("transport.failed")), 30, "the call's failure")
                        await asyncio.wait_for(asyncio.gather(pump, return_exceptions=True), 10)  # the server closed it
                    finally:
                        pump.cancel()
                        await asyncio.gather(pump, return_exceptions=True)
                record = placed_record(server, placed.id)
                assert record["status"] == "ended" and record["live_session_id"] == created.session.id, record
                await until_state(lambda: not server.sessions, 20, "every call's session closed")
                return sideband, failed, str(record["reason"])
            finally:
                for p in phones:
                    p.close()
                await gateway.stop()

    sideband, failed, reason = run(scenario(), 180)
    sideband.check_clean()
    kinds = [e["type"] for e in sideband.events]
    assert kinds[:3] == ["transport.ringing", "transport.answered", "session.started"], kinds[:5]
    assert all(e["session_id"] == sideband.events[0]["session_id"] for e in sideband.events[:2])
    failed.check_clean()
    assert [e["type"] for e in failed.events] == ["transport.ringing", "transport.failed"], failed.events
    error = failed.events[-1]["error"]
    assert error["type"] == "call_error" and error["code"] == "no_answer" and reason == "no answer", (error, reason)
