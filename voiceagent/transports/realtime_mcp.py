"""The Realtime ``mcp`` tool on the wire: the tool object validated (:func:`mcp_server`) and
echoed (:func:`mcp_tool_object`), and the MCP events rendered (:func:`encode_mcp`): the tool
listing (``mcp_list_tools.*`` and its ``mcp_list_tools`` item) and each call (``mcp_call``
items, ``response.mcp_call_arguments.*``, ``response.mcp_call.*``).

What this server does not do is refused, not dropped: an approval flow (``require_approval``
must be ``"never"``), connectors and tunnels (``server_url`` only), the ``read_only`` filter.
Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from voiceagent.errors import ProtocolError, excerpt
from voiceagent.events import CallSummary, McpCallAdded, McpCallDone, McpToolsListed
from voiceagent.tools.mcp import McpServer, McpTool
from voiceagent.transports.realtime_wire import mcp_call_object, message

__all__ = ["encode_mcp", "mcp_server", "mcp_tool_object", "summary_object"]

_LABEL = re.compile(r"[A-Za-z0-9_-]{1,64}")
_KNOWN = {
    "type",
    "server_label",
    "server_url",
    "server_description",
    "allowed_tools",
    "require_approval",
    "headers",
    "authorization",
}
_MAX_HEADERS = 32


def mcp_server(raw: dict[str, Any], where: str) -> McpServer:
    """A ``{"type": "mcp", ...}`` tool as the server it names; ``ProtocolError`` naming the field
    when it is not one this server can honour."""
    for key, value in raw.items():
        if key not in _KNOWN and value is not None:
            raise ProtocolError("unsupported_value", f"'{where}.{key}' is not supported for mcp tools", param=f"{where}.{key}")
    label = raw.get("server_label")
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise ProtocolError("invalid_value", f"'{where}.server_label' must be 1-64 letters, digits, _ or -", param=f"{where}.server_label")
    url = raw.get("server_url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or len(str(url)) > 2000:
        raise ProtocolError(
            "invalid_value",
            f"'{where}.server_url' must be the http(s) URL of an MCP server (Streamable HTTP); connectors are not supported",
            param=f"{where}.server_url",
        )
    approval = raw.get("require_approval")
    if approval != "never":
        raise ProtocolError(
            "unsupported_value",
            f"'{where}.require_approval' must be \"never\" (got {excerpt(approval)}): this server calls MCP tools without asking, "
            "and does not support the approval flow",
            param=f"{where}.require_approval",
        )
    description = raw.get("server_description") or ""
    if not isinstance(description, str):
        raise ProtocolError("invalid_value", f"'{where}.server_description' must be a string", param=f"{where}.server_description")
    return McpServer(label, str(url), _allowed(raw.get("allowed_tools"), where), _headers(raw, where), description)


def _allowed(value: Any, where: str) -> tuple[str, ...] | None:
    param = f"{where}.allowed_tools"
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("read_only") is not None:
            raise ProtocolError("unsupported_value", f"'{param}.read_only' is not supported; list the tool names", param=param)
        value = value.get("tool_names")
        if value is None:
            return None
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value) or len(value) > 128:
        raise ProtocolError("invalid_value", f"'{param}' must be a list of tool names", param=param)
    return tuple(value)


def _headers(raw: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    headers = raw.get("headers") or {}
    if not isinstance(headers, dict) or len(headers) > _MAX_HEADERS or not all(isinstance(v, str) for v in headers.values()):
        raise ProtocolError("invalid_value", f"'{where}.headers' must be an object of strings", param=f"{where}.headers")
    out = [(str(k), v) for k, v in headers.items()]
    token = raw.get("authorization")
    if token is not None:
        if not isinstance(token, str):
            raise ProtocolError("invalid_value", f"'{where}.authorization' must be a string", param=f"{where}.authorization")
        out.append(("Authorization", f"Bearer {token}"))
    return tuple(out)


def mcp_tool_object(server: McpServer) -> dict[str, Any]:
    """An ``mcp`` tool as ``session.tools`` lists it.  Its headers are not echoed: they carry
    secrets, and a ``session.updated`` may end up in a log."""
    return {
        "type": "mcp",
        "server_label": server.label,
        "server_url": server.url,
        "server_description": server.description or None,
        "allowed_tools": list(server.allowed_tools) if server.allowed_tools is not None else None,
        "require_approval": "never",
    }


def summary_object(call: CallSummary) -> dict[str, Any]:
    """An MCP call as ``response.done`` lists it."""
    assert call.server_label is not None
    return mcp_call_object(call.item_id, call.server_label, call.name, call.arguments, call.output, call.error)


def _list_item(ev: McpToolsListed) -> dict[str, Any]:
    return {"id": ev.item_id, "type": "mcp_list_tools", "server_label": ev.server_label, "tools": [_tool(t) for t in ev.tools]}


def _tool(tool: McpTool) -> dict[str, Any]:
    return {
        "name": tool.tool.name,
        "description": tool.tool.description or None,
        "input_schema": dict(tool.input_schema),
        "annotations": dict(tool.annotations) if tool.annotations is not None else None,
    }


def encode_mcp(ev: McpToolsListed | McpCallAdded | McpCallDone) -> list[dict[str, Any]]:
    """The server messages of one MCP event."""
    if isinstance(ev, McpToolsListed):
        item = _list_item(ev)
        if ev.status == "in_progress":
            return [
                message("conversation.item.added", previous_item_id=None, item=item),
                message("mcp_list_tools.in_progress", item_id=ev.item_id),
            ]
        return [
            message(f"mcp_list_tools.{ev.status}", item_id=ev.item_id),
            message("conversation.item.done", previous_item_id=None, item=item),
        ]
    ids = {"response_id": ev.response_id, "item_id": ev.item_id, "output_index": ev.output_index}
    if isinstance(ev, McpCallAdded):
        item = mcp_call_object(ev.item_id, ev.server_label, ev.name, "")
        return [
            message("response.output_item.added", response_id=ev.response_id, output_index=ev.output_index, item=item),
            message("conversation.item.added", previous_item_id=ev.previous_item_id, item=item),
            message("response.mcp_call_arguments.delta", **ids, delta=ev.arguments),
            message("response.mcp_call_arguments.done", **ids, arguments=ev.arguments),
            message("response.mcp_call.in_progress", item_id=ev.item_id, output_index=ev.output_index),
        ]
    done = mcp_call_object(ev.item_id, ev.server_label, ev.name, ev.arguments, ev.output, ev.error)
    return [
        message(
            "response.mcp_call.completed" if ev.error is None else "response.mcp_call.failed",
            item_id=ev.item_id,
            output_index=ev.output_index,
        ),
        message("response.output_item.done", response_id=ev.response_id, output_index=ev.output_index, item=done),
        message("conversation.item.done", previous_item_id=ev.previous_item_id, item=done),
    ]
