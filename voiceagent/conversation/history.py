"""The conversation history, as the model sees it and as the listener heard it.

Assistant items are built clause by clause from what playout actually sent, with each clause's
audio length; a barge-in or a client's ``conversation.item.truncate`` sets ``heard_ms`` and the
item's text becomes what was heard (whole clauses, then a word-boundary prefix of the clause that
was playing).  Items are only appended or cut, never re-rendered, so the LLM prompt of the next
turn extends the previous one and llama.cpp reuses its KV cache.

Tool calls: a response's ``function_call`` items follow its spoken message; each call gets
exactly one output item, placed right after the call (and its siblings), whenever it arrives:
the client's, or a synthetic "cancelled" one when the next answer starts before the client's
came (:meth:`History.answer_unanswered`), so the model's chat template never sees a call without
its result.

MCP calls (the server runs them: :class:`McpCallItem`) carry their own result or error; the
prompt shows each as a call followed by its result, like a function call and its output.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from voiceagent.backends.protocols import example_messages
from voiceagent.settings import InputItem
from voiceagent.text.clauses import cut_to_fraction
from voiceagent.tools.spec import Message, ToolCall

__all__ = [
    "CANCELLED_OUTPUT",
    "AssistantItem",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "History",
    "McpCallItem",
    "SpokenClause",
    "UserItem",
    "input_messages",
    "new_id",
]

CANCELLED_OUTPUT = json.dumps({"error": "cancelled: the conversation went on before this call's result arrived"})
"""The synthetic output of a call that was never answered."""

_counter = itertools.count(1)


def new_id(prefix: str) -> str:
    """A short id unique within this process (``item_…``, ``resp_…``, ``event_…``)."""
    return f"{prefix}_{next(_counter):06d}"


@dataclass
class UserItem:
    id: str
    text: str
    gen: int = -1
    """The generation of the response this turn started (-1: none)."""
    role: str = "user"


@dataclass
class SpokenClause:
    text: str
    audio_ms: float = 0.0
    """Audio of this clause sent to the listener so far."""
    expected_ms: float = 0.0
    """The clause's whole audio length, when known (playout sends it ahead in pieces)."""
    ack: bool = False
    """An acknowledgement said while the answer was thought: heard, so its audio counts, but not
    the answer, so its words stay out of the text the model reads back (it would learn to open
    every answer with one)."""


@dataclass
class AssistantItem:
    id: str
    gen: int
    clauses: list[SpokenClause] = field(default_factory=list)
    heard_ms: float | None = None
    status: str = "in_progress"
    role: str = "assistant"
    heard_by_client: bool = False
    """True once the client itself said how much it played (``conversation.item.truncate``)."""

    def add_clause(self, text: str, expected_ms: float = 0.0, *, ack: bool = False) -> None:
        self.clauses.append(SpokenClause(text, expected_ms=expected_ms, ack=ack))

    def add_audio(self, ms: float) -> None:
        if not self.clauses:
            self.add_clause("")
        self.clauses[-1].audio_ms += ms

    @property
    def audio_ms(self) -> float:
        return sum(c.audio_ms for c in self.clauses)

    @property
    def full_text(self) -> str:
        return "".join(c.text for c in self.clauses if not c.ack).strip()

    @property
    def text(self) -> str:
        if self.heard_ms is None:
            return self.full_text
        out = ""
        pos = 0.0
        for clause in self.clauses:
            text, ms = clause.text, clause.audio_ms
            # Words are spread over the clause's whole audio, not over the part sent so far: a
            # clause whose sending stopped midway (a pause, a cut) was not heard whole, even when
            # all that was sent of it was.
            total = max(ms, clause.expected_ms)
            if pos + total <= self.heard_ms + 1.0:
                out += "" if clause.ack else text
                pos += ms
                continue
            if clause.ack:
                break
            if total > 0:
                part = cut_to_fraction(text, (self.heard_ms - pos) / total)
                if part:
                    out = out.rstrip() + " " + part if out.strip() else part
            break
        return out.strip()

    def cut(self, heard_ms: float, *, by_client: bool = False) -> None:
        """Keep only what was heard.

        The server's own figure (``by_client=False``, its playout estimate at a barge-in)
        is provisional: the first figure from the client replaces it, larger or smaller,
        because only the client knows what its speaker played. After that a figure only
        cuts further: what was once reported unheard never comes back.
        """
        heard = max(0.0, min(heard_ms, self.audio_ms))
        if heard >= self.audio_ms - 1.0:
            heard = self.audio_ms  # within a millisecond of the end: all of it was heard
        if self.heard_ms is None or (by_client and not self.heard_by_client):
            self.heard_ms = heard
        else:
            self.heard_ms = min(self.heard_ms, heard)
        self.heard_by_client = self.heard_by_client or by_client


@dataclass
class FunctionCallItem:
    id: str
    call_id: str
    name: str
    arguments: str
    gen: int = -1
    role: str = "assistant"


@dataclass
class FunctionCallOutputItem:
    id: str
    call_id: str
    output: str
    synthetic: bool = False
    role: str = "tool"


@dataclass
class McpCallItem:
    """A call of a tool on MCP server ``server_label`` that the server itself runs: ``output``
    once it answered, ``error`` (the Realtime error object) once it failed; neither while it runs."""

    id: str
    call_id: str
    name: str
    arguments: str
    server_label: str
    gen: int = -1
    output: str | None = None
    error: dict[str, object] | None = None
    cancelled: bool = False
    """Its response ended before it did (its ``error`` says so; no apology is due)."""
    role: str = "assistant"

    def result(self) -> str:
        """What the model reads as the call's result."""
        if self.output is not None:
            return self.output
        if self.error is not None:
            return json.dumps({"error": self.error.get("message", "the tool failed")})
        return CANCELLED_OUTPUT


Item = UserItem | AssistantItem | FunctionCallItem | FunctionCallOutputItem | McpCallItem


class History:
    def __init__(self) -> None:
        self.items: list[Item] = []

    def add_user(self, text: str, gen: int = -1, item_id: str | None = None) -> UserItem:
        item = UserItem(id=item_id or new_id("item"), text=text, gen=gen)
        self.items.append(item)
        return item

    def add_assistant(self, gen: int, item_id: str) -> AssistantItem:
        item = AssistantItem(id=item_id, gen=gen)
        self.items.append(item)
        return item

    def add_call(self, gen: int, call_id: str, name: str, arguments: str, item_id: str | None = None) -> FunctionCallItem:
        item = FunctionCallItem(id=item_id or new_id("item"), call_id=call_id, name=name, arguments=arguments, gen=gen)
        self.items.append(item)
        return item

    def add_mcp_call(self, gen: int, call_id: str, name: str, arguments: str, server_label: str) -> McpCallItem:
        item = McpCallItem(id=new_id("item"), call_id=call_id, name=name, arguments=arguments, server_label=server_label, gen=gen)
        self.items.append(item)
        return item

    def call(self, call_id: str) -> FunctionCallItem | None:
        return next((i for i in self.items if isinstance(i, FunctionCallItem) and i.call_id == call_id), None)

    def output_of(self, call_id: str) -> FunctionCallOutputItem | None:
        return next((i for i in self.items if isinstance(i, FunctionCallOutputItem) and i.call_id == call_id), None)

    def unanswered_calls(self) -> list[FunctionCallItem]:
        answered = {i.call_id for i in self.items if isinstance(i, FunctionCallOutputItem)}
        return [i for i in self.items if isinstance(i, FunctionCallItem) and i.call_id not in answered]

    def add_output(self, call_id: str, output: str, *, synthetic: bool = False, item_id: str | None = None) -> FunctionCallOutputItem:
        """The one output of call ``call_id``, placed after the call and the calls and outputs
        right behind it.  The caller checks that the call exists and is unanswered."""
        item = FunctionCallOutputItem(id=item_id or new_id("item"), call_id=call_id, output=output, synthetic=synthetic)
        at = next(n for n, i in enumerate(self.items) if isinstance(i, FunctionCallItem) and i.call_id == call_id) + 1
        while at < len(self.items) and isinstance(self.items[at], FunctionCallItem | FunctionCallOutputItem):
            at += 1
        self.items.insert(at, item)
        return item

    def previous_id(self, item_id: str) -> str | None:
        """The id of the item just before ``item_id`` (None: it is first, or not here)."""
        for before, item in itertools.pairwise([None, *self.items]):
            if item is not None and item.id == item_id:
                return before.id if before is not None else None
        return None

    def move_after(self, item_id: str, previous_id: str | None) -> None:
        """Put item ``item_id`` right after ``previous_id`` (None: first in the history).  The
        caller checks that both are here (``conversation.item.create``'s ``previous_item_id``)."""
        item = self.find(item_id)
        assert item is not None
        self.items.remove(item)
        at = 0 if previous_id is None else next(n for n, i in enumerate(self.items) if i.id == previous_id) + 1
        self.items.insert(at, item)

    def find(self, item_id: str) -> Item | None:
        return next((i for i in self.items if i.id == item_id), None)

    def delete(self, item_id: str) -> bool:
        before = len(self.items)
        self.items = [i for i in self.items if i.id != item_id]
        return len(self.items) != before

    def trim(self, max_items: int) -> list[str]:
        """Drop the oldest items beyond ``max_items``; returns their ids, oldest first."""
        if len(self.items) <= max_items:
            return []
        dropped, self.items = self.items[: len(self.items) - max_items], self.items[len(self.items) - max_items :]
        return [i.id for i in dropped]

    def oldest_turn(self) -> list[str]:
        """Ids of the oldest whole turn: the items before the second user item (a user's words
        with the answer, calls and outputs that followed them; or items that came before any
        user item).  Empty when at most one turn is left: the latest turn is never offered."""
        boundary = next((n for n, i in enumerate(self.items) if n > 0 and isinstance(i, UserItem)), None)
        return [] if boundary is None else [i.id for i in self.items[:boundary]]

    def remove(self, item_ids: Sequence[str]) -> None:
        """Drop the items ``item_ids`` (ids not here are ignored)."""
        gone = set(item_ids)
        self.items = [i for i in self.items if i.id not in gone]

    @property
    def last_id(self) -> str | None:
        return self.items[-1].id if self.items else None

    def messages(
        self,
        instructions: str,
        *,
        pending_user: str | None = None,
        gen: int = -1,
        examples: Sequence[tuple[str, str]] = (),
    ) -> list[Message]:
        """The prompt: system, the ``examples`` (user, assistant) exchanges, history (empty
        assistant turns skipped), then the pending user text.

        A user item that belongs to generation ``gen`` is left out when ``pending_user`` carries
        the same turn (a speculative answer may start before or after the turn is committed).
        Nothing is left out for length: the session cuts the history itself, in whole turns and
        announced, so that what the model reads is what the client sees (:mod:`voiceagent.conversation.prompt_fit`).
        """
        msgs: list[Message] = []
        present = {i.call_id for i in self.items if isinstance(i, FunctionCallItem)}
        answered = {i.call_id for i in self.items if isinstance(i, FunctionCallOutputItem)}
        for n, item in enumerate(self.items):
            if isinstance(item, UserItem):
                if pending_user is not None and item.gen == gen and gen >= 0:
                    continue
                msgs.append(Message("user", item.text))
            elif isinstance(item, AssistantItem):
                text = item.text
                if text:
                    msgs.append(Message("assistant", text))
            elif isinstance(item, McpCallItem):
                call = ToolCall(item.call_id, item.name, item.arguments)
                last = msgs[-1] if msgs else None
                if last is not None and last.role == "assistant" and not last.tool_calls and self._same_turn(n, item):
                    msgs[-1] = Message("assistant", last.content, (call,))
                else:
                    msgs.append(Message("assistant", "", (call,)))
                msgs.append(Message("tool", item.result(), tool_call_id=item.call_id))
            elif isinstance(item, FunctionCallItem):
                call = ToolCall(item.call_id, item.name, item.arguments)
                last = msgs[-1] if msgs else None
                # One assistant message carries the text spoken and the calls that followed it.
                if last is not None and last.role == "assistant" and self._same_turn(n, item):
                    msgs[-1] = Message("assistant", last.content, (*last.tool_calls, call))
                else:
                    msgs.append(Message("assistant", "", (call,)))
                following = self.items[n + 1] if n + 1 < len(self.items) else None
                if item.call_id not in answered and not isinstance(following, FunctionCallItem):
                    # Not yet answered: the prompt must not show a call without its result.
                    for pending in self._unanswered_block(n, answered):
                        msgs.append(Message("tool", CANCELLED_OUTPUT, tool_call_id=pending))
            elif item.call_id in present:  # an output whose call was trimmed away is left out
                msgs.append(Message("tool", item.output, tool_call_id=item.call_id))
        if pending_user is not None:
            msgs.append(Message("user", pending_user))
        return [Message("system", instructions), *example_messages(examples), *msgs]

    def _same_turn(self, n: int, item: FunctionCallItem | McpCallItem) -> bool:
        before = self.items[n - 1] if n > 0 else None
        return isinstance(before, AssistantItem | FunctionCallItem | McpCallItem) and before.gen == item.gen

    def _unanswered_block(self, n: int, answered: set[str]) -> list[str]:
        """Call ids without output in the run of calls that ends at item ``n``."""
        out: list[str] = []
        while n >= 0 and isinstance(self.items[n], FunctionCallItem):
            item = self.items[n]
            assert isinstance(item, FunctionCallItem)
            if item.call_id not in answered:
                out.insert(0, item.call_id)
            n -= 1
        return out


def input_messages(instructions: str, items: Sequence[InputItem], history: History) -> list[Message]:
    """The prompt of a response that reads ``items`` (``response.create``'s ``input``) instead of
    the conversation: the system message, then each item in order, a reference (``ref``) as the
    history's item of that id reads (the caller checked they exist; one gone since is skipped)."""
    msgs = [Message("system", instructions)]
    for entry in items:
        if entry.ref is None:
            msgs.append(Message("system" if entry.role == "system" else "assistant" if entry.role == "assistant" else "user", entry.text))
            continue
        item = history.find(entry.ref)
        if isinstance(item, UserItem):
            msgs.append(Message("user", item.text))
        elif isinstance(item, AssistantItem) and item.text:
            msgs.append(Message("assistant", item.text))
        elif isinstance(item, FunctionCallItem):
            msgs.append(Message("assistant", "", (ToolCall(item.call_id, item.name, item.arguments),)))
        elif isinstance(item, McpCallItem):
            # As messages() renders it: the call, then its result (an MCP call carries both).
            msgs.append(Message("assistant", "", (ToolCall(item.call_id, item.name, item.arguments),)))
            msgs.append(Message("tool", item.result(), tool_call_id=item.call_id))
        elif isinstance(item, FunctionCallOutputItem):
            msgs.append(Message("tool", item.output, tool_call_id=item.call_id))
    return msgs
