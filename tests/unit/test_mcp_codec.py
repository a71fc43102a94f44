"""transports.realtime_mcp through the codec: ``mcp`` tools in ``session.update`` (what is
honoured, what is refused and why), their echo in ``session.updated``, and the MCP events'
messages, each checked against the ``openai`` package's Realtime types."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from openai.types.realtime import RealtimeServerEvent, RealtimeSessionCreateRequest
from pydantic import TypeAdapter

from voiceagent.events import CallSummary, McpCallAdded, McpCallDone, McpToolsListed, ResponseDone, ResponseStatus
from voiceagent.tools.mcp import McpServer, McpTool
from voiceagent.tools.spec import Tool

from .test_tool_codec import CHAT_TOOL, GA_TOOL, codec, error_of, update

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(RealtimeServerEvent)
MCP = {
    "type": "mcp",
    "server_label": "weather",
    "server_url": "http://127.0.0.1:8931/mcp",
    "allowed_tools": ["get_weather"],
    "require_approval": "never",
    "headers": {"X-Api-Key": "k1"},
}


def test_an_mcp_tool_names_a_server_beside_the_function_tools() -> None:
    changes = update(codec(), {"tools": [GA_TOOL, MCP]}).changes
    assert [t.name for t in changes["tools"]] == ["get_weather"]
    assert changes["mcp_servers"] == (McpServer("weather", MCP["server_url"], ("get_weather",), (("X-Api-Key", "k1"),)),)


def test_tools_without_mcp_remove_the_servers() -> None:
    assert update(codec(), {"tools": [GA_TOOL]}).changes["mcp_servers"] == ()
    assert "mcp_servers" not in update(codec(), {"instructions": "Hi."}).changes


def test_the_filter_object_and_an_oauth_token() -> None:
    raw = {**MCP, "allowed_tools": {"tool_names": ["a", "b"]}, "authorization": "tok", "headers": None}
    [server] = update(codec(), {"tools": [raw]}).changes["mcp_servers"]
    assert server.allowed_tools == ("a", "b")
    assert server.headers == (("Authorization", "Bearer tok"),)
    [every] = update(codec(), {"tools": [{**MCP, "allowed_tools": None}]}).changes["mcp_servers"]
    assert every.allowed_tools is None


@pytest.mark.parametrize(
    ("change", "code", "param"),
    [
        ({"require_approval": "always"}, "unsupported_value", "session.tools[0].require_approval"),
        ({"require_approval": None}, "unsupported_value", "session.tools[0].require_approval"),  # OpenAI's default asks
        ({"require_approval": {"never": {"tool_names": ["get_weather"]}}}, "unsupported_value", "session.tools[0].require_approval"),
        ({"connector_id": "connector_gmail"}, "unsupported_value", "session.tools[0].connector_id"),
        ({"allowed_tools": {"read_only": True}}, "unsupported_value", "session.tools[0].allowed_tools"),
        ({"server_url": "ftp://x/mcp"}, "invalid_value", "session.tools[0].server_url"),
        ({"server_url": None}, "invalid_value", "session.tools[0].server_url"),
        ({"server_label": "has space"}, "invalid_value", "session.tools[0].server_label"),
        ({"allowed_tools": "get_weather"}, "invalid_value", "session.tools[0].allowed_tools"),
        ({"headers": {"X": 1}}, "invalid_value", "session.tools[0].headers"),
    ],
)
def test_what_cannot_be_honoured_is_refused(change: dict[str, Any], code: str, param: str) -> None:
    err = error_of(codec(), {"type": "session.update", "event_id": "evt_u", "session": {"tools": [{**MCP, **change}]}})
    assert (err.code, err.param, err.event_id) == (code, param, "evt_u")
    if param.endswith("require_approval"):
        assert "approval flow" in err.message


def test_a_label_used_twice_and_mcp_per_response_are_refused() -> None:
    err = error_of(codec(), {"type": "session.update", "session": {"tools": [MCP, MCP]}})
    assert (err.code, err.param) == ("invalid_value", "session.tools[1].server_label")
    err = error_of(codec(), {"type": "response.create", "response": {"tools": [MCP]}})
    assert err.code == "unsupported_value" and "session.update" in err.message


def test_tool_choice_may_name_an_mcp_tool_of_a_named_server() -> None:
    choice = {"type": "mcp", "server_label": "weather", "name": "get_weather"}
    assert update(codec(), {"tools": [MCP], "tool_choice": choice}).changes["tool_choice"] == "get_weather"
    err = error_of(codec(), {"type": "session.update", "session": {"tools": [MCP], "tool_choice": {**choice, "server_label": "x"}}})
    assert err.param == "session.tool_choice"


def test_session_updated_shows_the_server_without_its_headers() -> None:
    c = codec()
    cmd = update(c, {"tools": [CHAT_TOOL, MCP], "tool_choice": {"type": "mcp", "server_label": "weather", "name": "get_weather"}})
    c.settings = dataclasses.replace(c.settings, **cmd.changes)
    session = c.session_object()
    assert session["tools"][0]["name"] == "get_time"
    assert session["tools"][1] == {
        "type": "mcp",
        "server_label": "weather",
        "server_url": MCP["server_url"],
        "server_description": None,
        "allowed_tools": ["get_weather"],
        "require_approval": "never",
    }
    assert "k1" not in json.dumps(session)
    assert session["tool_choice"] == {"type": "mcp", "server_label": "weather", "name": "get_weather"}
    RealtimeSessionCreateRequest.model_validate(session)
    SERVER_EVENT.validate_python(c.session_message("session.updated", "sess_1"))


def messages(*events: Any) -> list[dict[str, Any]]:
    c = codec()
    out = [m for ev in events for m in c.encode(ev)]
    for m in out:
        SERVER_EVENT.validate_python(m)
    return out


TOOL = McpTool("weather", Tool("get_weather", "Weather.", {"type": "object"}), {"type": "object", "title": "x"}, {"readOnlyHint": True})


def test_a_listing_renders_as_openai_does() -> None:
    started = McpToolsListed(t=0, gen=0, item_id="item_l", server_label="weather", status="in_progress")
    done = McpToolsListed(t=0, gen=0, item_id="item_l", server_label="weather", status="completed", tools=(TOOL,))
    failed = McpToolsListed(t=0, gen=0, item_id="item_f", server_label="gone", status="failed")
    out = messages(started, done, failed)
    assert [m["type"] for m in out] == [
        "conversation.item.added",
        "mcp_list_tools.in_progress",
        "mcp_list_tools.completed",
        "conversation.item.done",
        "mcp_list_tools.failed",
        "conversation.item.done",
    ]
    assert out[3]["item"]["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather.",
            "input_schema": {"type": "object", "title": "x"},
            "annotations": {"readOnlyHint": True},
        }
    ]


def test_a_call_renders_as_openai_does() -> None:
    ids = {"t": 0, "gen": 1, "response_id": "resp_1", "item_id": "item_c", "previous_item_id": "item_m", "output_index": 1}
    added = McpCallAdded(**ids, server_label="weather", name="get_weather", arguments='{"city": "Paris"}')
    ok = McpCallDone(**ids, server_label="weather", name="get_weather", arguments='{"city": "Paris"}', output="Sunny.", error=None)
    error = {"type": "http_error", "code": 504, "message": "too slow"}
    bad = McpCallDone(**ids, server_label="weather", name="get_weather", arguments="{}", output=None, error=error)
    summary = CallSummary("item_c", "call_1", "get_weather", '{"city": "Paris"}', "weather", "Sunny.", None)
    done = ResponseDone(t=0, gen=1, response_id="resp_1", item_id="item_m", status=ResponseStatus.COMPLETED, text="", calls=(summary,))
    out = messages(added, ok, bad, done)
    kinds = [m["type"] for m in out]
    assert kinds[:8] == [
        "response.output_item.added",
        "conversation.item.added",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_item.done",
        "conversation.item.done",
    ]
    assert kinds[8] == "response.mcp_call.failed"
    assert out[6]["item"] == {
        "id": "item_c",
        "type": "mcp_call",
        "server_label": "weather",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "output": "Sunny.",
        "error": None,
    }
    assert out[9]["item"]["error"] == error
    response = next(m for m in out if m["type"] == "response.done")["response"]
    assert response["output"][1]["type"] == "mcp_call" and response["output"][1]["output"] == "Sunny."
