"""The GA protocol's finer points through a real server and the real models: every server event
of a session validates against the ``openai`` package's types (what strict clients such as the
Agents SDK check), a truncate mid-reply stops the reply's audio at once, and A-law round trips."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from tests.integration.rt_client import WIRE_RATE, Recorder, recording, send_paced, wire_audio
from tests.profile import profile_config
from tests.strict import check_server_event
from voiceagent.audio import alaw_decode, alaw_encode, resample
from voiceagent.client import Pacer
from voiceagent.config import Config
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]},
}
STORYTELLER = {
    "llm.max_tokens": "120",
    "llm.instructions": "You are a storyteller. Always answer with a long story of at least six sentences.",
}


def _config(**overrides: str) -> Config:
    return profile_config({"server.port": "0", **overrides})


async def _connected(server: VoiceAgentServer) -> tuple[Any, Recorder, asyncio.Task[None]]:
    ws = await connect(server.url, max_size=None)
    rec, task = await recording(ws)
    return ws, rec, task


async def _send(ws: Any, **msg: Any) -> None:
    await ws.send(json.dumps(msg))


def _invalid(rec: Recorder) -> list[str]:
    return [why for why in map(check_server_event, rec.events) if why is not None]


async def _next_done(rec: Recorder, timeout: float = 60) -> dict[str, Any]:
    """The next ``response.done`` after every event seen so far."""
    return await rec.wait_for("response.done", timeout, start=len(rec.events))


def test_every_server_event_of_a_session_validates_against_the_openai_types(engines: Any, speech: dict[str, Path], run: Any) -> None:
    """Audio in, a tool call and its spoken answer, a text reply, a cancel, a clear, a truncate
    and bad input: every event recorded validates, and each kind the scenario must provoke is there."""

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            ws, rec, task = await _connected(server)
            await _send(ws, type="session.update", session={"type": "realtime", "tools": [WEATHER_TOOL], "tool_choice": "auto"})
            await rec.wait_for("session.updated", 10)
            # A spoken question that calls the client's tool, then the answer from its result.
            done = await asyncio.gather(_next_done(rec), send_paced(ws, wire_audio(speech["paris_weather"], tail_s=1.0)))
            calls = [o for o in done[0]["response"]["output"] if o["type"] == "function_call"]
            assert calls, done[0]["response"]
            mark = len(rec.events)
            await _send(
                ws,
                type="conversation.item.create",
                item={"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "Sunny."},
            )
            await rec.wait_for("conversation.item.done", 10, start=mark)
            mark = len(rec.events)
            await _send(ws, type="response.create")
            spoken = await rec.wait_for("response.done", 60, start=mark)
            assert spoken["response"]["status"] == "completed"
            # The client played 300 ms of that answer.
            await _send(
                ws, type="conversation.item.truncate", item_id=spoken["response"]["output"][0]["id"], content_index=0, audio_end_ms=300
            )
            await rec.wait_for("conversation.item.truncated", 10)
            # A text reply.
            await _send(
                ws,
                type="conversation.item.create",
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi."}]},
            )
            mark = len(rec.events)
            await _send(ws, type="response.create", response={"output_modalities": ["text"]})
            text = await rec.wait_for("response.done", 60, start=mark)
            assert text["response"]["status"] == "completed"
            # A spoken reply cancelled, then the client's buffer cleared.
            mark = len(rec.events)
            await _send(ws, type="response.create")
            await rec.wait_for("response.created", 30, start=mark)
            await _send(ws, type="response.cancel")
            cancelled = await rec.wait_for("response.done", 30, start=mark)
            assert cancelled["response"]["status"] == "cancelled"
            await _send(ws, type="output_audio_buffer.clear")
            await rec.wait_for("output_audio_buffer.cleared", 10, start=mark)
            # Bad input.
            mark = len(rec.events)
            await ws.send("{not json")
            await _send(ws, type="no.such.event", event_id="evt_bad")
            await _send(ws, type="conversation.item.retrieve", item_id="item_nope")
            note = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
            await _send(ws, type="conversation.item.create", event_id="evt_prev", previous_item_id="item_nope", item=note)
            await _send(ws, type="conversation.item.retrieve", item_id=spoken["response"]["output"][0]["id"])
            await rec.wait_for("conversation.item.retrieved", 10, start=mark)
            assert len(rec.of("error")) >= 4
            prev = [e["error"] for e in rec.of("error") if e["error"]["event_id"] == "evt_prev"]
            assert [(e["code"], e["param"]) for e in prev] == [("item_not_found", "previous_item_id")]
            await ws.close()
            await task

            kinds = {e["type"] for e in rec.events}
            must = {
                "session.created",
                "session.updated",
                "input_audio_buffer.speech_started",
                "input_audio_buffer.speech_stopped",
                "input_audio_buffer.committed",
                "conversation.item.added",
                "conversation.item.done",
                "conversation.item.input_audio_transcription.completed",
                "conversation.item.truncated",
                "conversation.item.retrieved",
                "response.created",
                "response.output_item.added",
                "response.output_item.done",
                "response.content_part.added",
                "response.content_part.done",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_audio.delta",
                "response.output_audio.done",
                "response.output_audio_transcript.delta",
                "response.output_audio_transcript.done",
                "response.output_text.delta",
                "response.output_text.done",
                "response.done",
                "output_audio_buffer.started",
                "output_audio_buffer.stopped",
                "output_audio_buffer.cleared",
                "rate_limits.updated",
                "error",
            }
            assert must <= kinds, sorted(must - kinds)
            assert _invalid(rec) == []

    run(scenario(), 240)


def test_truncate_mid_reply_stops_its_audio_and_the_next_answer_is_not_delayed(engines: Any, run: Any) -> None:
    """What the Agents SDK's interrupt() sends: the server stops pacing out the rest at once."""

    async def scenario() -> None:
        async with VoiceAgentServer(_config(**STORYTELLER), engines) as server:
            ws, rec, task = await _connected(server)
            story = [{"type": "input_text", "text": "Tell me a long story about a dragon."}]
            await _send(ws, type="conversation.item.create", item={"type": "message", "role": "user", "content": story})
            await _send(ws, type="response.create")
            created = await rec.wait_for("response.created", 30)
            rid = created["response"]["id"]
            first = await rec.wait_for("output_audio_buffer.started", 60, response_id=rid)
            t_first = rec.times[rec.events.index(first)]
            item_id = (await rec.wait_for("response.output_audio.delta", 30, response_id=rid))["item_id"]
            # Let a second of it play (the client plays from the first delta on, in real time).
            seen, sent_ms = 0, 0.0
            while sent_ms < 1500:
                delta = await rec.wait_for("response.output_audio.delta", 30, start=seen, response_id=rid)
                seen = rec.events.index(delta) + 1
                sent_ms += 1000 * len(base64.b64decode(delta["delta"])) / 2 / WIRE_RATE
            assert not [e for e in rec.of("response.done") if e["response"]["id"] == rid], "the story ended within 1.5 s"
            played = int(1000 * (asyncio.get_running_loop().time() - t_first))
            played = min(played, int(sent_ms))
            await _send(ws, type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=played)
            ack = await rec.wait_for("conversation.item.truncated", 10, item_id=item_id)
            i_ack = rec.events.index(ack)
            done = next(e for e in rec.of("response.done") if e["response"]["id"] == rid)
            assert rec.events.index(done) < i_ack  # stopped before the ack
            assert done["response"]["status"] == "cancelled", done["response"]
            assert done["response"]["status_details"]["reason"] == "client_cancelled"
            stopped = rec.of("output_audio_buffer.stopped")
            assert [e["response_id"] for e in stopped] == [rid]
            # The next answer starts at once: no "already has an active response" while the rest of
            # the story would have been paced out, and none of the story's audio follows the ack.
            await _send(
                ws,
                type="conversation.item.create",
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is two plus two?"}]},
            )
            await _send(ws, type="response.create")
            second = await rec.wait_for("response.done", 90, start=i_ack + 1)
            assert second["response"]["status"] == "completed", second["response"]
            assert not [e for e in rec.events[i_ack:] if e["type"] == "error"], rec.events[i_ack:]
            late = [e for e in rec.events[i_ack:] if e.get("item_id") == item_id and e["type"].startswith("response.output_audio")]
            assert late == []
            # The history keeps what was heard: a strict prefix of what was sent.
            await _send(ws, type="conversation.item.retrieve", item_id=item_id)
            kept = (await rec.wait_for("conversation.item.retrieved", 10))["item"]["content"][0]["transcript"]
            sent = "".join(e["delta"] for e in rec.of("response.output_audio_transcript.delta") if e["response_id"] == rid)
            assert len(kept) < len(sent.strip()) or not kept, (kept, sent)
            assert " ".join(sent.split()).startswith(" ".join(kept.split())), (kept, sent)
            await ws.close()
            await task
            assert _invalid(rec) == []

    run(scenario(), 180)


def test_a_law_round_trip(engines: Any, speech: dict[str, Path], run: Any) -> None:
    """audio/pcma both ways: the question is understood and the answer is A-law at 8 kHz."""

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            ws, rec, task = await _connected(server)
            fmt = {"type": "audio/pcma"}
            await _send(
                ws, type="session.update", session={"type": "realtime", "audio": {"input": {"format": fmt}, "output": {"format": fmt}}}
            )
            updated = await rec.wait_for("session.updated", 10)
            assert updated["session"]["audio"]["input"]["format"] == fmt == updated["session"]["audio"]["output"]["format"]
            pcm8 = resample(wire_audio(speech["weather"], tail_s=1.0), WIRE_RATE, 8000)

            async def send(chunk: Any) -> None:
                await _send(ws, type="input_audio_buffer.append", audio=base64.b64encode(alaw_encode(chunk)).decode())

            await Pacer(send, chunk_ms=20, rate=8000).play(pcm8)
            done = await rec.wait_for("response.done", 60)
            transcript = (await rec.wait_for("conversation.item.input_audio_transcription.completed", 5))["transcript"].lower()
            assert "moon" in transcript, transcript
            assert done["response"]["status"] == "completed"
            raw = b"".join(base64.b64decode(e["delta"]) for e in rec.of("response.output_audio.delta"))
            wire = alaw_decode(raw)
            assert abs(len(wire) / 8 - done["response"]["audio_ms"]) < 50, (
                len(wire),
                done["response"]["audio_ms"],
            )  # 8 kHz, 1 byte a sample
            assert np.abs(wire).max() > 1000 and np.sqrt(np.mean(wire.astype(np.float64) ** 2)) > 200
            await ws.close()
            await task
            assert _invalid(rec) == []

    run(scenario(), 120)
