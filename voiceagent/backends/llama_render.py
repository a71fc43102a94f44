"""How a llama.cpp model sees a conversation: its chat template, rendered to its own tokens.

Both embedded engines (the per-context pool of :mod:`voiceagent.backends.llama_cpp` and the
batched engine of :mod:`voiceagent.backends.llama_batch`) render a prompt here, so the tokens a
conversation's KV cache holds are the same whichever engine evaluated them.

Everything here reads only the model's vocabulary and template, never a context's state, so it
is safe from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from voiceagent.tools.format import OPEN, chat_messages, tool_dicts
from voiceagent.tools.spec import Message, Tool

__all__ = ["SENTENCE_ENDS", "ChatRenderer"]

SENTENCE_ENDS = (".", "?", "!")
"""What a token that ends a sentence starts with."""

_MARK = "\x1e"
"""Stands for words not yet heard when a prompt is cut before them (an ASCII record separator:
no chat template writes one)."""

_END_TOKENS: dict[str, npt.NDArray[np.int64]] = {}


def _sentence_end_tokens(llm: Llama, key: str) -> npt.NDArray[np.int64]:
    """The tokens that end a sentence or the turn (end of generation) in ``llm``'s vocabulary;
    found once per model file (a scan of the vocabulary, ~0.4 s for Qwen2.5's 151k tokens)."""
    ends = _END_TOKENS.get(key)
    if ends is None:
        found = [t for t in range(llm.n_vocab()) if llm.detokenize([t]).decode("utf-8", "replace")[:1] in SENTENCE_ENDS]
        ends = _END_TOKENS[key] = np.array(sorted({*found, llm.token_eos()}), dtype=np.int64)
    return ends


class ChatRenderer:
    """Renders messages and tools to ``llm``'s tokens exactly as llama-cpp-python's
    ``create_chat_completion`` would (``key`` names the model file, for the vocabulary scan)."""

    def __init__(self, llm: Llama, key: str) -> None:
        self.llm = llm
        # The tokens a reply that calls a tool starts with: the template's <tool_call>, and the
        # "<" and "```" a model that spells its call out as text begins it with.
        self.call_openers = sorted(
            {llm.tokenize(OPEN.encode(), add_bos=False, special=True)[0]}
            | {llm.tokenize(t, add_bos=False, special=False)[0] for t in (b"<", b"```")}
        )
        self.ends = _sentence_end_tokens(llm, key)
        """Tokens that end a sentence or the turn (for the end-of-sentence probability)."""
        template = llm.metadata.get("tokenizer.chat_template")
        self.formatter: Any = None
        if template:
            eos, bos = llm.token_eos(), llm.token_bos()
            self.formatter = cast(Any, Jinja2ChatFormatter)(
                template=template, eos_token=self.token_text(eos), bos_token=self.token_text(bos), stop_token_ids=[eos]
            )

    def token_text(self, token: int) -> str:
        return self.llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    def tokenize(self, text: str) -> list[int]:
        """``text`` as tokens, special tokens spelled out in it read as such, no BOS added."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def prompt_length(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        """The prompt's length in tokens.  A model without a chat template is counted by its
        messages' text plus a few tokens each."""
        if self.formatter is not None:
            return len(self.prompt_tokens(messages, tools))
        return sum(self.count_tokens(m.content) + 8 for m in messages)

    def head_tokens(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int] | None:
        """The tokens of the prompt ``messages`` render to, up to the end of the last (user)
        message's text; None when there is no user message last or the prompt cannot be
        rendered.  An empty last message stands for words not yet heard: the tokens then end
        where they would begin (what warming a new system prompt evaluates)."""
        if self.formatter is None or not messages or messages[-1].role != "user":
            return None
        text = messages[-1].content
        if not text:
            # Rendered with a marker in the words' place, cut where the marker starts.
            messages = [*messages[:-1], Message("user", _MARK)]
        result = self.formatter(messages=chat_messages(messages), tools=tool_dicts(tools) or None)
        end = result.prompt.rfind(text or _MARK)
        if end < 0:
            return None
        head = result.prompt[: end + len(text)]
        return self.llm.tokenize(head.encode("utf-8"), add_bos=not result.added_special, special=True)

    def prompt_tokens(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[int]:
        """The whole prompt, up to where the assistant's reply begins (requires a template)."""
        result = self.formatter(messages=chat_messages(messages), tools=tool_dicts(tools) or None)
        return self.llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)
