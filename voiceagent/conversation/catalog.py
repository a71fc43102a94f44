"""The tools a session's answers may use besides the client's: its MCP servers' and the built-ins.

Only synchronous lookups and the built-ins' own (instant) runs live here, so the conversation
core can decide what a model's call is without I/O; the MCP calls themselves run in the shell.
"""

from __future__ import annotations

from voiceagent.conversation.mcp_servers import McpServers
from voiceagent.tools.builtin import BuiltinTools, TimerRequest
from voiceagent.tools.mcp import McpTool
from voiceagent.tools.spec import Tool

__all__ = ["ToolBox"]


class ToolBox:
    """The session's MCP servers (as listed so far) and the server's built-in tools (None: off).

    A client's own function of the same name always wins over both."""

    def __init__(self, mcp: McpServers, builtin: BuiltinTools | None) -> None:
        self.mcp = mcp
        self._builtin = builtin

    def offered(self, client_tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """``client_tools``, the tools of the session's MCP servers, then the built-in tools: a
        name already offered is not offered again."""
        tools = (*client_tools, *(t.tool for t in self.mcp.tools() if all(c.name != t.tool.name for c in client_tools)))
        return tools if self._builtin is None else self._builtin.offered_with(tools)

    def mcp_tool(self, name: str, client_tools: tuple[Tool, ...]) -> McpTool | None:
        """The MCP tool a call of ``name`` is for: one the client did not define a function of."""
        if any(t.name == name for t in client_tools):
            return None
        return self.mcp.find(name)

    def runs_here(self, name: str, client_tools: tuple[Tool, ...]) -> bool:
        """Whether the server itself runs a call of ``name`` (a built-in the client did not define)."""
        return self._builtin is not None and self._builtin.runs(name, client_tools)

    def run(self, name: str, arguments: str) -> tuple[str, TimerRequest | None]:
        """Run built-in ``name``: its output (a failure as a JSON ``error``) and the timer it set."""
        assert self._builtin is not None, "runs_here() first"
        return self._builtin.call(name, arguments)
