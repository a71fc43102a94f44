"""GPT-Live (``/v1/live/sessions``) with the ``openai`` package's ``client.live.connect()`` as the
client, unchanged but for its base URL, against the real server and models.

Every server event is read raw, validated against ``openai.types.live`` (:mod:`tests.strict`) and
parsed by the SDK; no ``error`` may come in any scenario but the one that asks for it.

* a spoken turn: the question transcribed, the answer spoken (audio and transcript);
* a text turn: commentary the application appends (``delegation_id`` null) is spoken;
* a client-delegated round trip: the agent delegates the weather, the application answers with
  commentary for that delegation, and the answer is spoken;
* ``session.update``, mute and unmute: muted speech is never heard, unmuted speech is;
* an interruption: speech over the answer cuts it, and the new question is answered;
* a sideband (``client.live.sideband.connect()``) sees the session, its audio reflected, and
  appends instructions;
* WebRTC (``client.live.create()`` with aiortc's offer), with a sideband on it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from openai import BadRequestError

from tests.integration.live_client import Live, answered_after, live_client
from tests.integration.rt_client import wire_audio
from tests.integration.sip_caller import until_state
from tests.profile import profile_config
from tests.strict import check_live_server_event
from voiceagent.config import Config, ServerConfig
from voiceagent.conversation.history import AssistantItem
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

PARIS_WEATHER = "It is 18 degrees and sunny in Paris."


def _config() -> Config:
    return dataclasses.replace(profile_config(), server=ServerConfig(port=0))


async def _session(server: VoiceAgentServer, scenario: Callable[[Live], Any], **session: Any) -> Live:
    async with live_client(server).live.connect() as conn:
        live = Live(conn)
        pump = asyncio.create_task(live.pump())
        try:
            await conn.session.start(session={"model": "gpt-live-1", **session})
            await live.wait(lambda ev: any(e["type"] == "session.started" for e in ev), 30, "session.started")
            await scenario(live)
            await conn.session.close()
            await live.wait(lambda ev: any(e["type"] == "session.closed" for e in ev), 30, "session.closed")
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)  # cancelled, or ended by the close
    return live


def _said(needle: Callable[[str], bool]) -> Callable[[list[dict[str, Any]]], bool]:
    def pred(events: list[dict[str, Any]]) -> bool:
        return needle("".join(e["delta"] for e in events if e["type"] == "session.output_transcript.delta").lower())

    return pred


def _spoken(live: Live, after: int, words: tuple[str, ...]) -> bool:
    """One of ``words`` in what the agent said after its first ``after`` transcript deltas."""
    said = "".join(e["delta"] for e in live.of("session.output_transcript.delta")[after:]).lower()
    return any(w in said for w in words)


def _answer_heard(events: list[dict[str, Any]]) -> bool:
    """The question about the capital answered, and over a second of the answer reflected, timed.
    (Whatever the answer says: Whisper tiny has heard "capital of France" as "capital and
    friends"; what these tests check is the session's events, not the model's accuracy.)"""
    reflected = sum(e["end_ms"] - e["start_ms"] for e in events if e["type"] == "session.output_audio.delta" and "start_ms" in e)
    return answered_after("capital")(events) and reflected >= 1000


def test_live_spoken_turn_text_turn_and_close(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario(live: Live) -> None:
        await live.speak(wire_audio(speech["capital"], tail_s=1.0))
        await live.wait(answered_after("capital"), 90, "a spoken answer to the question")
        before = len(live.of("session.output_transcript.delta"))
        await live.conn.session.commentary.append(content="The museum opens at nine tomorrow.", delegation_id=None)
        await live.wait(lambda _: _spoken(live, before, ("nine", "9")), 90, "the commentary spoken")

    async def main() -> Live:
        async with VoiceAgentServer(_config(), engines) as server:
            return await _session(server, scenario, audio={"format": {"type": "audio/pcm", "rate": 24000}})

    live = run(main(), 240)
    live.check_clean()
    started = live.of("session.started")[0]["session"]
    assert started["model"] == "gpt-live-1" and started["audio"]["output"]["voice"] == "marin"
    assert "capital" in live.heard().lower(), live.heard()
    audio = sum(len(base64.b64decode(e["delta"])) for e in live.of("session.output_audio.delta"))
    assert audio > 24000 * 2, audio  # over a second of 24 kHz speech
    assert len(live.of("session.commentary.appended")) == 1
    closed = live.of("session.closed")[-1]
    assert closed["reason"] == "close_requested" and closed["usage"]["seconds"] >= 1


def test_live_client_delegation_round_trip_speaks_the_applications_result(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario(live: Live) -> None:
        await live.speak(wire_audio(speech["paris_weather"], tail_s=1.0))
        await live.wait(lambda ev: any(e["type"] == "session.delegation.created" for e in ev), 90, "a delegation")
        delegation = live.of("session.delegation.created")[0]["delegation"]
        await live.conn.session.commentary.append(content=PARIS_WEATHER, delegation_id=delegation["id"])
        await live.wait(_said(lambda s: "18" in s or "eighteen" in s or "sunny" in s), 90, "the delegated result spoken")

    async def main() -> Live:
        async with VoiceAgentServer(_config(), engines) as server:
            instructions = "You are a helpful voice assistant. Delegate every question about the weather."
            return await _session(server, scenario, instructions=instructions)

    live = run(main(), 240)
    live.check_clean()
    created = live.of("session.delegation.created")
    assert len(created) == 1 and created[0]["delegation"]["target"] == "client", created
    assert "weather" in live.heard().lower(), live.heard()


def test_live_update_mute_and_unmute(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario(live: Live) -> None:
        await live.conn.session.update(session={"delegation": {"type": "client", "acknowledgement_delay_ms": 300}})
        await live.conn.session.input_audio.mute()
        await live.speak(wire_audio(speech["colour"], tail_s=1.0))
        await live.conn.session.input_audio.unmute()
        await live.speak(wire_audio(speech["capital"], tail_s=1.0))
        await live.wait(lambda ev: any(e["type"] == "session.input_transcript.delta" for e in ev), 90, "an input transcript")
        await live.wait(answered_after("capital"), 90, "the unmuted question answered")

    async def main() -> Live:
        async with VoiceAgentServer(_config(), engines) as server:
            return await _session(server, scenario)

    live = run(main(), 240)
    live.check_clean()
    updated = live.of("session.updated")
    assert len(updated) == 1 and updated[0]["session"]["delegation"]["acknowledgement_delay_ms"] == 300
    types = [e["type"] for e in live.events]
    assert types.index("session.input_audio.muted") < types.index("session.input_audio.unmuted")
    heard = live.heard().lower()
    assert "capital" in heard and "sky" not in heard and "colour" not in heard and "color" not in heard, heard


def test_live_speech_over_the_answer_interrupts_it(engines: Any, speech: dict[str, Path], run: Any) -> None:
    sessions: list[Any] = []

    async def scenario(live: Live) -> None:
        await live.speak(wire_audio(speech["weather"], tail_s=0.2))  # a fun fact about the moon: a long answer
        await live.wait(lambda ev: any(e["type"] == "session.output_audio.delta" for e in ev), 90, "the answer's audio")
        await live.speak(wire_audio(speech["capital"], tail_s=1.0))
        await live.wait(answered_after("capital"), 90, "the interrupting question answered")

    async def main() -> Live:
        async with VoiceAgentServer(_config(), engines) as server:
            live = await _session(server, scenario)
            sessions.extend(server.sessions)
            return live

    live = run(main(), 240)
    live.check_clean()
    assert "capital" in live.heard().lower(), live.heard()
    history = [item for s in sessions for item in s.history.items if isinstance(item, AssistantItem)]
    assert history and history[0].status == "incomplete", [(i.status, i.text) for i in history]


def test_live_refuses_loudly_and_keeps_the_session(engines: Any, run: Any) -> None:
    async def scenario(live: Live) -> None:
        await live.conn.send({"type": "response.create"})  # type: ignore[arg-type]
        await live.conn.session.commentary.append(content="x", delegation_id="call_nope")
        await live.wait(lambda ev: len([e for e in ev if e["type"] == "error"]) >= 2, 30, "two errors")
        await live.conn.session.instructions.append(content="Always answer in one sentence.", delegation_id=None)
        await live.wait(lambda ev: any(e["type"] == "session.instructions.appended" for e in ev), 30, "the append acknowledged")

    async def main() -> Live:
        async with VoiceAgentServer(_config(), engines) as server:
            return await _session(server, scenario)

    live = run(main(), 120)
    codes = [e["error"]["code"] for e in live.of("error")]
    assert codes == ["unsupported_event", "delegation_not_found"], codes
    assert all(check_live_server_event(e) is None for e in live.events)
    assert live.of("session.closed"), "the session went on after the errors"


def test_a_sideband_sees_the_session_and_appends_instructions(engines: Any, speech: dict[str, Path], run: Any) -> None:
    """``client.live.sideband.connect()`` on a running session: the ``session.started`` replay,
    the caller's audio and the agent's reflected as PCM16 at 24 kHz with their times, both
    transcripts; its instructions join the session's; a bad event it sends is answered to it alone."""
    note = "The caller's name is Ada."
    seen: dict[str, Any] = {}

    async def main() -> tuple[Live, Live]:
        async with VoiceAgentServer(_config(), engines) as server:
            client = live_client(server)

            async def scenario(primary: Live) -> None:
                session_id = primary.of("session.started")[0]["session"]["id"]
                async with client.live.sideband.connect(session_id=session_id) as conn:
                    sideband = Live(conn)
                    pump = asyncio.create_task(sideband.pump())
                    try:
                        await sideband.wait(lambda ev: bool(ev) and ev[0]["type"] == "session.started", 30, "the replayed start")
                        await conn.session.instructions.append(content=note, delegation_id=None)
                        await conn.session.commentary.append(content="x", delegation_id="call_nope")
                        await sideband.wait(lambda ev: any(e["type"] == "session.instructions.appended" for e in ev), 30, "the append")
                        seen["instructions"] = server.live[session_id].session.settings.instructions
                        await primary.speak(wire_audio(speech["capital"], tail_s=1.0))
                        await sideband.wait(_answer_heard, 90, "the answer, seen from the sideband")
                    finally:
                        pump.cancel()
                        await asyncio.gather(pump, return_exceptions=True)
                seen["sideband"] = sideband

            primary = await _session(server, scenario)
            return primary, seen["sideband"]

    primary, sideband = run(main(), 240)
    primary.check_clean()
    invalid = [why for why in map(check_live_server_event, sideband.events) if why is not None]
    assert not invalid, invalid
    assert note in seen["instructions"]
    assert [e["error"]["code"] for e in sideband.of("error")] == ["delegation_not_found"]  # to the sideband alone
    assert primary.of("session.instructions.appended"), "the primary sees the sideband's append too"
    assert "capital" in sideband.heard().lower(), sideband.heard()
    reflected = sideband.of("session.output_audio.delta")
    assert reflected and all(e["end_ms"] >= e["start_ms"] for e in reflected)
    assert sum(e["end_ms"] - e["start_ms"] for e in reflected) >= 1000  # over a second of the answer, timed
    heard = sum(len(base64.b64decode(e["audio"])) for e in sideband.of("session.input_audio.append"))
    assert heard >= 2 * 24000  # the caller's question, reflected at 24 kHz (over a second)


def test_live_over_webrtc_with_a_sideband(engines: Any, speech: dict[str, Path], run: Any) -> None:
    """``client.live.create()`` with aiortc's offer: GPT-Live's events on the data channel, the
    agent's voice on the track; a sideband attached by the session's id sees the turn and appends
    instructions; ``audio.format`` is refused for WebRTC (its tracks negotiate their own)."""
    from voiceagent.client.webrtc import RtcClient, track_audio

    note = "The caller's name is Ada."
    out: dict[str, Any] = {}

    async def main() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = live_client(server)
            created: dict[str, str] = {}

            async def signal(offer: str, session: dict[str, Any] | None = None) -> str:
                answer = await client.live.create(session=session or {"model": "gpt-live-1"}, transport={"type": "webrtc", "sdp": offer})
                created["id"] = answer.session.id
                return answer.transport.sdp

            async def refused(offer: str) -> str:
                return await signal(offer, {"model": "gpt-live-1", "audio": {"format": {"type": "audio/pcm", "rate": 24000}}})  # type: ignore[dict-item]

            with pytest.raises(BadRequestError) as err:
                await RtcClient(server.url, signal=refused).connect()
            out["refusal"] = err.value.body
            rtc = RtcClient(server.url.replace("ws://", "http://").removesuffix("/v1/realtime"), signal=signal)
            await rtc.connect()
            try:
                await rtc.wait_for("session.started", 30)
                async with client.live.sideband.connect(session_id=created["id"]) as conn:
                    sideband = Live(conn)
                    pump = asyncio.create_task(sideband.pump())
                    try:
                        await sideband.wait(lambda ev: bool(ev) and ev[0]["type"] == "session.started", 30, "the replayed start")
                        await conn.session.instructions.append(content=note, delegation_id=None)
                        await rtc.wait_for("session.instructions.appended", 30)
                        out["instructions"] = server.live[created["id"]].session.settings.instructions
                        started = time.monotonic()
                        rtc.mic.say(track_audio(speech["capital"], tail_s=1.0))
                        await sideband.wait(_answer_heard, 90, "the answer, seen from the sideband")
                        await rtc.wait_for("session.output_transcript.delta", 30)
                        # The track's frames arrive in real time, after the transcript that the
                        # sideband sees: wait for half a second of them (a guard, not a measure).
                        await until_state(lambda: len(rtc.audible_frames(after=started)) >= 25, 30, "the answer audible on the track")
                        out["audible"] = rtc.audible_frames(after=started)
                    finally:
                        pump.cancel()
                        await asyncio.gather(pump, return_exceptions=True)
                out["sideband"], out["channel"] = sideband, list(rtc.events)
            finally:
                await rtc.close()

    run(main(), 240)
    assert out["refusal"]["param"] == "session.audio.format", out["refusal"]  # the SDK hands over the error object
    channel = out["channel"]
    assert channel[0]["type"] == "session.started"
    invalid = [why for why in map(check_live_server_event, channel + out["sideband"].events) if why is not None]
    assert not invalid, invalid
    assert not [e for e in channel if e["type"] in ("error", "session.output_audio.delta")]  # the voice is on the track
    assert note in out["instructions"]
    assert "capital" in out["sideband"].heard().lower()
    assert len(out["audible"]) >= 25  # over half a second of the answer heard on the track (20 ms frames)
