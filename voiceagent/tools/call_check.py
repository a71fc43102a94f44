"""Whether the user's last words ask for a tool, judged as if they opened the conversation.

A small model follows the conversation it reads more than the words of its last message: after
a few exchanges answered in words, asked "Send an email to Anna saying I will be late." the
0.5B repeated the sentence back and the 1.5B said "I've sent an email to Anna", neither calling
the tool they were offered; the same sentence as a conversation's first message drew the right
call from both (benchmarks/eval_long_conversation.py; docs/decisions/tool-calls.md, "Calls later in
a conversation").

So, later in a conversation, whether to call is decided on the prompt the turn would have had
as the first of its conversation: the system message (the instructions and the tool listing)
and the user's last message, nothing between (:func:`check_messages`).  One token is generated
there, with the same first-token bias a turn gets; when it opens a call (:func:`opens_call`),
the turn itself is asked with ``tool_choice`` "required", on its whole conversation, so *which*
tool and its arguments still come from everything said.  When it does not, the turn is asked
as before ("auto"): the check only ever adds a call, so a follow-up that needs the history to be
a request ("And in London?") is still the turn's own decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from voiceagent.tools.spec import Message, ToolCall

__all__ = ["CALL_STARTS", "check_messages", "opens_call"]

CALL_STARTS = ("<", "`", "{")
"""How a reply that makes a call begins when it is read as text: the template's ``<tool_call>``
tag, a Markdown fence or a bare JSON object (the shapes :mod:`voiceagent.tools.format` reads as calls)."""


def check_messages(messages: Sequence[Message]) -> list[Message] | None:
    """The prompt to decide on: the leading system messages and the last message, when that is
    the user's and something stands between them (an assistant reply, a call, earlier user
    words); None when there is nothing to check (a first turn already is that prompt; a prompt
    that ends with a tool's output or a system note answers a result)."""
    if not messages or messages[-1].role != "user":
        return None
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    if head >= len(messages) - 1:
        return None
    return [*messages[:head], messages[-1]]


def opens_call(pieces: Sequence[str | ToolCall]) -> bool:
    """Whether the first generated token (``pieces``: what the engine yielded for it, parsed)
    opens a call: a call came out whole, or the text begins as a call does (:data:`CALL_STARTS`)."""
    if any(isinstance(p, ToolCall) for p in pieces):
        return True
    text = "".join(p for p in pieces if isinstance(p, str)).lstrip()
    return text.startswith(CALL_STARTS)
