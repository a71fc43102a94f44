"""MCP tools with the real models: the official ``openai`` SDK names a real MCP server (the
``mcp`` package's, tests/mcp_server.py, Streamable HTTP on loopback) as a session tool.

* Asked aloud "What's the weather in Paris?", the agent lists the server's tools, calls
  ``get_weather`` itself and says what it returned (21 degrees and sunny).
* A tool that fails: an ``error`` event, and the agent still answers (an apology); the session
  goes on.
* A server that is down: an ``error`` event, and the turn is still answered.

Every server event the SDK receives about MCP (and every ``response.done``) validates against the
``openai`` package's Realtime types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from tests.integration.test_tools import _config as _tools_config
from tests.integration.test_tools import _say, _until_done
from tests.mcp_server import McpTestServer, unused_url
from voiceagent.config import Config

pytestmark = pytest.mark.models

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    server = McpTestServer().start()
    yield server
    server.stop()


def mcp_tool(url: str, *allowed: str) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "weather", "server_url": url, "allowed_tools": list(allowed), "require_approval": "never"}


def checked(events: list[Any]) -> list[Any]:
    """``events``, each MCP one and each ``response.done`` validated against the SDK's types."""
    for event in events:
        raw = event.to_dict()
        if "mcp" in str(raw) or event.type == "response.done":
            SERVER_EVENT.validate_python(raw)
    return events


def _config() -> Config:
    """The tool tests' configuration, the loopback MCP server allowed (tools.mcp_hosts)."""
    base = _tools_config()
    return dataclasses.replace(base, tools=dataclasses.replace(base.tools, mcp_hosts="127.0.0.1"))


async def _until_listed(conn: Any, seen: list[Any]) -> Any:
    async for event in conn:
        seen.append(event)
        if event.type in ("mcp_list_tools.completed", "mcp_list_tools.failed"):
            return event
    raise AssertionError("the connection ended before the tools were listed")


def test_spoken_question_the_server_calls_the_mcp_tool_and_speaks_its_result(
    engines: Any, speech: dict[str, Path], run: Any, mcp_server: McpTestServer
) -> None:
    from openai import AsyncOpenAI

    from voiceagent.transports.server import VoiceAgentServer

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                tool = mcp_tool(mcp_server.url, "get_weather")
                await conn.session.update(session={"type": "realtime", "tools": [tool], "tool_choice": "auto"})
                seen: list[Any] = []
                listed = await _until_listed(conn, seen)
                assert listed.type == "mcp_list_tools.completed"
                before = mcp_server.calls("get_weather")
                await _say(conn, speech["paris_weather"])
                first = await _until_done(conn, seen)
                calls = [item for item in first.response.output if item.type == "mcp_call"]
                assert first.response.status == "completed" and len(calls) == 1, first.response
                call = calls[0]
                assert (call.server_label, call.name) == ("weather", "get_weather")
                assert "paris" in call.arguments.lower(), call.arguments
                assert call.error is None and call.output is not None and "21 degrees" in call.output
                assert mcp_server.calls("get_weather") == before + 1  # the server called it, once
                kinds = [e.type for e in seen]
                assert kinds.index("response.mcp_call.in_progress") < kinds.index("response.mcp_call.completed")
                assert "response.function_call_arguments.done" not in kinds  # not the client's to run

                answer = await _until_done(conn, seen)  # no response.create: the server answers by itself
                assert answer.response.status == "completed", answer.response
                spoken = answer.response.output[0].content[0].transcript or ""
                assert "21" in spoken or "sunny" in spoken.lower() or "twenty" in spoken.lower(), spoken
                assert not [e for e in seen if e.type == "error"], [e.error for e in seen if e.type == "error"]
                checked(seen)

    run(scenario(), 240)


def test_a_failing_tool_is_an_error_and_an_answer_and_the_session_goes_on(
    engines: Any, speech: dict[str, Path], run: Any, mcp_server: McpTestServer
) -> None:
    from openai import AsyncOpenAI

    from voiceagent.transports.server import VoiceAgentServer

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                choice = {"type": "mcp", "server_label": "weather", "name": "broken_tool"}
                await conn.session.update(
                    session={"type": "realtime", "tools": [mcp_tool(mcp_server.url, "broken_tool")], "tool_choice": choice}
                )
                seen: list[Any] = []
                await _until_listed(conn, seen)
                await _say(conn, speech["paris_weather"])
                first = await _until_done(conn, seen)
                [call] = [item for item in first.response.output if item.type == "mcp_call"]
                assert call.name == "broken_tool" and call.output is None
                assert call.error is not None and call.error.type == "tool_execution_error"
                assert "response.mcp_call.failed" in [e.type for e in seen]
                errors = [e.error for e in seen if e.type == "error"]
                assert [e.code for e in errors] == ["mcp_call_failed"], errors
                answer = await _until_done(conn, seen)
                assert answer.response.status == "completed"
                assert (answer.response.output[0].content[0].transcript or "").strip()  # an answer, not silence
                checked(seen)

                # The session goes on: the tool is dropped, and the next question is answered.
                await conn.session.update(session={"type": "realtime", "tools": [], "tool_choice": "auto"})
                await _say(conn, speech["capital"])
                after = await _until_done(conn, seen)
                assert after.response.status == "completed"
                assert (after.response.output[0].content[0].transcript or "").strip()

    run(scenario(), 300)


def test_a_server_that_is_down_is_an_error_and_the_turn_is_answered(engines: Any, speech: dict[str, Path], run: Any) -> None:
    from openai import AsyncOpenAI

    from voiceagent.transports.server import VoiceAgentServer

    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            client = AsyncOpenAI(api_key="not-needed", base_url=f"http://127.0.0.1:{server.port}/v1")
            async with client.realtime.connect(model="voiceagent") as conn:
                await conn.session.update(session={"type": "realtime", "tools": [mcp_tool(unused_url(), "get_weather")]})
                seen: list[Any] = []
                listed = await _until_listed(conn, seen)
                assert listed.type == "mcp_list_tools.failed"
                await _say(conn, speech["paris_weather"])
                done = await _until_done(conn, seen)
                errors = [e.error for e in seen if e.type == "error"]
                assert [e.code for e in errors] == ["mcp_list_tools_failed"], errors
                assert done.response.status == "completed"
                assert not [item for item in done.response.output if item.type in ("mcp_call", "function_call")]
                assert (done.response.output[0].content[0].transcript or "").strip()
                checked(seen)

    run(scenario(), 240)
