"""Session-level GA features through the official ``openai`` SDK on a real server with the real
models: per-response fields (out-of-band, metadata, input), previous_item_id, the voice table,
semantic_vad, and a transcription session beside a conversation session."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.integration.rt_client import WIRE_RATE, wire_audio
from tests.profile import profile_config
from voiceagent.config import Config
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models


def _config(**overrides: str) -> Config:
    return profile_config({"server.port": "0", "server.max_sessions": "2", **overrides})


async def _send_audio(conn: Any, path: Path) -> None:
    pcm = wire_audio(path, tail_s=1.5)
    step = WIRE_RATE // 50
    for i in range(0, len(pcm), step):
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i : i + step].astype("<i2").tobytes()).decode())
        await asyncio.sleep(0.02)  # a microphone's pace


async def _until(conn: Any, kind: str) -> list[Any]:
    """Events up to and including the first of ``kind``."""
    seen = []
    async for event in conn:
        seen.append(event)
        if event.type == kind:
            return seen
    raise AssertionError(f"connection closed before {kind}")


def test_out_of_band_response_previous_item_id_and_voice_through_the_sdk(engines: Any, run: Any) -> None:
    from openai import AsyncOpenAI

    # A second name for the packaged voice: the table works with what is installed.
    cfg = _config(**{"tts.voices": "narrator=joe"})
    eng = dataclasses.replace(engines, voices={"joe": engines.tts, "narrator": engines.tts})

    async def scenario() -> None:
        async with VoiceAgentServer(cfg, eng) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(session={"type": "realtime", "audio": {"output": {"voice": "robot"}}})
                error = (await _until(conn, "error"))[-1]  # after session.created
                assert "narrator" in error.error.message and "joe" in error.error.message
                # An OpenAI voice name speaks with the default voice, and says so.
                await conn.session.update(session={"type": "realtime", "audio": {"output": {"voice": "alloy"}}})
                assert (await _until(conn, "session.updated"))[-1].session.audio.output.voice == "joe"
                await conn.session.update(session={"type": "realtime", "audio": {"output": {"voice": "narrator"}}})
                updated = (await _until(conn, "session.updated"))[-1]
                assert updated.session.audio.output.voice == "narrator"

                await conn.conversation.item.create(
                    item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "My name is Ada."}]}
                )
                first = (await _until(conn, "conversation.item.done"))[-1].item.id
                await conn.conversation.item.create(
                    item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "I live in Paris."}]}
                )
                second = (await _until(conn, "conversation.item.done"))[-1].item.id
                await conn.conversation.item.create(
                    previous_item_id=first,
                    item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "I like tea."}]},
                )
                inserted = [e for e in await _until(conn, "conversation.item.done") if e.type == "conversation.item.added"][-1]
                assert inserted.previous_item_id == first
                await conn.conversation.item.create(
                    previous_item_id="item_nowhere",
                    item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Lost."}]},
                )
                assert (await _until(conn, "error"))[-1].error.code == "item_not_found"

                await conn.response.create(
                    response={
                        "conversation": "none",
                        "metadata": {"purpose": "summary"},
                        "output_modalities": ["text"],
                        "instructions": "Summarise what the user said in one short sentence.",
                    }
                )
                events = await _until(conn, "response.done")
                done = events[-1]
                assert done.response.status == "completed" and done.response.metadata == {"purpose": "summary"}
                assert not [e for e in events if e.type.startswith("conversation.item.")]
                assert not [e for e in events if e.type == "response.output_audio.delta"]
                # The conversation still ends with the user's item: the summary is not in it.
                await conn.conversation.item.retrieve(item_id=second)
                assert (await _until(conn, "conversation.item.retrieved"))[-1].item.id == second

                # An in-band spoken answer, in the picked voice; then the voice is fixed.
                await conn.response.create(response={"max_output_tokens": 24})
                events = await _until(conn, "response.done")
                assert events[-1].response.status == "completed"
                assert [e for e in events if e.type == "response.output_audio.delta"]
                assert events[-1].response.conversation_id is not None
                await conn.session.update(session={"type": "realtime", "audio": {"output": {"voice": "joe"}}})
                assert (await _until(conn, "error"))[-1].error.code == "cannot_update_voice"

    run(scenario(), 120)


def test_a_transcription_session_beside_a_conversation_on_one_server(engines: Any, speech: dict[str, Path], run: Any) -> None:
    from openai import AsyncOpenAI

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with (
                client.realtime.connect(model="voiceagent") as talk,
                client.realtime.connect(model="voiceagent") as scribe,
            ):
                await scribe.session.update(
                    session={"type": "transcription", "audio": {"input": {"transcription": {"model": "whisper-1", "language": "en"}}}}  # type: ignore[typeddict-item,typeddict-unknown-key]
                )
                await talk.session.update(
                    session={"type": "realtime", "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}}
                )
                scribed = (await _until(scribe, "session.updated"))[-1]
                assert scribed.session.type == "transcription"
                talked = (await _until(talk, "session.updated"))[-1]
                assert talked.session.audio.input.turn_detection.type == "semantic_vad"
                assert talked.session.audio.input.turn_detection.eagerness == "high"

                await asyncio.gather(_send_audio(scribe, speech["capital"]), _send_audio(talk, speech["weather"]))
                scribe_events, talk_events = await asyncio.gather(
                    _until(scribe, "conversation.item.input_audio_transcription.completed"), _until(talk, "response.done")
                )
                assert "capital" in scribe_events[-1].transcript.lower()
                assert talk_events[-1].response.status == "completed"
                assert [e for e in talk_events if e.type == "response.output_audio.delta"]
                assert not [e for e in scribe_events if e.type.startswith("response.")]
                await scribe.response.create()
                assert (await _until(scribe, "error"))[-1].error.code == "invalid_state"

    run(scenario(), 150)
