"""Every prompt string the server writes itself, in one place: the default instructions and reply
examples, and the lines it adds to one answer's prompt (never to the history).

The tools' own instruction (:data:`~voiceagent.tools.spec.CALL_TOOLS`) stays with the tool
formats, which depend on nothing else of the project."""

from __future__ import annotations

__all__ = [
    "ACKNOWLEDGEMENTS",
    "ANSWER_FROM_TOOLS",
    "DEFAULT_EXAMPLES",
    "DEFAULT_INSTRUCTIONS",
    "IDLE_PROMPT",
    "LIVE_ACKNOWLEDGEMENT",
    "LIVE_COMMENTARY",
    "LIVE_THINKING",
    "MCP_APOLOGY",
    "SILENT_CALLEE",
    "parse_examples",
    "timer_note",
]

DEFAULT_INSTRUCTIONS = (
    "You are a friendly voice assistant in a spoken conversation. "
    "Answer in one or two short, complete sentences of plain spoken English. "
    "Never use lists, markdown, code or emojis."
)

# Reply-style examples for llm.examples, off by default: they helped only the questions they were
# written for (the figures: docs/decisions/reply-examples.md).
DEFAULT_EXAMPLES = (
    "User: I'm Alex.\n"
    "Assistant: Nice to meet you, Alex!\n"
    "User: How many minutes are in an hour?\n"
    "Assistant: There are 60 minutes in an hour.\n"
    "User: Remind me to call the bank tomorrow.\n"
    "Assistant: I can't set reminders yet, but don't forget to call the bank tomorrow.\n"
)


def parse_examples(text: str) -> tuple[tuple[str, str], ...]:
    """``(user, assistant)`` pairs from ``llm.examples``: lines ``User: ...`` and ``Assistant: ...``
    taking turns, user first (blank lines ignored).  Raises ValueError saying which line is wrong."""
    pairs: list[tuple[str, str]] = []
    user: str | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        role, sep, said = line.partition(":")
        role, said = role.strip().lower(), said.strip()
        if not sep or role not in ("user", "assistant") or not said:
            raise ValueError(f"line {n} must be 'User: ...' or 'Assistant: ...' with some words")
        if (role == "user") != (user is None):
            raise ValueError(f"line {n}: User and Assistant lines must take turns, User first")
        if user is None:
            user = said
        else:
            pairs.append((user, said))
            user = None
    if user is not None:
        raise ValueError("the last User line has no Assistant line after it")
    return tuple(pairs)


ANSWER_FROM_TOOLS = "Answer the user now, in one short spoken sentence, from the tool result above."
"""Closes a prompt that ends with tool outputs.  Without a word on what to do with them, the 0.5B
model mostly writes another call (often as text, which would be spoken); this line turned that
into a spoken answer in every case tried (tests/integration/test_tools.py)."""

ACKNOWLEDGEMENTS = ("Let's see.", "Well,", "Hmm,")
"""What the agent says while a late answer is still being thought (``llm.acknowledge_ms``), in
turn: short, so the answer is not kept waiting behind it."""

LIVE_ACKNOWLEDGEMENT = (
    " You have handed the user's request on and the answer is not back yet: in a few words, tell the "
    "user you are looking into it. Do not answer the request itself."
)
"""A GPT-Live delegation's automatic spoken acknowledgement (one answer's prompt, out of the history)."""

LIVE_COMMENTARY = "Tell the user this now, briefly and in your own words: {content}"
"""Commentary a GPT-Live application appends for the whole session (``delegation_id`` null): the
closing message of that answer's prompt.  At the end of the instructions instead, after a spoken
question and its answer, the 0.5B model refused ("I'm sorry, but I can't assist with that.") in 11
of 12 contexts tried; as the prompt's last message it said it in 12 of 12."""

LIVE_THINKING = "Background for later answers (do not read it out): {content}"
"""Silent context a GPT-Live application appends (``session.thinking.append``): joins the instructions."""

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


SILENT_CALLEE = (
    " The call has been answered, but nobody has said anything yet: in one short sentence, greet them and say why you are calling."
)
"""Closes the instructions of the first words of a placed call whose callee has said nothing
(answering-machine detection's ``unknown``): without a word on it, the model has no turn to answer."""
