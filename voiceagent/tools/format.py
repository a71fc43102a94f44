"""Tools as chat templates and OpenAI-style servers see them, and calls as models write them.

* :func:`chat_messages` / :func:`tool_dicts` render prompt messages and tools as the OpenAI
  chat format that Hugging Face chat templates (Qwen2.5's, rendered by llama.cpp's Jinja
  formatter or a tokenizer) and OpenAI-compatible servers take.  Templates print a call's
  arguments with ``tojson``, so for them arguments are objects; on the wire they are strings.
* :class:`HermesToolParser` reads the tool-call format of Qwen2.5 (and Hermes-style models;
  vLLM's ``hermes`` parser reads the same): ``<tool_call>\\n{"name": ..., "arguments": {...}}
  \\n</tool_call>`` in the generated text.  Text outside the tags passes through as it streams;
  only a possible start of a tag is held back.  Qwen2.5-Coder-1.5B often writes the call inside
  ``<tools>`` … ``</tools>`` instead (the tag its chat template puts around the tool signatures):
  read as a call too, else the JSON would be spoken.  When tools are offered, a reply that *is*
  a call without tags is read as one too: a bare ``{"name": …, "arguments": …}`` of an offered
  tool, the same inside a Markdown code fence (```` ```json ````), or with doubled braces
  (``{{"name": …}}``, the template's placeholder copied); the 1.5B writes all three.  So is a
  bare object of exactly that shape naming a tool nobody offered (the 0.5B invents them): the
  caller drops it rather than have its JSON spoken.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from voiceagent.tools.args import loads_lenient
from voiceagent.tools.spec import Message, Tool, ToolCall

__all__ = ["NO_CALL_GBNF", "HermesToolParser", "call_prefill", "chat_messages", "new_call_id", "tool_dicts"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"

NO_CALL_GBNF = r"root ::= [A-Za-z0-9] [^\x00]*"
"""A grammar for a reply that does not open with a call (tool_choice "none" with tools in the
prompt): no JSON, tag or code fence first; after that, free."""
# Tag pairs a call is read from: the Hermes format, then the one the 1.5B Coder also writes.
_TAGS = ((OPEN, CLOSE), ("<tools>", "</tools>"))
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_ARGS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def call_prefill(tools: Sequence[Tool], tool_choice: str) -> str:
    """Text to put after the generation prompt so that the model must call: ``required`` opens a
    call, a tool's name also writes the name; empty for ``auto``/``none``."""
    if not tools or tool_choice in ("auto", "none"):
        return ""
    if tool_choice == "required":
        return f"{OPEN}\n"
    return f'{OPEN}\n{{"name": {json.dumps(tool_choice)}, "arguments": '


def tool_dicts(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}} for t in tools
    ]


def chat_messages(messages: Sequence[Message], *, arguments_as_text: bool = False) -> list[dict[str, Any]]:
    """``messages`` as OpenAI chat dicts; a call's arguments as an object (for a chat template)
    or as JSON text (``arguments_as_text``, for an OpenAI-compatible server)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            d["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments if arguments_as_text else _object(c.arguments)},
                }
                for c in m.tool_calls
            ]
        if m.role == "tool":
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def _object(arguments: str) -> Any:
    value = loads_lenient(arguments)
    return value if isinstance(value, dict) else {}


class HermesToolParser:
    """Split a stream of generated text into text pieces and :class:`ToolCall` s.

    ``push`` returns what can be passed on now; ``flush`` (at the end of the generation) returns
    the rest, including a call whose closing tag never came (a model that stops right after the
    JSON).  A call whose JSON cannot be read at all is still returned, with ``name`` as far as it
    could be found and the raw text as ``arguments``, so the caller can report it.
    """

    def __init__(self, *, open_tag: bool = False, names: Collection[str] = ()) -> None:
        self._buf = ""
        self.open_tag_in_prompt = open_tag
        """The prompt itself opened a call (tool_choice "required"): the text starts inside it."""
        self._inside = open_tag
        self._close = CLOSE  # the closing tag of the call we are inside
        self._names = frozenset(names)
        self._fresh = True  # nothing but whitespace since the start or the last call
        self._bare = False  # inside a bare JSON object that may be a call
        self._fence = ""  # the code fence opening that bare object, given back if it is no call
        self._leftover = False  # after a fenced or doubled-brace call: its closing "}"/fence is no text

    def push(self, text: str) -> list[str | ToolCall]:
        self._buf += text
        out: list[str | ToolCall] = []
        while self._buf:
            if self._leftover:
                rest = self._buf.lstrip().lstrip("}").lstrip()
                if not rest or (len(rest) < len(_FENCE) and _FENCE.startswith(rest)):
                    self._buf = rest
                    break  # what follows decides
                self._buf = rest[len(_FENCE) :] if rest.startswith(_FENCE) else rest
                self._leftover = False
                continue
            if self._inside:
                end = self._buf.find(self._close)
                if end < 0:
                    break
                out.append(parse_call(self._buf[:end]))
                self._buf = self._buf[end + len(self._close) :]
                self._inside, self._fresh = False, True
                continue
            if self._bare:
                end = _object_end(self._buf)
                if end < 0 and len(self._buf) < _MAX_BARE:
                    break
                end = end if end >= 0 else len(self._buf)
                out.append(self._bare_result(self._buf[:end]))
                self._buf = self._buf[end:]
                self._bare = False
                continue
            if self._fresh and self._names:
                stripped = self._buf.lstrip()
                if not stripped:
                    break  # only whitespace so far: what follows decides
                if stripped[0] == "{":
                    self._buf, self._bare = stripped, True
                    continue
                if stripped[0] == "`":
                    opened = _FENCE_OPEN.match(stripped)
                    if opened is not None:
                        self._fence, self._buf, self._bare = opened.group(0), stripped[opened.end() :], True
                        continue
                    if _FENCE_START.fullmatch(stripped):
                        break  # may still open a fenced call
            found = [(at, tags) for tags in _TAGS if (at := self._buf.find(tags[0])) >= 0]
            if found:
                start, (open_tag, self._close) = min(found, key=lambda f: f[0])
                if self._buf[:start]:
                    out.append(self._buf[:start])
                self._buf = self._buf[start + len(open_tag) :]
                self._inside = True
                continue
            keep = _partial_tag(self._buf)
            if len(self._buf) > keep:
                out.append(self._buf[: len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep :]
                self._fresh = False
            break
        return out

    def _bare_result(self, body: str) -> str | ToolCall:
        """A bare object: a call if it names an offered tool or has a call's shape (a name and its
        arguments, nothing else: the 0.5B invents tools such as ``get_largest_planet``; spoken,
        that JSON was the whole answer, so it goes to the caller as the call it is, to reject),
        else the text it was (with the fence that opened it)."""
        fence, self._fence = self._fence, ""
        call = self._as_call(body)
        doubled = call is None and body.startswith("{{") and body.rstrip().endswith("}}")
        if doubled:
            call = self._as_call(body.strip()[1:-1])
        if call is None:
            self._fresh = False
            return fence + body
        self._fresh = True
        self._leftover = bool(fence) or doubled
        return call

    def _as_call(self, body: str) -> ToolCall | None:
        value = loads_lenient(body)
        if isinstance(value, dict) and isinstance(value.get("name"), str) and set(value) <= {"name", "arguments", "parameters"}:
            return parse_call(body) if value["name"] in self._names or len(value) > 1 else None
        named = _BARE_NAME.match(body)
        if value is None and named is not None and named.group(1) in self._names:
            return parse_call(body)  # a call with broken JSON: the caller repairs or asks again
        return None

    def flush(self) -> list[str | ToolCall]:
        rest, self._buf = self._buf, ""
        # After a fenced or doubled-brace call push() holds back at most the start of its closing
        # fence ("`", "``"), which goes out as the text it is, like any unfinished tag.
        self._leftover = False
        if self._inside:
            self._inside = False
            return [parse_call(rest)] if rest.strip() else []
        if self._bare:
            self._bare = False
            return [self._bare_result(rest)]
        return [rest] if rest else []


_BARE_NAME = re.compile(r'\{\s*"name"\s*:\s*"([^"]*)"')
_FENCE = "```"
_FENCE_OPEN = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n?\s*(?=\{)", re.IGNORECASE)
# A start that may still become a fence before an object ("`", "```js", "```json\n  ").
_FENCE_START = re.compile(r"`{1,2}|```[ \t]*(?:j|js|jso|json)?[ \t]*\r?\n?\s*", re.IGNORECASE)
_MAX_BARE = 8000  # a bare object longer than this is text, whatever it turns out to be


def _object_end(text: str) -> int:
    """Index just past the JSON object that ``text`` starts with (strings respected); -1 while
    it is still open."""
    depth = 0
    quote = False
    escaped = False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quote = False
        elif ch == '"':
            quote = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _partial_tag(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of an opening tag."""
    longest = max(len(open_tag) for open_tag, _ in _TAGS)
    for n in range(min(longest - 1, len(text)), 0, -1):
        if any(open_tag.startswith(text[-n:]) for open_tag, _ in _TAGS):
            return n
    return 0


def parse_call(body: str) -> ToolCall:
    """One call's ``{"name": ..., "arguments": ...}``; arguments kept as the model wrote them
    when the whole cannot be read."""
    value = loads_lenient(body)
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        args = value.get("arguments", value.get("parameters", {}))
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return ToolCall(new_call_id(), value["name"], text)
    name = _NAME.search(body)
    args_at = _ARGS.search(body)
    raw = body[args_at.end() :].strip() if args_at else body.strip()
    if args_at and raw.endswith("}"):
        raw = raw[:-1].rstrip()  # the outer object's brace
    return ToolCall(new_call_id(), name.group(1) if name else "", raw)
