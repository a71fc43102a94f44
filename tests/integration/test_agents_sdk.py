"""The OpenAI Agents SDK (``openai-agents``), unchanged and with its defaults, against the real server.

``RealtimeAgent`` + ``RealtimeRunner`` as its documentation shows them; the only thing a user
changes is the URL.  The SDK's default handshake sends the voice ``ash``, ``semantic_vad`` turn
detection, ``gpt-4o-mini-transcribe`` and, on ``session.created``, ``tracing: "auto"``: none of it
may draw an ``error``.  Each test also checks every server event the SDK received against the
``openai`` package's types (:mod:`tests.strict`).

* a spoken turn (audio in, a transcript and a spoken answer out);
* a text turn (``send_message``);
* a function tool round trip: the SDK runs the agent's tool and the answer uses its output;
* an interrupt (``session.interrupt()`` while the answer plays): the server stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.rt_client import WIRE_RATE, wire_audio
from tests.profile import profile_config
from tests.strict import check_server_event
from voiceagent.config import Config, ServerConfig
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

PARIS_WEATHER = "It is 18 degrees and sunny in Paris."


def _config() -> Config:
    return dataclasses.replace(profile_config(), server=ServerConfig(port=0))


@dataclasses.dataclass
class SdkEvents:
    """Every event the SDK's session yields, with waiting by predicate."""

    events: list[Any] = dataclasses.field(default_factory=list)
    cond: asyncio.Condition = dataclasses.field(default_factory=asyncio.Condition)

    async def pump(self, session: Any) -> None:
        async for event in session:
            async with self.cond:
                self.events.append(event)
                self.cond.notify_all()

    async def wait_for(self, pred: Callable[[Any], bool], timeout: float, start: int = 0) -> Any:
        """The first event from index ``start`` on for which ``pred`` holds."""

        def found() -> Any:
            return next((e for e in self.events[start:] if pred(e)), None)

        async with asyncio.timeout(timeout), self.cond:
            await self.cond.wait_for(lambda: found() is not None)
            return found()

    def raw(self) -> list[dict[str, Any]]:
        """The server's events as the SDK received them (its raw_server_event forwards)."""
        return [
            e.data.data
            for e in self.events
            if e.type == "raw_model_event" and getattr(e.data, "type", "") == "raw_server_event" and isinstance(e.data.data, dict)
        ]

    def raw_of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.raw() if m.get("type") == kind]

    def check_clean(self) -> None:
        """No ``error`` at any level, and every server event valid by the ``openai`` types."""
        errors = [e for e in self.events if e.type == "error"] + self.raw_of("error")
        assert not errors, errors
        invalid = [why for why in map(check_server_event, self.raw()) if why is not None]
        assert not invalid, invalid

    def raw_done(self) -> Callable[[Any], bool]:
        return lambda e: e.type == "raw_model_event" and _raw_type(e) == "response.done"


def _raw_type(event: Any) -> str:
    data = getattr(event.data, "data", None)
    return str(data.get("type", "")) if isinstance(data, dict) else ""


@contextlib.asynccontextmanager
async def sdk_session(server: VoiceAgentServer, agent: Any) -> AsyncIterator[tuple[Any, SdkEvents]]:
    """An Agents SDK session with its defaults, on ``server``: the runner as documented, only the URL changed."""
    from agents.realtime import RealtimeRunner

    runner = RealtimeRunner(agent)
    session = await runner.run(model_config={"url": f"{server.url}?model=gpt-realtime", "api_key": "not-needed"})
    seen = SdkEvents()
    async with session:
        pump = asyncio.create_task(seen.pump(session))
        try:
            # The SDK's handshake: its session.update, then (on session.created) the tracing update.
            await seen.wait_for(lambda e: e.type == "raw_model_event" and _raw_type(e) == "session.updated", 10)
            await seen.wait_for(
                lambda e: e.type == "raw_model_event" and _raw_type(e) == "session.updated" and e.data.data["session"].get("tracing"),
                10,
            )
            yield session, seen
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump


async def _speak(session: Any, wav: Path) -> None:
    """``wav`` at a microphone's pace, 20 ms a chunk, then a second of room silence."""
    pcm = wire_audio(wav, tail_s=1.0)
    step = WIRE_RATE // 50
    for i in range(0, len(pcm), step):
        await session.send_audio(pcm[i : i + step].astype("<i2").tobytes())
        await asyncio.sleep(0.02)  # a microphone's pace, not a wait for the server


def _audio_bytes(seen: SdkEvents, response_id: str | None = None) -> int:
    return sum(len(e.audio.data) for e in seen.events if e.type == "audio" and (response_id is None or e.audio.response_id == response_id))


def _agent(**kwargs: Any) -> Any:
    from agents.realtime import RealtimeAgent

    return RealtimeAgent(name="Assistant", instructions="You are a helpful voice assistant. Keep answers short.", **kwargs)


def test_agents_sdk_default_handshake_has_no_error_and_a_spoken_turn_is_answered(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server, sdk_session(server, _agent()) as (session, seen):
            updated = seen.raw_of("session.updated")
            # The SDK's own voice name is accepted and shown as the voice the server speaks with.
            assert updated[-1]["session"]["audio"]["output"]["voice"] == server.config.tts.model
            assert updated[-1]["session"]["tracing"] == "auto"
            await _speak(session, speech["capital"])
            done = await seen.wait_for(seen.raw_done(), 60)
            assert done.data.data["response"]["status"] == "completed", done.data.data
            transcripts = seen.raw_of("conversation.item.input_audio_transcription.completed")
            assert transcripts and "capital" in transcripts[0]["transcript"].lower(), transcripts
            pcm = np.frombuffer(b"".join(e.audio.data for e in seen.events if e.type == "audio"), dtype="<i2")
            assert len(pcm) > WIRE_RATE // 2, "less than half a second of spoken answer"
            assert np.abs(pcm).max() > 1000, "the answer is silent"
            seen.check_clean()

    run(scenario(), 120)


def test_agents_sdk_text_turn_gets_a_spoken_answer(engines: Any, run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server, sdk_session(server, _agent()) as (session, seen):
            await session.send_message("What is the capital of France?")
            done = await seen.wait_for(seen.raw_done(), 60)
            response = done.data.data["response"]
            assert response["status"] == "completed", response
            spoken = response["output"][0]["content"][0]["transcript"]
            assert "paris" in spoken.lower(), spoken
            assert _audio_bytes(seen, response["id"]) > WIRE_RATE
            seen.check_clean()

    run(scenario(), 120)


def test_agents_sdk_function_tool_is_called_and_the_answer_uses_its_output(engines: Any, run: Any) -> None:
    from agents import function_tool

    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: The city.
        """
        calls.append(city)
        return PARIS_WEATHER

    async def scenario() -> None:
        agent = _agent(tools=[get_weather])
        async with VoiceAgentServer(_config(), engines) as server, sdk_session(server, agent) as (session, seen):
            tools = seen.raw_of("session.updated")[-1]["session"]["tools"]
            assert [t["name"] for t in tools] == ["get_weather"], tools
            await session.send_message("What's the weather in Paris?")
            end = await seen.wait_for(lambda e: e.type == "tool_end", 60)
            assert end.output == PARIS_WEATHER
            assert [c.strip().lower() for c in calls] == ["paris"], calls
            # The SDK sends the output and asks for the answer itself: the answer is the response after the call's.
            first = await seen.wait_for(seen.raw_done(), 60)
            answer = await seen.wait_for(
                lambda e: seen.raw_done()(e) and e.data.data["response"]["id"] != first.data.data["response"]["id"], 60
            )
            response = answer.data.data["response"]
            assert response["status"] == "completed", response
            spoken = response["output"][0]["content"][0]["transcript"]
            assert "18" in spoken or "sunny" in spoken.lower(), spoken
            seen.check_clean()

    run(scenario(), 180)


def test_agents_sdk_interrupt_stops_the_answer_and_keeps_what_was_heard(engines: Any, run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server, sdk_session(server, _agent()) as (session, seen):
            await session.send_message("Tell me a long story about a brave little dragon who learns to fly.")
            first = await seen.wait_for(lambda e: e.type == "audio", 60)
            await session.interrupt()
            truncated = await seen.wait_for(lambda e: e.type == "raw_model_event" and _raw_type(e) == "conversation.item.truncated", 10)
            done = await seen.wait_for(seen.raw_done(), 10)
            response = done.data.data["response"]
            assert response["id"] == first.audio.response_id
            assert response["status"] == "cancelled", response
            assert truncated.data.data["item_id"] == first.audio.item_id
            # The history holds what was heard: no more than the audio sent, cut where the SDK said.
            heard_ms = truncated.data.data["audio_end_ms"]
            sent_ms = _audio_bytes(seen, response["id"]) / 2 / WIRE_RATE * 1000
            assert 0 <= heard_ms <= sent_ms + 1, (heard_ms, sent_ms)
            seen.check_clean()

    run(scenario(), 120)
