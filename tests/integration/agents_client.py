"""The OpenAI Agents SDK as its users run it, one scenario against a server: run with the SDK's own
environment (``.venv-agents``, made by scripts/setup.sh: the SDK pins websockets below 17, which
the server needs), never imported by the tests.

    .venv-agents/bin/python tests/integration/agents_client.py --url ws://HOST:PORT/v1/realtime \\
        --scenario spoken|text|tool|interrupt [--pcm FILE]

``RealtimeAgent`` and ``RealtimeRunner`` with their defaults; only the URL (and a placeholder
key) is the user's.  Every event the SDK's session yields is printed as one JSON line:
``{"sdk": TYPE, ...}`` (``raw``: a server event as the SDK received it, whole; ``audio``: its
response, item and byte count).  Exit 0 when the scenario ran to its end, 2 on a time-out (the
last line names what was awaited).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner

PARIS_WEATHER = "It is 18 degrees and sunny in Paris."
CHUNK = 24_000 * 2 // 50  # 20 ms of 24 kHz 16-bit audio, the SDK's default format


_OUT = threading.Lock()


def say(line: dict[str, Any]) -> None:
    """One JSON line, whole: the SDK runs a sync tool in a thread, and print() writes the text and
    its newline separately, so two threads' lines could run together."""
    with _OUT:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: The city.
    """
    say({"sdk": "tool_called", "city": city})
    return PARIS_WEATHER


def _line(event: Any) -> dict[str, Any]:
    if event.type == "raw_model_event":
        data = getattr(event.data, "data", None)
        if getattr(event.data, "type", "") == "raw_server_event" and isinstance(data, dict):
            return {"sdk": "raw", "event": data}
        return {"sdk": "raw_model_event", "kind": getattr(event.data, "type", "")}
    if event.type == "audio":
        return {"sdk": "audio", "response_id": event.audio.response_id, "item_id": event.audio.item_id, "bytes": len(event.audio.data)}
    if event.type == "tool_end":
        return {"sdk": "tool_end", "tool": event.tool.name, "arguments": event.arguments, "output": str(event.output)}
    if event.type == "error":
        return {"sdk": "error", "error": repr(event.error)}
    return {"sdk": event.type}


class Seen:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.cond = asyncio.Condition()

    async def pump(self, session: Any) -> None:
        async for event in session:
            line = _line(event)
            say(line)
            async with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    async def wait(self, what: str, pred: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next((line for line in self.lines if pred(line)), None)

        try:
            async with asyncio.timeout(timeout), self.cond:
                await self.cond.wait_for(lambda: found() is not None)
        except TimeoutError:
            say({"sdk": "timeout", "waiting_for": what})
            raise SystemExit(2) from None
        line = found()
        assert line is not None
        return line


def raw(kind: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda line: (
        line["sdk"] == "raw" and line["event"].get("type") == kind and all(line["event"].get(k) == v for k, v in fields.items())
    )


async def main(url: str, scenario: str, pcm: bytes) -> None:
    agent = RealtimeAgent(
        name="Assistant",
        instructions="You are a helpful voice assistant. Keep answers short.",
        tools=[get_weather] if scenario == "tool" else [],
    )
    session = await RealtimeRunner(agent).run(model_config={"url": url, "api_key": "not-needed"})
    seen = Seen()
    async with session:
        pump = asyncio.create_task(seen.pump(session))
        # The SDK's handshake: its session.update at once, and the tracing one on session.created.
        await seen.wait(
            "session.updated with tracing", lambda ln: raw("session.updated")(ln) and bool(ln["event"]["session"].get("tracing")), 15
        )
        if scenario == "spoken":
            for i in range(0, len(pcm), CHUNK):
                await session.send_audio(pcm[i : i + CHUNK])
                await asyncio.sleep(0.02)  # a microphone's pace
            await seen.wait("response.done", raw("response.done"), 60)
        elif scenario == "text":
            await session.send_message("What is the capital of France?")
            await seen.wait("response.done", raw("response.done"), 60)
        elif scenario == "tool":
            await session.send_message("What's the weather in Paris?")
            await seen.wait("tool_end", lambda ln: ln["sdk"] == "tool_end", 60)
            first = await seen.wait("response.done", raw("response.done"), 60)
            first_id = first["event"]["response"]["id"]
            await seen.wait(
                "the answer's response.done", lambda ln: raw("response.done")(ln) and ln["event"]["response"]["id"] != first_id, 60
            )
        elif scenario == "interrupt":
            await session.send_message("Tell me a long story about a brave little dragon who learns to fly.")
            await seen.wait("audio", lambda ln: ln["sdk"] == "audio", 60)
            await session.interrupt()
            await seen.wait("conversation.item.truncated", raw("conversation.item.truncated"), 15)
            await seen.wait("response.done", raw("response.done"), 15)
        pump.cancel()
    say({"sdk": "finished"})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--scenario", required=True, choices=["spoken", "text", "tool", "interrupt"])
    parser.add_argument("--pcm", help="24 kHz 16-bit mono little-endian audio to speak (spoken)")
    args = parser.parse_args()
    audio = open(args.pcm, "rb").read() if args.pcm else b""  # noqa: SIM115 - read once, at start
    asyncio.run(main(args.url, args.scenario, audio))
    sys.exit(0)
