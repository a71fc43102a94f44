"""The tools a session's answers may use besides the client's: its MCP servers', the built-ins,
and on a phone session the call-control tools.

Only synchronous lookups and the built-ins' own (instant) runs live here, so the conversation
core can decide what a model's call is without I/O; the MCP calls themselves run in the shell.
"""

from __future__ import annotations

from voiceagent.conversation.mcp_servers import McpServers
from voiceagent.tools.builtin import BuiltinTools, TimerRequest
from voiceagent.tools.mcp import McpTool
from voiceagent.tools.phone import CallAction, PhoneTools
from voiceagent.tools.spec import Tool

__all__ = ["ToolBox"]


class ToolBox:
    """The session's MCP servers (as listed so far), the server's built-in tools (None: off) and
    a phone session's call-control tools (None: not a phone session).

    A client's own function of the same name always wins over all three."""

    def __init__(self, mcp: McpServers, builtin: BuiltinTools | None, phone: PhoneTools | None = None) -> None:
        self.mcp = mcp
        self._builtin = builtin
        self._phone = phone

    def offered(self, client_tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """``client_tools``, the tools of the session's MCP servers, the built-in tools, then the
        call-control tools: a name already offered is not offered again."""
        tools = (*client_tools, *(t.tool for t in self.mcp.tools() if all(c.name != t.tool.name for c in client_tools)))
        tools = tools if self._builtin is None else self._builtin.offered_with(tools)
        if self._phone is None:
            return tools
        return (*tools, *(t for t in self._phone.tools if all(o.name != t.name for o in tools)))

    def mcp_tool(self, name: str, client_tools: tuple[Tool, ...]) -> McpTool | None:
        """The MCP tool a call of ``name`` is for: one the client did not define a function of."""
        if any(t.name == name for t in client_tools):
            return None
        return self.mcp.find(name)

    def runs_here(self, name: str, client_tools: tuple[Tool, ...]) -> bool:
        """Whether the server itself runs a call of ``name``: a built-in or call-control tool the
        client did not define."""
        if any(t.name == name for t in client_tools):
            return False
        return (self._builtin is not None and self._builtin.handles(name)) or (self._phone is not None and self._phone.handles(name))

    def run(self, name: str, arguments: str) -> tuple[str, TimerRequest | CallAction | None]:
        """Run ``name`` here: its output (a failure as a JSON ``error``) and the timer it set or
        what the call must do."""
        if self._builtin is not None and self._builtin.handles(name):
            return self._builtin.call(name, arguments)
        assert self._phone is not None, "runs_here() first"
        return self._phone.call(name, arguments)
