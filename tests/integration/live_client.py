"""A GPT-Live client for the tests: the ``openai`` package's, pointed at a test server, and a
connection's events read raw, validated against ``openai.types.live`` and parsed by the SDK."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from openai import AsyncOpenAI
from openai.resources.live.live import AsyncLiveConnection

from tests.strict import check_live_server_event
from voiceagent.audio import Int16Array
from voiceagent.client.pacer import Pacer
from voiceagent.transports.server import VoiceAgentServer

__all__ = ["Live", "answered_after", "live_client"]


def live_client(server: VoiceAgentServer) -> AsyncOpenAI:
    base = server.url.replace("ws://", "http://").removesuffix("/realtime")
    return AsyncOpenAI(api_key="unused", base_url=base, max_retries=0)


@dataclasses.dataclass
class Live:
    """One GPT-Live connection: every server event, raw, in arrival order."""

    conn: AsyncLiveConnection
    events: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    arrived: asyncio.Condition = dataclasses.field(default_factory=asyncio.Condition)

    async def pump(self) -> None:
        while True:
            raw = await self.conn.recv_bytes()
            event = json.loads(raw)
            self.conn.parse_event(raw)  # the SDK's own parsing must take it
            async with self.arrived:
                self.events.append(event)
                self.arrived.notify_all()

    async def wait(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str) -> None:
        async def _wait() -> None:
            async with self.arrived:
                await self.arrived.wait_for(lambda: pred(self.events))

        try:
            await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            types = [e["type"] for e in self.events if e["type"] != "session.output_audio.delta"]
            raise AssertionError(f"no {what} within {timeout} s: {types[-20:]}; heard {self.heard()!r}; said {self.said()!r}") from None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def said(self) -> str:
        return "".join(e["delta"] for e in self.of("session.output_transcript.delta"))

    def heard(self) -> str:
        return "".join(e["delta"] for e in self.of("session.input_transcript.delta"))

    def check_clean(self) -> None:
        invalid = [why for why in map(check_live_server_event, self.events) if why is not None]
        assert not invalid, invalid
        assert not self.of("error"), self.of("error")

    async def speak(self, pcm: Int16Array) -> None:
        """24 kHz speech at a microphone's pace (pacing, not synchronisation)."""

        async def send(chunk: Int16Array) -> None:
            await self.conn.session.input_audio.append(audio=base64.b64encode(chunk.astype("<i2").tobytes()).decode())

        await Pacer(send, chunk_ms=20).play(pcm)


def answered_after(word: str) -> Callable[[list[dict[str, Any]]], bool]:
    """An output transcript after the input transcript that has ``word``."""

    def pred(events: list[dict[str, Any]]) -> bool:
        kinds = [e["type"] for e in events]
        asked = [n for n, e in enumerate(events) if e["type"] == "session.input_transcript.delta" and word in e["delta"].lower()]
        return bool(asked) and "session.output_transcript.delta" in kinds[asked[0] :]

    return pred
