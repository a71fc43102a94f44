"""Tool calls with the real models: spoken questions, the packaged LLM, the Realtime protocol.

* The official ``openai`` SDK defines ``get_weather(city)``, asks aloud "What's the weather in
  Paris?", gets a ``function_call`` with ``{"city": "Paris"}``, sends a (faked) result and hears
  a spoken answer that uses it.
* The user speaks again while the client's tool runs: the call is closed as cancelled before the
  next answer, the answer comes, and the client's late result is refused (exactly once).
* ``voiceagent talk`` with the built-in tools answers "What time is it?" with the time.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.rt_client import WIRE_RATE, wire_audio
from tests.profile import profile_config
from voiceagent.config import Config, ServerConfig, ToolsConfig
from voiceagent.replay import speech_turns
from voiceagent.session import Session
from voiceagent.talk.console import Console
from voiceagent.talk.conversation import Conversation, TalkResult
from voiceagent.talk.devices import FileMicrophone, FileSpeaker
from voiceagent.talk.local import talk_local
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]},
}
PARIS_WEATHER = "It is 18 degrees and sunny in Paris."


def _config() -> Config:
    return dataclasses.replace(profile_config(), server=ServerConfig(port=0))


async def _say(conn: Any, wav: Path) -> None:
    pcm = wire_audio(wav, tail_s=0.0)
    step = WIRE_RATE // 50
    for i in range(0, len(pcm), step):
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i : i + step].astype("<i2").tobytes()).decode())
        await asyncio.sleep(0.02)  # a microphone's pace


async def _until_done(conn: Any, seen: list[Any]) -> Any:
    """Events up to and including the next response.done (all kept in ``seen``)."""
    async for event in conn:
        seen.append(event)
        if event.type == "response.done":
            return event
    raise AssertionError("the connection ended before response.done")


def test_sdk_get_weather_call_then_spoken_answer_from_its_result(engines: Any, speech: dict[str, Path], run: Any) -> None:
    from openai import AsyncOpenAI

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(session={"type": "realtime", "tools": [WEATHER_TOOL], "tool_choice": "auto"})
                await _say(conn, speech["paris_weather"])
                seen: list[Any] = []
                done = await _until_done(conn, seen)
                transcript = next(e.transcript for e in seen if e.type == "conversation.item.input_audio_transcription.completed")
                assert "paris" in transcript.lower(), transcript
                calls = [item for item in done.response.output if item.type == "function_call"]
                assert done.response.status == "completed" and len(calls) == 1, done.response
                call = calls[0]
                assert call.name == "get_weather"
                assert json.loads(call.arguments)["city"].strip().lower() == "paris", call.arguments
                args_done = [e for e in seen if e.type == "response.function_call_arguments.done"]
                assert [(e.call_id, e.arguments) for e in args_done] == [(call.call_id, call.arguments)]

                await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call.call_id, "output": PARIS_WEATHER})
                await conn.response.create()
                answer = await _until_done(conn, seen)
                assert answer.response.status == "completed", answer.response
                message = answer.response.output[0]
                spoken = message.content[0].transcript or ""
                audio = sum(
                    len(base64.b64decode(e.delta))
                    for e in seen
                    if e.type == "response.output_audio.delta" and e.response_id == answer.response.id
                )
                assert audio > WIRE_RATE  # over half a second of 16-bit speech
                assert "18" in spoken or "sunny" in spoken.lower(), spoken  # the answer uses the tool's result

    run(scenario(), 180)


def test_user_speaks_during_the_tool_round_trip_the_call_is_closed_once(engines: Any, speech: dict[str, Path], run: Any) -> None:
    from openai import AsyncOpenAI

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(session={"type": "realtime", "tools": [WEATHER_TOOL]})
                await _say(conn, speech["paris_weather"])
                seen: list[Any] = []
                done = await _until_done(conn, seen)
                call = next(item for item in done.response.output if item.type == "function_call")
                # The tool is slow; the user asks something else meanwhile.
                await _say(conn, speech["capital"])
                answer = await _until_done(conn, seen)
                assert answer.response.status == "completed", answer.response
                closed = [
                    e.item
                    for e in seen
                    if e.type == "conversation.item.done" and e.item.type == "function_call_output" and e.item.call_id == call.call_id
                ]
                assert len(closed) == 1 and "cancelled" in (closed[0].output or ""), closed
                # The result arrives too late: refused, never a second output.
                await conn.conversation.item.create(item={"type": "function_call_output", "call_id": call.call_id, "output": PARIS_WEATHER})
                async for event in conn:
                    if event.type == "error":
                        assert event.error.code == "tool_output_already_received", event.error
                        break
                    assert not (event.type == "conversation.item.done" and event.item.type == "function_call_output"), event

    run(scenario(), 180)


# Wall-clock times at which the 0.5B model's answer from get_time went wrong before the prompt
# said what to do with a tool result (CI at 11:46; 14:30 wrote the call out twice, as text):
# fixed, so that the test asks the same of the model whenever it runs.
@pytest.mark.parametrize("when", [dt.datetime(2026, 11, 23, 11, 46, tzinfo=dt.UTC), dt.datetime(2026, 11, 23, 14, 30, tzinfo=dt.UTC)])
def test_talk_with_the_builtin_time_tool_says_the_time(
    engines: Any, speech: dict[str, Path], run: Any, tmp_path: Path, when: dt.datetime
) -> None:
    out = tmp_path / "answer.wav"
    printed = io.StringIO()
    config = dataclasses.replace(profile_config(), tools=ToolsConfig(builtin=True))

    async def scenario() -> TalkResult:
        mic = FileMicrophone(speech["what_time"])
        await mic.load()
        speaker = FileSpeaker(out, engines.tts.sample_rate)
        speaker.start()
        try:
            async with Session(engines, config, wall_clock=lambda: when) as session:
                return await talk_local(session, mic, Conversation(speaker, Console(printed, live=False)))
        finally:
            await speaker.close()

    result = run(scenario(), 180)
    text = printed.getvalue()
    assert [t.name for t in result.tools] == ["get_time"], text
    output = result.tools[0].output or ""
    clock = re.search(r"\d{1,2}:\d{2}", output)
    assert clock is not None and clock.group(0) == f"{when.hour % 12 or 12}:{when.minute:02d}", output  # the injected clock
    answers = [t.text for t in result.turns if t.role == "assistant" and t.text]
    assert answers and clock.group(0) in answers[-1], text  # the spoken answer gives the time
    from voiceagent.audio import read_wav

    pcm, rate = read_wav(out)
    assert sum(e - s for s, e in speech_turns(pcm, rate, turn_gap_s=0.05)) > 0.8
    assert np.abs(pcm).max() > 1000


def test_sdk_text_only_response_then_a_spoken_one(engines: Any, run: Any) -> None:
    from openai import AsyncOpenAI

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
                await conn.conversation.item.create(
                    item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is the capital of France?"}]}
                )
                await conn.response.create()
                seen: list[Any] = []
                done = await _until_done(conn, seen)
                text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
                final = next(e.text for e in seen if e.type == "response.output_text.done")
                assert done.response.status == "completed" and text.strip() and final == text.strip(), seen[-3:]
                assert "paris" in text.lower(), text
                assert not [e for e in seen if e.type == "response.output_audio.delta"]
                assert done.response.output[0].content[0].type == "output_text"
                # the same session, one spoken response on request
                await conn.response.create(response={"output_modalities": ["audio"]})
                spoken: list[Any] = []
                again = await _until_done(conn, spoken)
                assert again.response.status == "completed"
                assert sum(len(base64.b64decode(e.delta)) for e in spoken if e.type == "response.output_audio.delta") > WIRE_RATE

    run(scenario(), 120)


EMAIL_TOOL = {
    "type": "function",
    "name": "send_email",
    "description": "Send an email for the user.",
    "parameters": {
        "type": "object",
        "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "subject"],
    },
}
DESK_INSTRUCTIONS = (
    "You are the voice assistant of the Northwind conference. Answer in one short spoken sentence, from this information only. "
    "The keynote is on Monday at 9:00 in the Great Hall. Lunch is served at noon in the Atrium."
)


def test_after_questions_answered_in_words_a_request_for_a_tool_is_still_a_call(engines: Any, run: Any) -> None:
    """Two questions the instructions answer, then "Send an email to Anna…": a send_email call
    (with llm.call_check on; with it off, this test failed on the 0.5B: the request was answered in
    words, docs/decisions/tool-calls.md)."""
    from openai import AsyncOpenAI

    config = dataclasses.replace(_config(), llm=dataclasses.replace(profile_config().llm, call_check=True))

    async def ask(conn: Any, text: str) -> Any:
        await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        await conn.response.create()
        return await _until_done(conn, [])

    async def scenario() -> None:
        async with VoiceAgentServer(config, engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(
                    session={
                        "type": "realtime",
                        "output_modalities": ["text"],
                        "instructions": DESK_INSTRUCTIONS,
                        "tools": [WEATHER_TOOL, EMAIL_TOOL],
                    }
                )
                for question in ("When is lunch served?", "Where is the keynote?"):
                    done = await ask(conn, question)
                    assert [i.type for i in done.response.output] == ["message"], done.response
                done = await ask(conn, "Send an email to Anna saying that I will be late.")
                calls = [i for i in done.response.output if i.type == "function_call"]
                assert [c.name for c in calls] == ["send_email"], done.response
                assert "anna" in json.loads(calls[0].arguments)["to"].lower(), calls[0].arguments

    run(scenario(), 180)
