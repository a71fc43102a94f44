"""The tool spec: what the engines are offered (:class:`Tool`), what they yield when the model
calls one (:class:`ToolCall`), and the prompt messages that carry calls and their outputs
(:class:`Message`).  Plain data, no behaviour beyond :func:`with_tools`; every layer may import it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["CALL_TOOLS", "Message", "Tool", "ToolCall", "ToolChoice", "with_tools"]


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call: OpenAI's ``{"type": "function", ...}`` tool, flattened."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    """A JSON Schema of the arguments object."""
    cue: str = ""
    """A server tool's regular expression that the user's last message must match for a call to
    count (:func:`voiceagent.tools.grounding.grounded`): a call with no arguments to ground, such
    as hanging up, is otherwise the model's guess alone.  Never sent to a model."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made: ``arguments`` is JSON text (an object, once the stage has checked it)."""

    call_id: str
    name: str
    arguments: str


ToolChoice = str
"""``auto`` (the model decides), ``none`` (no calls), ``required`` (at least one call), or a tool's name."""


@dataclass(frozen=True, slots=True)
class Message:
    """One prompt message.  An assistant message may carry the calls it made (``tool_calls``); a
    ``tool`` message is the output of the call named by ``tool_call_id``."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


CALL_TOOLS = "When one of your tools can answer, call it."
"""Ends the instructions of a prompt that offers tools (see :func:`with_tools`)."""


def with_tools(instructions: str, tools: Sequence[Tool]) -> str:
    """The system text of a prompt offering ``tools``: ``instructions``, then :data:`CALL_TOOLS`
    when any are offered (why: docs/decisions/tool-calls.md).  The session,
    the start-up priming and benchmarks/eval_tools.py all render it here, so the prefix that start-up
    warms is the one a session then asks for."""
    return f"{instructions} {CALL_TOOLS}" if tools else instructions
