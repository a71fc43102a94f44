"""Whether a call's arguments come from the conversation or from nowhere.

Offered tools with ``tool_choice`` "auto", the 0.5B answered "Hello.", "Yes.", "Say hi." and
"What time is it?" with ``get_weather({"city": "London"})``: a city nobody said
(benchmarks/eval_call_check.py; docs/decisions/tool-calls.md, "Calls nobody asked for").  A call
whose text arguments share no word with anything said in the conversation (the user's words, the
agent's replies, the tools' results; not the system message, whose instructions name many
things) was not asked for.  The stage answers such a turn in words, as it does a call of a tool
that is not offered.

Only text counts: numbers are often worked out rather than repeated ("five minutes" is
``{"seconds": 300}``), so a call whose arguments hold no text word (none, numbers, flags, or
words such as "the") is always grounded.  The price: a text argument the model worked out
from words it does not share ("NYC" → ``{"city": "New York"}``) reads as ungrounded.  A deployment
whose tools take such arguments turns the rule off (``llm.call_grounding``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence

from voiceagent.tools.spec import Message, Tool

__all__ = ["STOPWORDS", "grounded", "words"]

STOPWORDS = frozenset(
    """the and for you your that this with from are was were have has had will would can could not all any
    but our out about what when where which who how why please him her his hers its they them their there
    then than into onto over under just also very some more most such only own same too yes yeah okay
    sure""".split()  # noqa: SIM905 (a list literal of 64 words is harder to read)
)
"""Words too common to show that an argument came from the conversation."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text: str) -> set[str]:
    """The lower-case words of ``text`` that can tie an argument to what was said: three
    characters or more, not in :data:`STOPWORDS`."""
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in STOPWORDS}


def _texts(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def _said(messages: Sequence[Message]) -> set[str]:
    out: set[str] = set()
    for m in messages:
        if m.role == "system":
            continue
        out |= words(m.content)
        for c in m.tool_calls:
            out |= words(c.arguments)
    return out


def _declared(tool: Tool | None, parsed: object) -> object:
    """The arguments the tool declares (all of them when it is not known): keys it does not
    declare are argument checking's to refuse (a small model writes the schema itself into
    ``get_time``'s empty arguments), not a sign of a call nobody asked for."""
    if tool is None or not isinstance(parsed, dict):
        return parsed
    properties = tool.parameters.get("properties")
    if not isinstance(properties, dict):
        return parsed
    return {k: v for k, v in parsed.items() if k in properties}


def grounded(arguments: str, messages: Sequence[Message], tool: Tool | None = None) -> bool:
    """Whether the call's ``arguments`` (JSON text) for ``tool`` share a word with what
    ``messages`` say outside the system message; True when its declared arguments hold no text
    word to judge by, or the text does not parse (argument checking reports those).  A tool with
    a :attr:`~voiceagent.tools.spec.Tool.cue` also needs the user's last message to match it."""
    if tool is not None and tool.cue:
        last = next((m.content for m in reversed(messages) if m.role == "user"), "")
        if re.search(tool.cue, last, re.IGNORECASE) is None:
            return False
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return True
    mine = set().union(*(words(t) for t in _texts(_declared(tool, parsed))))
    if not mine:
        return True
    said = _said(messages)
    # A shared stem counts too ("Berlin's" / "Berlin", "emails" / "email").
    return bool(mine & said) or bool(_stems(mine) & _stems(said))


def _stems(found: set[str]) -> set[str]:
    return {w[:5] for w in found if len(w) >= 5}
