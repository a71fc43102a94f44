"""MCP tools through a session: a real MCP server (tests/mcp_server.py, Streamable HTTP on
loopback), scripted fake speech models and LLM.  The session lists the server's tools, offers
them, runs the model's call itself and answers from the result; a failure, a timeout or a server
that is down is an ``error`` and an apology; a barge-in cancels the call.  Every message the
Realtime codec makes of these events validates against the ``openai`` package's types."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter

from tests.mcp_server import WEATHER, McpTestServer, unused_url
from voiceagent.config import Config, ToolsConfig
from voiceagent.config.prompts import ANSWER_FROM_TOOLS, MCP_APOLOGY
from voiceagent.conversation.history import McpCallItem
from voiceagent.events import (
    ErrorEvent,
    Event,
    McpCallAdded,
    McpCallDone,
    McpToolsListed,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
)
from voiceagent.settings import settings_from_config
from voiceagent.tools.mcp import McpServer
from voiceagent.tools.spec import Message, ToolCall
from voiceagent.transports.realtime_codec import RealtimeCodec

from .fakes import FakeLlm, FakeStt, FakeTurn, speak
from .test_session import MakeFakes, Run, make_config, make_fakes, running, say_turn, tokens

__all__ = ["make_fakes"]  # the fixture, imported for pytest

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    server = McpTestServer().start()
    yield server
    server.stop()


def weather_call(name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> ToolCall:
    return ToolCall("call_1", name, arguments)


def config(timeout_s: float = 5.0) -> Config:
    return dataclasses.replace(make_config(), tools=ToolsConfig(mcp_timeout_s=timeout_s, mcp_hosts="127.0.0.1"))


def wire(events: list[Event]) -> list[dict[str, Any]]:
    """The Realtime messages of ``events``; each MCP one, and each ``response.done``, checked
    against the ``openai`` package's server event types."""
    codec = RealtimeCodec(settings_from_config(Config()), 24000)
    out = []
    for ev in events:
        for msg in codec.encode(ev):
            out.append(msg)
            if "mcp" in json.dumps(msg) or msg["type"] == "response.done":
                SERVER_EVENT.validate_python(msg)
    return out


def test_tools_are_listed_offered_called_and_answered_from(run: Run, make_fakes: MakeFakes, mcp_server: McpTestServer) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris"]),
        llm=FakeLlm([[weather_call()], tokens("It is 21 degrees and sunny in Paris.")]),
        turn=FakeTurn(0.9),
    )
    server = McpServer("weather", mcp_server.url, allowed_tools=("get_weather", "broken_tool"))

    async def main() -> None:
        async with running(fakes, config()) as (session, log):
            session.update(mcp_servers=(server,))
            _, started = await log.wait_type(McpToolsListed, status="in_progress")
            _, listed = await log.wait_type(McpToolsListed, status="completed")
            assert listed.item_id == started.item_id and listed.server_label == "weather"
            assert [t.tool.name for t in listed.tools] == ["get_weather", "broken_tool"]  # allowed_tools
            session.update(mcp_servers=(server,))  # the same server again: kept, not listed again

            await say_turn(session)
            i_first, first = await log.wait_type(ResponseDone)
            _, added = await log.wait_type(McpCallAdded)
            _, done = await log.wait_type(McpCallDone)
            assert (added.server_label, added.name, json.loads(added.arguments)) == ("weather", "get_weather", {"city": "Paris"})
            assert added.response_id == first.response_id and added.output_index == 1
            assert (done.item_id, done.output, done.error) == (added.item_id, WEATHER.format(city="Paris"), None)
            # The response ends once its call has: response.done lists the call with its result.
            assert log.events.index(done) < i_first
            assert first.status is ResponseStatus.COMPLETED
            assert [(c.server_label, c.output) for c in first.calls] == [("weather", WEATHER.format(city="Paris"))]

            # ... and the agent answers from the result, with no further calls.
            _, answer = await log.wait_type(ResponseDone, after=i_first + 1)
            assert answer.status is ResponseStatus.COMPLETED and answer.text == "It is 21 degrees and sunny in Paris."
            offered, follow_up = fakes.llm.calls.items
            assert [t.name for t in offered.tools] == ["get_weather", "broken_tool"]
            assert offered.tool_choice == "auto"
            assert follow_up.tool_choice == "none"
            assert follow_up.messages[-3:] == (
                Message("assistant", "", (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)),
                Message("tool", WEATHER.format(city="Paris"), tool_call_id="call_1"),
                Message("system", ANSWER_FROM_TOOLS),
            )
            item = session.history.find(added.item_id)
            assert isinstance(item, McpCallItem) and item.output == WEATHER.format(city="Paris")
            assert not log.of_type(ErrorEvent)
            assert len(log.of_type(McpToolsListed)) == 2
            await mcp_server.wait_calls("get_weather", 1)

        messages = wire(log.events)
        kinds = [m["type"] for m in messages]
        for kind in (
            "mcp_list_tools.in_progress",
            "mcp_list_tools.completed",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.in_progress",
            "response.mcp_call.completed",
        ):
            assert kind in kinds, kind
        order = [k for k in kinds if "mcp_call" in k]
        assert order == [
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.in_progress",
            "response.mcp_call.completed",
        ]
        listing = next(m for m in messages if m["type"] == "conversation.item.done" and m["item"]["type"] == "mcp_list_tools")
        assert [t["name"] for t in listing["item"]["tools"]] == ["get_weather", "broken_tool"]
        call_done = next(m for m in messages if m["type"] == "response.output_item.done" and m["item"]["type"] == "mcp_call")
        assert call_done["item"]["output"] == WEATHER.format(city="Paris")
        response_done = next(m for m in messages if m["type"] == "response.done")
        assert [o["type"] for o in response_done["response"]["output"]] == ["message", "mcp_call"]

    run(main(), 30)


@pytest.mark.parametrize(
    ("call", "timeout_s", "error_type"),
    [
        (weather_call("broken_tool", "{}"), 5.0, "tool_execution_error"),
        (weather_call("slow_lookup", '{"query": "x"}'), 1.0, "http_error"),  # a timeout
    ],
)
def test_a_failing_or_slow_call_is_an_error_and_a_spoken_apology(
    run: Run, make_fakes: MakeFakes, mcp_server: McpTestServer, call: ToolCall, timeout_s: float, error_type: str
) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris"]),
        llm=FakeLlm([[call], tokens("Sorry, I could not get that right now.")]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, config(timeout_s)) as (session, log):
            session.update(mcp_servers=(McpServer("weather", mcp_server.url),))
            await say_turn(session)
            i_first, first = await log.wait_type(ResponseDone)
            _, done = await log.wait_type(McpCallDone)
            assert done.output is None and done.error is not None and done.error["type"] == error_type
            _, error = await log.wait_type(ErrorEvent, code="mcp_call_failed")
            assert call.name in error.message and error.kind == "server_error"
            assert first.status is ResponseStatus.COMPLETED
            _, apology = await log.wait_type(ResponseDone, after=i_first + 1)
            assert apology.status is ResponseStatus.COMPLETED and apology.text.startswith("Sorry")
            follow_up = fakes.llm.calls.items[1]
            assert MCP_APOLOGY.format(tools=call.name) in follow_up.messages[0].content
            assert follow_up.tool_choice == "none"
            tool_message = next(m for m in follow_up.messages if m.role == "tool")
            assert "error" in json.loads(tool_message.content)

        for msg in wire(log.events):
            if msg["type"] == "response.output_item.done" and msg["item"]["type"] == "mcp_call":
                assert msg["item"]["error"]["type"] == error_type

    run(main(), 30)


def test_a_server_that_is_down_is_an_error_and_the_turn_is_still_answered(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(
        stt=FakeStt(["what is the weather in Paris"]), llm=FakeLlm([tokens("I cannot check the weather.")]), turn=FakeTurn(0.9)
    )

    async def main() -> None:
        async with running(fakes, config()) as (session, log):
            session.update(mcp_servers=(McpServer("gone", unused_url()),))
            await log.wait_type(McpToolsListed, status="failed")
            _, error = await log.wait_type(ErrorEvent, code="mcp_list_tools_failed")
            assert "'gone'" in error.message and "unreachable" in error.message
            await say_turn(session)
            i_done, done = await log.wait_type(ResponseDone)
            assert done.status is ResponseStatus.COMPLETED and done.text == "I cannot check the weather."
            assert fakes.llm.calls.items[0].tools == ()  # nothing offered from a server that is down
            # Named again, it is tried again (still down: failed again); named again unchanged
            # after a listing that worked, it would not be listed twice (the first test).
            session.update(mcp_servers=session.settings.mcp_servers)
            await log.wait_type(ErrorEvent, code="mcp_list_tools_failed", after=i_done + 1)

        kinds = [m["type"] for m in wire(log.events)]
        assert "mcp_list_tools.failed" in kinds

    run(main(), 30)


def test_an_internal_server_not_allowed_by_the_operator_is_refused(run: Run, make_fakes: MakeFakes, mcp_server: McpTestServer) -> None:
    """A client cannot make the server reach its own network: the loopback MCP server, without
    ``tools.mcp_hosts``, is refused before any connection and offers nothing."""
    fakes = make_fakes(stt=FakeStt(["what is the weather in Paris"]), llm=FakeLlm([tokens("I cannot check.")]), turn=FakeTurn(0.9))
    closed = dataclasses.replace(make_config(), tools=ToolsConfig(mcp_timeout_s=5.0))

    async def main() -> None:
        async with running(fakes, closed) as (session, log):
            session.update(mcp_servers=(McpServer("local", mcp_server.url),))
            await log.wait_type(McpToolsListed, status="failed")
            _, error = await log.wait_type(ErrorEvent, code="mcp_list_tools_failed")
            assert "internal address" in error.message and "tools.mcp_hosts" in error.message
            await say_turn(session)
            await log.wait_type(ResponseDone)
            assert fakes.llm.calls.items[0].tools == ()

    run(main(), 30)


def test_barge_in_during_a_call_cancels_it(run: Run, make_fakes: MakeFakes, mcp_server: McpTestServer) -> None:
    fakes = make_fakes(
        stt=FakeStt(["look up the archive", "never mind"]),
        llm=FakeLlm([[weather_call("slow_lookup", '{"query": "x"}')], tokens("Okay.")]),
        turn=FakeTurn(0.9),
    )

    async def main() -> None:
        async with running(fakes, config(30.0)) as (session, log):
            session.update(mcp_servers=(McpServer("weather", mcp_server.url),))
            before = mcp_server.calls("slow_lookup")
            await say_turn(session)
            _, first = await log.wait_type(ResponseCreated)
            await log.wait_type(McpCallAdded)
            await mcp_server.wait_calls("slow_lookup", before + 1)  # the server is running it
            assert session.active_response_id == first.response_id  # the response waits for its call
            await speak(session, 320)  # the user speaks: a barge-in
            i_cancelled, cancelled = await log.wait_type(ResponseDone, response_id=first.response_id)
            _, done = await log.wait_type(McpCallDone)
            assert log.events.index(done) < i_cancelled
            assert cancelled.status is ResponseStatus.CANCELLED
            assert done.error is not None and done.error["message"].startswith("cancelled")
            assert [c.error for c in cancelled.calls] == [done.error]
            assert not log.of_type(ErrorEvent)  # a cancelled call is no failure
            reply_tasks = session.replies.running("mcp.call")
            assert reply_tasks == ()
            # the session goes on: the next turn is answered, with no apology
            await say_turn(session, speech_ms=0)
            _, answer = await log.wait_type(ResponseDone, after=i_cancelled + 1, status=ResponseStatus.COMPLETED)
            assert answer.text == "Okay."
            assert MCP_APOLOGY.split(":")[0] not in fakes.llm.calls.items[-1].messages[0].content

        wire(log.events)

    run(main(), 30)


def test_closing_the_session_cancels_a_call_under_way(run: Run, make_fakes: MakeFakes, mcp_server: McpTestServer) -> None:
    fakes = make_fakes(stt=FakeStt(["look it up"]), llm=FakeLlm([[weather_call("slow_lookup", '{"query": "x"}')]]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, config(30.0)) as (session, log):
            session.update(mcp_servers=(McpServer("weather", mcp_server.url),))
            await say_turn(session)
            await log.wait_type(McpCallAdded)
            tasks = session.replies.running("mcp.call")
            assert len(tasks) == 1
        assert tasks[0].cancelled()  # cancelled and awaited by aclose, not left running

    run(main(), 30)
