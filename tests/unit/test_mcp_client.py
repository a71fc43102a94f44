"""The MCP adapter (voiceagent/tools/mcp.py) against a real MCP server from the ``mcp`` package,
over Streamable HTTP on loopback (tests/mcp_server.py, in its own process)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.mcp_server import WEATHER, McpTestServer, unused_url
from voiceagent.tools.mcp import McpClient, McpError, McpServer


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpTestServer]:
    server = McpTestServer().start()
    yield server
    server.stop()


def test_lists_tools_with_their_schemas(mcp_server: McpTestServer, run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("weather", mcp_server.url))
        try:
            tools = await client.list_tools()
        finally:
            await client.aclose()
        names = [t.tool.name for t in tools]
        assert names == ["get_weather", "get_secret", "slow_lookup", "broken_tool"]
        weather = tools[0]
        assert weather.server_label == "weather"
        assert weather.tool.description == "Get the current weather in a city."
        assert weather.input_schema["required"] == ["city"]
        # What the model reads has no pydantic titles; the client's listing keeps the schema as sent.
        assert weather.tool.parameters == {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        assert "title" in weather.input_schema

    run(main())


def test_allowed_tools_filters_the_listing(mcp_server: McpTestServer, run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("weather", mcp_server.url, allowed_tools=("get_weather", "broken_tool", "not_there")))
        try:
            tools = await client.list_tools()
        finally:
            await client.aclose()
        assert [t.tool.name for t in tools] == ["get_weather", "broken_tool"]

    run(main())


def test_call_returns_the_tools_text(mcp_server: McpTestServer, run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("weather", mcp_server.url))
        try:
            assert await client.call("get_weather", {"city": "Paris"}) == WEATHER.format(city="Paris")
            assert await client.call("get_weather", {"city": "Oslo"}) == WEATHER.format(city="Oslo")  # one session, reused
        finally:
            await client.aclose()

    run(main())


def test_a_failing_tool_is_a_tool_execution_error(mcp_server: McpTestServer, run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("weather", mcp_server.url))
        try:
            with pytest.raises(McpError) as info:
                await client.call("broken_tool", {})
            assert info.value.kind == "tool_execution_error"
            assert "broken_tool" in info.value.message
            assert info.value.error_object() == {"type": "tool_execution_error", "message": info.value.message}
            # The connection survives a tool's failure.
            assert await client.call("get_weather", {"city": "Rome"}) == WEATHER.format(city="Rome")
        finally:
            await client.aclose()

    run(main())


def test_a_slow_call_times_out_and_the_connection_stays_usable(mcp_server: McpTestServer, run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("weather", mcp_server.url), timeout_s=1.0)
        try:
            start = time.monotonic()
            with pytest.raises(McpError) as info:
                await client.call("slow_lookup", {"query": "x"})
            assert time.monotonic() - start < 5.0
            assert (info.value.kind, info.value.code) == ("http_error", 504)
            assert "within 1 s" in info.value.message
            assert await client.call("get_weather", {"city": "Lima"}) == WEATHER.format(city="Lima")
        finally:
            await client.aclose()

    run(main())


def test_a_server_that_is_down_fails_fast_and_clearly(run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("gone", unused_url()), timeout_s=3.0)
        try:
            start = time.monotonic()
            with pytest.raises(McpError) as info:
                await client.list_tools()
            assert time.monotonic() - start < 3.0  # refused at once, not waited out
            assert (info.value.kind, info.value.code) == ("http_error", 503)
            assert info.value.message.startswith("gone: unreachable")
            with pytest.raises(McpError):  # and again, with a fresh attempt to connect
                await client.call("get_weather", {"city": "Paris"})
        finally:
            await client.aclose()

    run(main())


def test_cancelling_a_call_cancels_it_and_the_connection_stays_usable(mcp_server: McpTestServer, run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("weather", mcp_server.url), timeout_s=30.0)
        try:
            before = mcp_server.calls("slow_lookup")
            task = asyncio.create_task(client.call("slow_lookup", {"query": "x"}))
            await mcp_server.wait_calls("slow_lookup", before + 1)  # the server has the call
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await client.call("get_weather", {"city": "Kyiv"}) == WEATHER.format(city="Kyiv")
        finally:
            await client.aclose()

    run(main())


def test_aclose_ends_the_connection(mcp_server: McpTestServer, run: Callable[..., Any]) -> None:
    async def main() -> None:
        client = McpClient(McpServer("weather", mcp_server.url))
        await client.list_tools()
        start = time.monotonic()
        await client.aclose()
        assert time.monotonic() - start < 3.0
        with pytest.raises(McpError, match="closed"):
            await client.call("get_weather", {"city": "Paris"})
        await client.aclose()  # idempotent

    run(main())
