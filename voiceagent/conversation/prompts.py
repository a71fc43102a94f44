"""The words the server adds to a prompt on its own, in one place.

Each is in the prompt of one answer only, never in the history."""

from __future__ import annotations

__all__ = ["ANSWER_FROM_TOOLS", "IDLE_PROMPT", "MCP_APOLOGY", "timer_note"]

ANSWER_FROM_TOOLS = "Answer the user now, in one short spoken sentence, from the tool result above."
"""Closes a prompt that ends with tool outputs.  Without a word on what to do with them, the 0.5B
model mostly writes another call (often as text, which would be spoken); this line turned that
into a spoken answer in every case tried (tests/integration/test_tools.py)."""

IDLE_PROMPT = " The user has said nothing for a while: in one short sentence, ask whether they are still there or invite them to go on."
"""Added to the instructions of the response an idle timeout starts (``idle_timeout_ms``): the
item it answers is silence, and without a word on it a small model answers the silence itself."""

MCP_APOLOGY = (
    " The tool you called ({tools}) failed; its error is above."
    " Apologise to the user in one short spoken sentence: you could not get that information right now."
)
"""Ends the instructions of the answer after a failed MCP call: a small model given only the
error tends to recite it, or to call again."""


def timer_note(label: str, seconds: int) -> str:
    """Added to the instructions of the response that announces a built-in timer going off."""
    return f" A timer the user set ({label}, {seconds} s) has just gone off: tell them so now, in one short sentence."
