"""The retry policy for a small model's tool calls.

A call whose arguments cannot be repaired (:mod:`voiceagent.tools.args`) is asked for once more
with its tool named, so the engine constrains the arguments to the tool's schema; a call the model
opened without naming a tool is asked for with the only offered tool named, or ``"required"``
among several.  A call repeating one already answered since the user last spoke is not made again
(a small model may call the same tool again and again).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from voiceagent.tools.spec import Message, Tool, ToolCall

__all__ = ["answered_calls", "canonical", "nameless", "retried_call", "retry_choice"]


def canonical(arguments: str) -> str:
    """A call's arguments compared by meaning: JSON re-dumped with sorted keys (text that is not
    JSON, stripped)."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments.strip()


def answered_calls(messages: Sequence[Message]) -> set[tuple[str, str]]:
    """(name, arguments) of the calls answered since the prompt's last user message: the model
    has their results in front of it."""
    last_user = max((n for n, m in enumerate(messages) if m.role == "user"), default=-1)
    outputs = {m.tool_call_id for m in messages[last_user + 1 :] if m.role == "tool"}
    return {(c.name, canonical(c.arguments)) for m in messages[last_user + 1 :] for c in m.tool_calls if c.call_id in outputs}


def nameless(call: ToolCall) -> bool:
    """A call the model opened without naming a tool (the 1.5B's empty ``<tools></tools>``)."""
    return not call.name.strip()


def retry_choice(call: ToolCall, tools: Sequence[Tool]) -> str:
    """The ``tool_choice`` that asks once more for ``call``: its own tool, or for a nameless call
    the only offered tool, or ``"required"`` among several."""
    if not nameless(call):
        return call.name
    return tools[0].name if len(tools) == 1 else "required"


def retried_call(call: ToolCall, second: ToolCall | None, tools: Sequence[Tool]) -> ToolCall | None:
    """The answer ``second`` to :func:`retry_choice`'s request as ``call`` (its call id kept), or
    None when it is no answer: no call, another tool, or for a nameless call a tool not offered."""
    if second is None or not (second.name == call.name or (nameless(call) and any(t.name == second.name for t in tools))):
        return None
    return ToolCall(call.call_id, second.name, second.arguments)
