"""The real packaged models behind a real loopback WebSocket server."""

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
from voiceagent.config import Config
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models


# Tests that hold a second session (a bystander, or a new client while a vanished one is torn
# down) name the number of sessions: the measured capacity is 1 where a profile's LLM is slow on
# the machine (the 1.5B on a 2-core Xeon: 107 ms a token), and capacity is test_concurrency's subject.
TWO_SESSIONS = {"server.max_sessions": "2"}


def _config(**overrides: str) -> Config:
    return profile_config({"server.port": "0", **overrides})


async def _connected(server: VoiceAgentServer) -> tuple[Any, Recorder, asyncio.Task[None]]:
    ws = await connect(server.url, max_size=None)
    rec, task = await recording(ws)
    return ws, rec, task


def test_spoken_question_gets_transcript_and_spoken_reply(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            ws, rec, task = await _connected(server)
            await send_paced(ws, wire_audio(speech["weather"]), speed=1.0)
            done = await rec.wait_for("response.done", 30)
            transcript = (await rec.wait_for("conversation.item.input_audio_transcription.completed", 5))["transcript"].lower()
            assert "fun fact" in transcript and "moon" in transcript, transcript
            assert done["response"]["status"] == "completed"
            audio = b"".join(base64.b64decode(e["delta"]) for e in rec.of("response.output_audio.delta"))
            samples = np.frombuffer(audio, dtype="<i2")
            assert len(samples) > WIRE_RATE // 2, "less than half a second of reply audio"
            assert np.abs(samples).max() > 1000, "reply audio is silent"
            reply = rec.done(done).text
            assert reply.strip(), "empty reply text"
            kinds = [e["type"] for e in rec.events]
            for expected in (
                "input_audio_buffer.speech_started",
                "input_audio_buffer.speech_stopped",
                "input_audio_buffer.committed",
                "response.created",
            ):
                assert expected in kinds
            # Order of the first answer's events, as the protocol defines it.
            assert kinds.index("response.created") < kinds.index("response.output_audio.delta") < kinds.index("response.done")
            await ws.close()
            await task

    run(scenario(), 90)


@pytest.mark.serial  # it needs the voice faster than real time, which a parallel run's load may not leave it
def test_barge_in_cancels_reply_and_cuts_history(engines: Any, speech: dict[str, Path], run: Any) -> None:
    """Talking over the agent stops it; the history keeps only what was heard."""

    async def scenario() -> None:
        cfg = _config(
            **{
                "llm.max_tokens": "120",
                "llm.instructions": "You are a storyteller. Always answer with a long story of at least six sentences.",
                # A long playout lead: the client holds audio it has not played when the barge-in
                # comes, however fast the LLM is today, so there is always something to cut.
                "playout.lead_ms": "5000",
            }
        )
        async with VoiceAgentServer(cfg, engines) as server:
            ws, rec, task = await _connected(server)
            await send_paced(ws, wire_audio(speech["long_story"]), speed=1.0)
            created = await rec.wait_for("response.created", 30)
            rid = created["response"]["id"]
            await rec.wait_for("response.output_audio.delta", 30, response_id=rid)
            first = next(i for i, e in enumerate(rec.events) if e.get("type") == "response.output_audio.delta")
            # Talk over the reply once the server has sent two seconds more audio than the client
            # can have played (it plays from the first delta on, in real time): there is always
            # something unheard to cut, however fast or slow the LLM is today.  (Barging in at the
            # first delta, the 1.5B had sent only its first clause when the barge-in came, and all
            # of it had been heard.)
            t_first = asyncio.get_running_loop().time()
            seen, sent_ms = first, 0.0
            while sent_ms - 1000 * (asyncio.get_running_loop().time() - t_first) < 2000:
                ended = [e for e in rec.of("response.done") if e["response"]["id"] == rid]
                assert not ended, f"the reply ended before it was 2 s ahead of playback ({sent_ms:.0f} ms sent)"
                delta = await rec.wait_for("response.output_audio.delta", 30, start=seen, response_id=rid)
                seen = rec.events.index(delta) + 1
                sent_ms += 1000 * len(base64.b64decode(delta["delta"])) / 2 / WIRE_RATE
            # The fixture's leading silence trimmed, so the barge-in comes soon after.
            await send_paced(ws, wire_audio(speech["colour"])[int(0.5 * WIRE_RATE) :], speed=1.0)
            done = await rec.wait_for("response.done", 30, start=first)
            assert done["response"]["id"] == rid
            assert done["response"]["status"] == "cancelled", done["response"]
            assert done["response"]["status_details"]["reason"] == "turn_detected"
            heard = rec.done(done).text
            spoken = "".join(e["delta"] for e in rec.of("response.output_audio_transcript.delta") if e["response_id"] == rid)
            assert heard, "nothing kept although audio was played"
            assert len(heard) < len(spoken.strip()), (heard, spoken)
            assert " ".join(spoken.split()).startswith(" ".join(heard.split())), (heard, spoken)
            # The client reports what it really played; the server cuts the stored item to that.
            item_id = rec.done(done).item_id
            await ws.send(json.dumps({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": 500}))
            truncated = await rec.wait_for("conversation.item.truncated", 10, item_id=item_id)
            assert truncated["audio_end_ms"] == 500
            await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": item_id}))
            item = (await rec.wait_for("conversation.item.retrieved", 10))["item"]
            kept = item["content"][0]["transcript"]
            assert len(kept) <= len(heard) and heard.startswith(kept), (kept, heard)
            # The user's interruption became the next turn and was answered.
            second = await rec.wait_for("response.done", 60, start=rec.events.index(done) + 1)
            assert second["response"]["status"] == "completed"
            await ws.close()
            await task

    run(scenario(), 150)


def test_openai_sdk_realtime_client_completes_a_spoken_turn(engines: Any, speech: dict[str, Path], run: Any) -> None:
    from openai import AsyncOpenAI

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(
                    session={"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}
                )
                pcm = wire_audio(speech["capital"], tail_s=0.0)
                step = WIRE_RATE // 50
                for i in range(0, len(pcm), step):
                    await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i : i + step].astype("<i2").tobytes()).decode())
                    await asyncio.sleep(0.02)  # a microphone's pace
                transcript = ""
                audio_bytes = 0
                async for event in conn:
                    if event.type == "conversation.item.input_audio_transcription.completed":
                        transcript = event.transcript
                    elif event.type == "response.output_audio.delta":
                        audio_bytes += len(base64.b64decode(event.delta))
                    elif event.type == "response.done":
                        assert event.response.status == "completed"
                        break
                assert "capital" in transcript.lower()
                assert audio_bytes > WIRE_RATE  # more than half a second of 16-bit audio

    run(scenario(), 90)


@pytest.mark.serial  # under a loaded parallel run the backchannel once became a turn (docs/operations.md)
def test_a_backchannel_over_a_reply_pauses_it_and_the_openai_sdk_sees_it_whole(engines: Any, speech: dict[str, Path], run: Any) -> None:
    """``turn.interruption = "words"`` (the default): "Yeah, yeah. Right." said over the reply
    pauses its audio and the reply resumes: the official SDK sees no speech, no truncation, and
    the item it is told of is the whole reply."""
    from openai import AsyncOpenAI

    async def scenario() -> None:
        story = "You are a storyteller. Always answer with a long story of at least six sentences."
        async with VoiceAgentServer(_config(**{"llm.max_tokens": "60", "llm.instructions": story}), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(
                    session={"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}
                )

                async def mic(pcm: Any) -> None:
                    step = WIRE_RATE // 50
                    for i in range(0, len(pcm), step):
                        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i : i + step].astype("<i2").tobytes()).decode())
                        await asyncio.sleep(0.02)  # a microphone's pace

                await mic(wire_audio(speech["long_story"], tail_s=0.5))
                events: list[Any] = []
                sent_ms = 0.0
                backchannel: asyncio.Task[None] | None = None
                async for event in conn:
                    events.append(event)
                    if event.type == "response.output_audio.delta":
                        sent_ms += 1000 * len(base64.b64decode(event.delta)) / 2 / WIRE_RATE
                        if backchannel is None and sent_ms >= 2000:  # the listener is 1.6 s into the reply
                            backchannel = asyncio.create_task(mic(wire_audio(speech["backchannel"], tail_s=1.5)))
                    elif event.type == "response.done":
                        break
                assert backchannel is not None, "the reply ended before the backchannel could be said"
                await backchannel
                done = events[-1]
                assert done.response.status == "completed", done.response
                created = next(i for i, e in enumerate(events) if e.type == "response.created")
                kinds = [e.type for e in events[created:]]
                assert "input_audio_buffer.speech_started" not in kinds and "output_audio_buffer.cleared" not in kinds, kinds
                [item] = [o for o in done.response.output if o.type == "message"]
                spoken = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
                assert item.status == "completed" and item.content[0].transcript == spoken, (item, spoken)
                await conn.send({"type": "conversation.item.retrieve", "item_id": item.id})
                async for event in conn:
                    if event.type == "conversation.item.retrieved":
                        assert event.item.content[0].transcript == spoken and event.item.status == "completed"
                        break
                    assert event.type != "conversation.item.truncated", event
                # The server heard the backchannel and judged it: no turn, no item.
                [session] = list(server.sessions)
                assert session.turn.dropped >= 1  # "Yeah, yeah." and "Right." may be two segments
                assert [i.role for i in session.history.items] == ["user", "assistant"]

    run(scenario(), 120)


def test_bad_input_gets_errors_and_the_server_keeps_serving(engines: Any, run: Any) -> None:
    async def scenario() -> None:
        cfg = _config(**{"server.max_message_bytes": "65536", **TWO_SESSIONS})
        async with VoiceAgentServer(cfg, engines) as server:
            ws, rec, task = await _connected(server)
            other, other_rec, other_task = await _connected(server)
            cases: list[tuple[str | bytes, str]] = [
                ("this is not json", "invalid_json"),
                (json.dumps({"type": "no.such.event"}), "unknown_event_type"),
                (json.dumps({"type": "input_audio_buffer.append", "audio": "***not base64***"}), "invalid_base64"),
                (
                    json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\x01\x02\x03").decode()}),
                    "invalid_audio_length",
                ),
                (b"\x00\x01binary", "binary_not_supported"),
                (
                    json.dumps(
                        {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}}
                    ),
                    "unsupported_format",
                ),
                (json.dumps({"type": "response.cancel"}), "response_cancel_not_active"),
                (json.dumps({"type": "conversation.item.truncate", "item_id": "nope", "audio_end_ms": 10}), "item_not_found"),
                (json.dumps([1, 2, 3]), "invalid_event"),
            ]
            for frame, code in cases:
                mark = len(rec.events)
                await ws.send(frame)
                err = await rec.wait_for("error", 10, start=mark)
                assert err["error"]["code"] == code, (frame, err)
            # Still a working session: a valid update is answered.
            mark = len(rec.events)
            await ws.send(json.dumps({"type": "session.update", "session": {"instructions": "Be brief."}}))
            updated = await rec.wait_for("session.updated", 10, start=mark)
            assert updated["session"]["instructions"] == "Be brief."
            # Over the size limit: the connection is closed with 1009 (message too big).
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 100_000}))
            await asyncio.wait_for(task, 10)
            assert ws.close_code == 1009
            # The other session was untouched and still works.
            mark = len(other_rec.events)
            await other.send(
                json.dumps(
                    {
                        "type": "conversation.item.create",
                        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
                    }
                )
            )
            await other.send(json.dumps({"type": "response.create"}))
            done = await other_rec.wait_for("response.done", 30, start=mark)
            assert done["response"]["status"] == "completed"
            assert other_rec.of("response.output_audio.delta")
            await other.close()
            await other_task

    run(scenario(), 90)


def test_client_that_vanishes_mid_turn_does_not_hurt_the_server(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(**TWO_SESSIONS), engines) as server:
            ws, _rec, task = await _connected(server)
            await send_paced(ws, wire_audio(speech["capital"])[: WIRE_RATE * 2], speed=4.0)
            ws.transport.abort()  # no close frame: the client just disappears
            await asyncio.gather(task, return_exceptions=True)
            # The session is cleaned up and a new client is served normally.
            ws2, rec2, task2 = await _connected(server)
            await ws2.send(
                json.dumps(
                    {
                        "type": "conversation.item.create",
                        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]},
                    }
                )
            )
            await ws2.send(json.dumps({"type": "response.create"}))
            done = await rec2.wait_for("response.done", 30)
            assert done["response"]["status"] == "completed"
            assert len(server.sessions) == 1
            await ws2.close()
            await task2

    run(scenario(), 60)


def test_manual_turn_taking_with_commit(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            ws, rec, task = await _connected(server)
            await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}))
            upd = await rec.wait_for("session.updated", 10)
            assert upd["session"]["audio"]["input"]["turn_detection"] is None
            await send_paced(ws, wire_audio(speech["weather"]), speed=8.0)
            assert not rec.of("input_audio_buffer.speech_started")
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            t = await rec.wait_for("conversation.item.input_audio_transcription.completed", 20)
            assert "moon" in t["transcript"].lower()
            assert not rec.of("response.created"), "no response before response.create"
            await ws.send(json.dumps({"type": "response.create"}))
            done = await rec.wait_for("response.done", 30)
            assert done["response"]["status"] == "completed"
            assert rec.done(done).text.strip(), "empty reply"
            await ws.close()
            await task

    run(scenario(), 60)


def test_wait_idle_returns_once_every_session_is_torn_down(engines: Any, run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            await asyncio.wait_for(server.wait_idle(), 1)  # no session yet: at once
            ws, _rec, task = await _connected(server)
            waiter = asyncio.create_task(server.wait_idle())
            await asyncio.wait({waiter}, timeout=0.3)
            assert not waiter.done() and len(server.sessions) == 1
            await ws.close()
            await task
            await asyncio.wait_for(waiter, 10)
            assert not server.sessions

    run(scenario(), 30)


def test_a_session_update_is_applied_before_the_events_sent_after_it(engines: Any, run: Any) -> None:
    """A client that sends its update and its request back to back (as the Agents SDK does) gets
    ``session.updated`` first, and the response runs under the whole update (here: text only)."""

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            ws, rec, task = await _connected(server)
            session = {"type": "realtime", "output_modalities": ["text"], "audio": {"output": {"voice": "ash"}}, "tracing": "auto"}
            for msg in (
                {"type": "session.update", "session": session},
                {
                    "type": "conversation.item.create",
                    "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
                },
                {"type": "response.create"},
            ):
                await ws.send(json.dumps(msg))  # no wait in between
            await rec.wait_for("response.done", 60)
            kinds = [e["type"] for e in rec.events]
            assert not rec.of("error"), rec.of("error")
            assert kinds.index("session.updated") < kinds.index("conversation.item.added") < kinds.index("response.created")
            assert not rec.of("response.output_audio.delta") and rec.of("response.output_text.delta")
            await ws.close()
            await task

    run(scenario(), 60)


def test_idle_timeout_nudges_a_raw_client_that_says_nothing_and_again_after_a_reply(
    engines: Any, speech: dict[str, Path], run: Any
) -> None:
    """``server_vad``'s ``idle_timeout_ms`` as OpenAI documents it, for a client that streams its
    microphone: silence after the update (no reply yet) and silence after a reply has played each
    trigger ``input_audio_buffer.timeout_triggered``, an empty committed item and a response."""

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            ws, rec, task = await _connected(server)
            td = {"type": "server_vad", "idle_timeout_ms": 1500}
            await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": td}}}}))
            assert (await rec.wait_for("session.updated", 10))["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 1500
            mic = asyncio.create_task(send_paced(ws, np.zeros(WIRE_RATE * 4, dtype=np.int16)))  # a quiet room
            first = await rec.wait_for("input_audio_buffer.timeout_triggered", 10)
            assert abs(first["audio_end_ms"] - first["audio_start_ms"] - 1500) <= 100, first
            await rec.wait_for("input_audio_buffer.committed", 5, item_id=first["item_id"])
            nudge = await rec.wait_for("response.done", 30)
            assert nudge["response"]["status"] == "completed" and rec.done(nudge).text.strip()
            await mic
            # A longer timeout applies at once; then a question, answered; then silence again.
            td["idle_timeout_ms"] = 5000
            mark = len(rec.events)
            await ws.send(json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": td}}}}))
            await rec.wait_for("session.updated", 10, start=mark)
            await send_paced(ws, wire_audio(speech["capital"], tail_s=1.0))
            await rec.wait_for("conversation.item.input_audio_transcription.completed", 30, start=mark)
            answer = await rec.wait_for("response.done", 30, start=mark)
            assert answer["response"]["status"] == "completed"
            mark = len(rec.events)
            mic = asyncio.create_task(send_paced(ws, np.zeros(WIRE_RATE * 10, dtype=np.int16)))
            again = await rec.wait_for("input_audio_buffer.timeout_triggered", 15, start=mark)
            assert abs(again["audio_end_ms"] - again["audio_start_ms"] - 5000) <= 100, again
            assert again["item_id"] != first["item_id"]
            mic.cancel()
            await ws.close()
            await task

    run(scenario(), 120)
