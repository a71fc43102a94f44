"""Remote tools on an MCP server (a Realtime ``{"type": "mcp", ...}`` tool), over Streamable HTTP.

:class:`McpServer` is what a client asked for (label, URL, allowed tools, headers);
:class:`McpClient` is one connection to it: it lists the server's tools (those allowed) as
:class:`McpTool` and calls them, each within ``timeout_s``.  Every failure (the server down, an
HTTP or JSON-RPC error, a tool that reports an error, a timeout) is raised as :class:`McpError`,
whose ``kind`` is the Realtime ``mcp_call`` error type, so a caller has one thing to catch.

One client session per connection, owned by one task: the ``mcp`` package's transport runs in
anyio task groups, which must be entered and left by the same task; requests are then made from
whichever task asks (a tool call's own task), and cancelling that task cancels the request.

A low layer: it imports nothing of voiceagent's but :mod:`.spec`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from voiceagent.tools.spec import Tool

__all__ = ["DEFAULT_TIMEOUT_S", "McpClient", "McpError", "McpServer", "McpTool", "result_text"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
"""How long connecting and listing, or one call, may take before it counts as failed: a listener
waits in silence meanwhile, so a few seconds, not the transport's 300 s read timeout."""
_CLOSE_S = 2.0  # how long a closing connection may take to say goodbye (DELETE) before it is cancelled
_MAX_OUTPUT = 8000  # characters of a tool's result kept for the model: its prompt window is small


@dataclass(frozen=True, slots=True)
class McpServer:
    """An MCP server a session may use: ``label`` names it in events, ``allowed_tools`` (None:
    all) limits what the model is offered, ``headers`` go with every HTTP request (a token)."""

    label: str
    url: str
    allowed_tools: tuple[str, ...] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    description: str = ""


def _internal(address: str) -> bool:
    """True for an address a server should not be sent to on a client's word: loopback, private,
    link-local, unspecified, multicast or reserved (the cloud metadata service is link-local)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip.is_reserved


async def check_host(url: str, allowed: frozenset[str]) -> None:
    """Refuse (:class:`McpError`, ``http_error`` 403) an MCP server whose host is, or resolves
    to, an internal address, unless ``host`` or ``host:port`` is in ``allowed`` (lower case):
    a client must not make the server reach its own network (SSRF).  The name is resolved with
    the event loop's resolver (not blocking); a name that does not resolve is refused as 503.
    Cancellation passes through."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if host in allowed or f"{host}:{port}" in allowed:
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise McpError("http_error", 503, f"{host}: the name does not resolve ({exc})") from exc
    internal = sorted({str(info[4][0]) for info in infos if _internal(str(info[4][0]))})
    if host == "localhost" or internal:
        raise McpError(
            "http_error",
            403,
            f"{host} is an internal address ({', '.join(internal) or 'localhost'}): not reached on a client's word; "
            "an operator allows it with tools.mcp_hosts",
        )


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool of an MCP server, as the model is offered it (``tool``) and as the client's
    ``mcp_list_tools`` item shows it (``input_schema``, ``annotations``)."""

    server_label: str
    tool: Tool
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any] | None = None


class McpError(Exception):
    """A listing or a call that did not give a result.  ``kind`` and ``code`` are the Realtime
    ``mcp_call.error``'s: ``http_error`` (unreachable, an HTTP status, a timeout: 503, the
    status, 504), ``protocol_error`` (a JSON-RPC error code), ``tool_execution_error`` (the tool
    itself reported an error; code 0)."""

    def __init__(self, kind: Literal["http_error", "protocol_error", "tool_execution_error"], code: int, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code
        self.message = message

    def error_object(self) -> dict[str, Any]:
        """The Realtime ``mcp_call`` item's ``error``."""
        if self.kind == "tool_execution_error":
            return {"type": self.kind, "message": self.message}
        return {"type": self.kind, "code": self.code, "message": self.message}


class McpClient:
    """One connection to one MCP server over Streamable HTTP.

    It connects on first use (:meth:`list_tools` or :meth:`call`) and again on the next use after
    the connection failed.  Each use is bounded by ``timeout_s`` and raises :class:`McpError`;
    cancelling a use cancels its request and leaves the connection usable.  :meth:`aclose` ends
    the session with the server and waits for it (at most a couple of seconds)."""

    def __init__(self, server: McpServer, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.server = server
        self.timeout_s = timeout_s
        self._owner: asyncio.Task[None] | None = None
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._error: BaseException | None = None

    async def list_tools(self) -> tuple[McpTool, ...]:
        """The server's tools that ``allowed_tools`` lets through, in the server's order."""
        async with self._bounded("listing the tools"):
            client = await self._connected()
            tools = []
            cursor: str | None = None
            while True:  # a server may page its listing
                page = await client.list_tools(cursor=cursor)
                tools += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    break
        allowed = self.server.allowed_tools
        out = []
        for t in tools:
            if allowed is not None and t.name not in allowed:
                continue
            schema = dict(t.input_schema) if isinstance(t.input_schema, Mapping) else {"type": "object", "properties": {}}
            annotations = t.annotations.model_dump(exclude_none=True) if t.annotations is not None else None
            out.append(McpTool(self.server.label, Tool(t.name, t.description or "", _untitled(schema)), schema, annotations))
        return tuple(out)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """The result of tool ``name`` as text for the model; :class:`McpError` when there is
        none (including a result the tool marks as an error)."""
        async with self._bounded(f"calling {name}"):
            client = await self._connected()
            result = await client.call_tool(name, dict(arguments))
        if result.is_error:
            raise McpError("tool_execution_error", 0, result_text(result) or f"{name} failed")
        return result_text(result)

    async def aclose(self) -> None:
        """End the session with the server (its owner task leaves the client's context) and wait."""
        self._closing.set()
        owner, self._owner = self._owner, None
        if owner is None:
            return
        await asyncio.wait({owner}, timeout=_CLOSE_S)
        if not owner.done():
            owner.cancel()  # the server does not answer the goodbye: stop waiting for it
            await asyncio.wait({owner})

    # ------------------------------------------------------------------ internals

    @contextlib.asynccontextmanager
    async def _bounded(self, what: str) -> AsyncIterator[None]:
        """``timeout_s`` on the block, and every error as :class:`McpError` (never
        ``CancelledError``, which passes untouched)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                yield
        except McpError:
            raise
        except TimeoutError:
            raise McpError("http_error", 504, f"{self.server.label}: no answer {what} within {self.timeout_s:g} s") from None
        except MCPError as exc:
            raise McpError("protocol_error", exc.code, f"{self.server.label}: {exc.error.message}") from None
        except Exception as exc:
            raise _failure(self.server.label, exc) from None

    async def _connected(self) -> Client:
        """The connected client, (re)connecting first if there is none."""
        if self._owner is None or self._owner.done():
            if self._closing.is_set():
                raise McpError("http_error", 503, f"{self.server.label}: the connection is closed")
            self._ready.clear()
            self._error = None
            self._owner = asyncio.create_task(self._own(), name=f"mcp.{self.server.label}")
        await self._ready.wait()
        if self._client is None:
            error = self._error or RuntimeError("the connection ended")
            raise _failure(self.server.label, error)
        return self._client

    async def _own(self) -> None:
        """Hold the connection open until :meth:`aclose` (or until it fails)."""
        try:
            # The transport's default read timeout is 300 s (a server may hold a stream open);
            # each use is bounded by timeout_s instead.
            timeout = httpx2.Timeout(self.timeout_s, read=300.0)
            async with (
                httpx2.AsyncClient(headers=dict(self.server.headers), timeout=timeout) as http,
                Client(streamable_http_client(self.server.url, http_client=http), mode="legacy") as client,
            ):
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:
            self._error = exc
            log.info("MCP server %s: connection ended: %s", self.server.label, _leaf(exc))
        finally:
            self._client = None
            self._ready.set()


def result_text(result: CallToolResult) -> str:
    """A tool result as text: its text parts, else its structured content as JSON, cut to a size
    a small model's prompt can hold."""
    texts = [c.text for c in result.content if isinstance(c, TextContent)]
    if texts:
        text = "\n".join(texts)
    elif result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    else:
        text = ", ".join(f"[{c.type}]" for c in result.content)
    return text[:_MAX_OUTPUT]


def _untitled(schema: Any) -> Any:
    """``schema`` without the ``title`` of each schema node (pydantic's ``"title": "City"``):
    words the model reads in every prompt that say nothing the property's name does not.  A
    property *named* ``title`` stays."""
    if isinstance(schema, Mapping):
        return {
            k: ({p: _untitled(s) for p, s in v.items()} if k == "properties" and isinstance(v, Mapping) else _untitled(v))
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_untitled(v) for v in schema]
    return schema


def _leaf(exc: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: anyio wraps a transport's failure."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _failure(label: str, exc: BaseException) -> McpError:
    leaf = _leaf(exc)
    if isinstance(leaf, McpError):
        return leaf
    if isinstance(leaf, MCPError):
        return McpError("protocol_error", leaf.code, f"{label}: {leaf.error.message}")
    if isinstance(leaf, httpx2.HTTPStatusError):
        return McpError("http_error", leaf.response.status_code, f"{label}: HTTP {leaf.response.status_code}")
    return McpError("http_error", 503, f"{label}: unreachable ({type(leaf).__name__}: {leaf})")
