"""A session's MCP servers: one connection each, their tools listed, their calls run.

The client names servers with ``{"type": "mcp", ...}`` tools in ``session.update``;
:meth:`McpServers.configure` keeps the connections of servers still named, closes the others and
lists the tools of new ones in the background, telling the client (``mcp_list_tools.*`` and an
``mcp_list_tools`` item).  A turn's prompt waits for listings under way (:meth:`ready`, bounded
by the listing's timeout), so a question asked right after ``session.update`` is offered the
server's tools.  A server that cannot be listed offers none and is reported with an ``error``.

Cancellation: :meth:`aclose` cancels the listings under way, waits for them and closes every
connection; :meth:`call` lets ``CancelledError`` through untouched (its request is cancelled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from voiceagent.clock import Clock
from voiceagent.conversation.history import new_id
from voiceagent.events import ErrorEvent, Event, McpToolsListed
from voiceagent.pipeline import Generations
from voiceagent.tools.mcp import McpClient, McpError, McpServer, McpTool, check_host

__all__ = ["McpServers"]

log = logging.getLogger(__name__)


class McpServers:
    """The MCP servers of one session (``timeout_s``: ``tools.mcp_timeout_s``; ``allowed_hosts``:
    ``tools.mcp_hosts``, the internal hosts a client may name, see :func:`check_host`)."""

    def __init__(
        self,
        session_id: str,
        clock: Clock,
        scope: Generations,
        emit: Callable[[Event], Awaitable[None]],
        timeout_s: float,
        allowed_hosts: frozenset[str] = frozenset(),
    ) -> None:
        self._id = session_id
        self._clock = clock
        self._scope = scope
        self._emit = emit
        self._timeout_s = timeout_s
        self._allowed = allowed_hosts
        self._clients: dict[McpServer, McpClient] = {}
        self._tools: dict[McpServer, tuple[McpTool, ...]] = {}
        self._listing: dict[McpServer, asyncio.Task[None]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def configure(self, servers: tuple[McpServer, ...]) -> None:
        """The session's servers are now ``servers``: list the new ones, and those whose listing
        failed, in the background; close those no longer named.  A server is the same only if
        nothing about it changed."""
        for server in [s for s in self._clients if s not in servers]:
            client = self._clients.pop(server)
            self._tools.pop(server, None)
            listing = self._listing.pop(server, None)
            if listing is not None:
                listing.cancel()
            task = asyncio.create_task(self._close(client, listing), name=f"{self._id}.mcp.close")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        for server in servers:
            if server not in self._clients:
                self._clients[server] = McpClient(server, self._timeout_s)
            listing = self._listing.get(server)
            if server not in self._tools and (listing is None or listing.done()):
                # New, or named again after its listing failed: (try to) list it now.
                self._listing[server] = asyncio.create_task(self._list(server), name=f"{self._id}.mcp.list")

    async def ready(self) -> None:
        """Return once no listing is under way (each is bounded by the timeout)."""
        pending = [t for t in self._listing.values() if not t.done()]
        if pending:
            await asyncio.wait(pending)

    def tools(self) -> tuple[McpTool, ...]:
        """The tools listed so far, server by server in the client's order; a name offered
        twice is the first server's."""
        out: list[McpTool] = []
        for server in self._clients:
            out += [t for t in self._tools.get(server, ()) if all(o.tool.name != t.tool.name for o in out)]
        return tuple(out)

    def find(self, name: str) -> McpTool | None:
        """The listed tool called ``name``, if any."""
        return next((t for t in self.tools() if t.tool.name == name), None)

    async def call(self, tool: McpTool, arguments: Mapping[str, Any]) -> str:
        """Run ``tool`` on its server: its text result, or :class:`McpError`."""
        client = next((c for s, c in self._clients.items() if s.label == tool.server_label), None)
        if client is None:
            raise McpError("http_error", 503, f"{tool.server_label}: the server was removed from the session")
        await check_host(client.server.url, self._allowed)  # again: the name may resolve elsewhere now
        return await client.call(tool.tool.name, arguments)

    async def aclose(self) -> None:
        """Cancel the listings under way and close every connection; waits for all of it."""
        listings = list(self._listing.values())
        for task in listings:
            task.cancel()
        clients = list(self._clients.values())
        self._clients.clear()
        self._listing.clear()
        await asyncio.gather(*listings, *self._closing, return_exceptions=True)
        await asyncio.gather(*(c.aclose() for c in clients))

    # ------------------------------------------------------------------ internals

    async def _list(self, server: McpServer) -> None:
        item_id = new_id("item")
        await self._listed(item_id, server, "in_progress")
        client = self._clients[server]
        try:
            await check_host(server.url, self._allowed)
            tools = await client.list_tools()
        except McpError as exc:
            log.info("session %s: MCP server %s: listing failed: %s", self._id, server.label, exc.message)
            await self._listed(item_id, server, "failed")
            await self._emit(
                ErrorEvent(
                    t=self._clock.now(),
                    gen=self._scope.current,
                    session=self._id,
                    code="mcp_list_tools_failed",
                    message=f"the tools of MCP server {server.label!r} could not be listed, so none are offered: {exc.message}",
                    kind="server_error",
                )
            )
            return
        self._tools[server] = tools
        await self._listed(item_id, server, "completed", tools)

    async def _listed(self, item_id: str, server: McpServer, status: str, tools: tuple[McpTool, ...] = ()) -> None:
        await self._emit(
            McpToolsListed(
                t=self._clock.now(),
                gen=self._scope.current,
                session=self._id,
                item_id=item_id,
                server_label=server.label,
                status=status,
                tools=tools,
            )
        )

    @staticmethod
    async def _close(client: McpClient, listing: asyncio.Task[None] | None) -> None:
        if listing is not None:
            await asyncio.wait({listing})
        await client.aclose()
