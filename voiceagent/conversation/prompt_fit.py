"""The prompt always fits the LLM's context window.

Before every generation and prefill the session's prompt is measured in the engine's own tokens
(:meth:`~voiceagent.backends.protocols.LlmEngine.count_tokens`; an engine that cannot count, a
remote server, is estimated at :data:`BYTES_PER_TOKEN`) against its window less the reply's
tokens (``llm.max_tokens``) and :data:`MARGIN`.  What does not fit leaves the history as whole
turns, oldest first (a user's words with the answer, calls and outputs after them), keeping the
instructions, the tools and the latest turn.  The caller announces each cut
(``conversation.item.deleted``: the history the client sees is the one the model reads), counts
and logs it.

A cut goes further than the overflow, down to :data:`HEADROOM` of the room the history has:
llama.cpp reuses the cached prefix of the previous prompt, and a cut changes everything after the
instructions, so cutting one turn at a time would re-read the whole history on every turn once
the window is full.  With the headroom that happens about once per quarter window.

Where even the latest turn alone is too long (one huge text item), the longest message of the
prompt is shortened in this prompt only (its start kept for instructions, its end for the rest),
so that the turn is answered rather than failed; the log says so.

Instructions and tools that leave no room for a turn are refused up front
(:meth:`PromptFitter.check_instructions`, at ``session.update``), so that case is the client's
error, not a failed turn.

Cancellation: :meth:`PromptFitter.fit` only awaits the count; cancelled there, the history keeps
every cut made so far (each one is complete) and ``CancelledError`` propagates.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from voiceagent.backends.protocols import LlmEngine
from voiceagent.conversation.history import History
from voiceagent.errors import ProtocolError
from voiceagent.tools.format import tool_dicts
from voiceagent.tools.spec import Message, Tool

__all__ = [
    "BYTES_PER_TOKEN",
    "FRAME_TOKENS",
    "HEADROOM",
    "MARGIN",
    "TURN_RESERVE",
    "Fitted",
    "PromptFitter",
    "estimate_tokens",
    "upper_bound",
]

log = logging.getLogger(__name__)

BYTES_PER_TOKEN = 3.0
"""The estimate for an engine that cannot count: English runs at about 4 bytes a token in
Qwen's and Llama's tokenizers; 3 errs on the side of fitting."""
MARGIN = 16
"""Tokens kept free beyond the reply's: the ``<tool_call>`` opening a required call adds to the
prompt, and a count may differ by a token or two from the engine's own rendering."""
HEADROOM = 0.25
"""Share of the history's room a cut leaves free (module docstring)."""
TURN_RESERVE = 128
"""Tokens kept for one turn (a spoken question and the message frames) when instructions are
checked: instructions and tools must leave this much and the reply's tokens free."""
FRAME_TOKENS = 16
"""Tokens a chat template may add around one message (role markers, separators) at most."""
_SHORTEN_TRIES = 4


def estimate_tokens(messages: Sequence[Message], tools: Sequence[Tool]) -> int:
    """Tokens of a prompt by its size in bytes (:data:`BYTES_PER_TOKEN`), with a few for each
    message's frame: for engines that cannot count."""
    size = sum(len(m.content.encode("utf-8")) + sum(len(c.arguments) + len(c.name) for c in m.tool_calls) for m in messages)
    size += len(json.dumps(tool_dicts(tools))) if tools else 0
    return math.ceil(size / BYTES_PER_TOKEN) + 6 * len(messages)


def upper_bound(messages: Sequence[Message], tools: Sequence[Tool]) -> int:
    """At least as many tokens as the prompt can have in any byte-level tokenizer (no token is
    shorter than a byte), with :data:`FRAME_TOKENS` for each message's frame of special tokens."""
    size = sum(len(m.content.encode("utf-8")) + sum(len(c.arguments) + len(c.name) + 32 for c in m.tool_calls) for m in messages)
    size += len(json.dumps(tool_dicts(tools))) + 64 if tools else 0
    return size + FRAME_TOKENS * (len(messages) + 1)


@dataclass
class Fitted:
    """A prompt that fits: the ``messages``, their ``tokens`` (counted, or an upper bound when
    that bound already fits), and the history items dropped to get there (ids, oldest first)."""

    messages: list[Message]
    tokens: int
    dropped: list[str] = field(default_factory=list)
    shortened: bool = False
    """A message was shortened in this prompt (even the latest turn alone did not fit)."""


class PromptFitter:
    """Measures prompts against one engine's window and cuts a history to fit it.

    ``window`` is the engine's (``LlmEngine.window``), or ``llm.context`` for an engine that does
    not know its own; ``reply_tokens`` is ``llm.max_tokens``."""

    def __init__(self, engine: LlmEngine, window: int, reply_tokens: int) -> None:
        self._engine = engine
        self.window = window
        self.reply_tokens = reply_tokens

    @property
    def budget(self) -> int:
        """The most tokens a prompt may have."""
        return self.window - self.reply_tokens - MARGIN

    async def measure(self, messages: Sequence[Message], tools: Sequence[Tool]) -> int:
        """The prompt's tokens: the engine's count, else the estimate."""
        n = await self._engine.count_tokens(messages, tuple(tools))
        return n if n is not None else estimate_tokens(messages, tools)

    async def check_instructions(self, instructions: str, tools: Sequence[Tool]) -> int:
        """The tokens ``instructions`` and ``tools`` take as a system message; raises a
        ``ProtocolError`` (``context_length_exceeded``) with both sizes and the limit when they
        leave less than :data:`TURN_RESERVE` tokens for a turn beside the reply."""
        n = await self.measure([Message("system", instructions)], tools)
        if n + TURN_RESERVE > self.budget:
            what = "instructions and tools" if tools else "instructions"
            raise ProtocolError(
                "context_length_exceeded",
                f"the {what} take {n} tokens; with {TURN_RESERVE} for a turn and {self.reply_tokens + MARGIN} for the reply that "
                f"exceeds the context window of {self.window} tokens (llm.context on the server: raise it, or shorten them)",
                param="session.instructions",
            )
        return n

    async def fit(self, history: History, render: Callable[[], list[Message]], tools: Sequence[Tool], *, may_cut: bool = True) -> Fitted:
        """The prompt ``render()`` makes of ``history`` now, cut to fit (module docstring).
        ``render`` is called again after each cut; the history loses the dropped items.

        ``may_cut=False`` (a response that must leave the conversation as it is: out of band):
        nothing is dropped or shortened; a prompt that does not fit raises a ``ProtocolError``
        (``context_length_exceeded``) and the history is untouched."""
        messages = render()
        budget = self.budget
        bound = upper_bound(messages, tools)
        if bound <= budget:
            return Fitted(messages, bound)  # fits whatever the tokenizer: no count on the turn's path
        n = await self.measure(messages, tools)
        if n <= budget:
            return Fitted(messages, n)
        if not may_cut:
            raise ProtocolError(
                "context_length_exceeded",
                f"the prompt takes {n} tokens, more than the {budget} the context window of {self.window} leaves; a response "
                "outside the conversation does not cut it (give it a shorter `input`, or delete items first)",
            )
        dropped: list[str] = []
        # Tokens per character of this prompt, to judge how much each turn is worth.
        per_char = n / max(1, sum(len(m.content) for m in messages))
        fixed = per_char * (len(messages[0].content) if messages else 0)
        target = budget - HEADROOM * max(0.0, budget - fixed)
        while n > budget:
            removed = 0.0
            cut: list[str] = []
            while n - removed > target:
                ids = history.oldest_turn()
                if not ids:
                    break
                removed += per_char * sum(_chars(history, i) for i in ids)
                history.remove(ids)
                cut += ids
            if not cut:
                break  # only the latest turn is left
            dropped += cut
            messages = render()
            n = await self.measure(messages, tools)
        if n <= budget:
            return Fitted(messages, n, dropped)
        messages, n = await self._shorten(messages, n, tools)
        return Fitted(messages, n, dropped, shortened=True)

    async def _shorten(self, messages: list[Message], n: int, tools: Sequence[Tool]) -> tuple[list[Message], int]:
        """Shorten the longest message until the prompt fits (at most a few tries; the engine
        reports what still does not fit)."""
        for _ in range(_SHORTEN_TRIES):
            if n <= self.budget:
                break
            at = max(range(len(messages)), key=lambda k: len(messages[k].content))
            msg = messages[at]
            per_char = n / max(1, sum(len(m.content) for m in messages))
            cut = min(len(msg.content), math.ceil((n - self.budget) / max(per_char, 1e-6) * 1.1) + 16)
            keep = len(msg.content) - cut
            text = msg.content[:keep] if msg.role == "system" else msg.content[cut:]
            messages = [*messages[:at], Message(msg.role, text, msg.tool_calls, msg.tool_call_id), *messages[at + 1 :]]
            n = await self.measure(messages, tools)
        log.warning("prompt: the latest turn alone exceeded the context window; its longest message was shortened to %d tokens", n)
        return messages, n


def _chars(history: History, item_id: str) -> int:
    """The characters item ``item_id`` adds to a prompt (its text, a call's arguments, an output)."""
    item = history.find(item_id)
    if item is None:
        return 0
    for attr in ("text", "arguments", "output"):
        value = getattr(item, attr, None)
        if isinstance(value, str):
            return len(value)
    return 0
