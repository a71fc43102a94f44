"""The MCP host check (voiceagent.tools.mcp.check_host): a client's ``server_url`` never makes
the server reach an internal address unless the operator allowed that host (tools.mcp_hosts)."""

from __future__ import annotations

import asyncio

import pytest

from voiceagent.config import ToolsConfig
from voiceagent.tools.mcp import McpError, check_host


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/mcp",
        "http://localhost/mcp",
        "http://10.1.2.3/mcp",
        "http://192.168.0.7:9000/mcp",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8000/mcp",
        "http://[::ffff:127.0.0.1]/mcp",
        "http://0.0.0.0/mcp",
    ],
)
def test_internal_addresses_are_refused(url: str) -> None:
    with pytest.raises(McpError) as info:
        asyncio.run(check_host(url, frozenset()))
    assert (info.value.kind, info.value.code) == ("http_error", 403)
    assert "tools.mcp_hosts" in info.value.message


def test_a_listed_host_or_host_and_port_is_allowed() -> None:
    asyncio.run(check_host("http://127.0.0.1:8000/mcp", frozenset({"127.0.0.1"})))
    asyncio.run(check_host("http://localhost:9000/mcp", frozenset({"localhost:9000"})))
    with pytest.raises(McpError):
        asyncio.run(check_host("http://localhost:9001/mcp", frozenset({"localhost:9000"})))


def test_a_public_address_passes() -> None:
    asyncio.run(check_host("https://93.184.215.14/mcp", frozenset()))


def test_a_name_that_does_not_resolve_is_unreachable() -> None:
    with pytest.raises(McpError) as info:
        asyncio.run(check_host("http://no-such-host.invalid/mcp", frozenset()))
    assert info.value.code == 503


def test_the_setting_is_a_set_of_lower_case_entries() -> None:
    assert ToolsConfig(mcp_hosts=" MCP.internal:8080, 10.0.0.5 ,").mcp_allowed == frozenset({"mcp.internal:8080", "10.0.0.5"})
    assert ToolsConfig().mcp_allowed == frozenset()
