"""The embedded LLM: llama.cpp through llama-cpp-python, GGUF models from packages.

One ``Llama`` object keeps the KV cache of its last prompt and reuses the longest common prefix
of the next one.  The conversation is rendered deterministically (same system prompt, assistant
turns stored exactly as generated, or cut at a word boundary on barge-in), so each turn only
pays for its new tokens.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from llama_cpp import Llama

from voiceagent.backends.protocols import Message
from voiceagent.catalog import get_spec, prepare

__all__ = ["LlamaCppLlm", "gguf_path"]


def gguf_path(name: str, cache_dir: Path) -> Path:
    """The GGUF file for catalog entry ``llm.<name>``, joining split parts once if needed."""
    return prepare(get_spec("llm", name), cache_dir)


class LlamaCppLlm:
    def __init__(self, name: str, cache_dir: Path, threads: int, context: int) -> None:
        path = gguf_path(name, cache_dir)
        self._llm = Llama(
            model_path=str(path),
            n_ctx=context,
            n_threads=threads,
            n_threads_batch=threads,
            n_batch=256,
            verbose=bool(os.environ.get("VOICEAGENT_LLAMA_VERBOSE")),
        )
        self.context = context
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm")

    def count_tokens(self, text: str) -> int:
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def stream(self, messages: Sequence[Message], max_tokens: int, temperature: float) -> Iterator[str]:
        chunks = self._llm.create_chat_completion(
            messages=cast(Any, [{"role": m.role, "content": m.content} for m in messages]),
            stream=True,
            max_tokens=max_tokens,
            temperature=temperature,
            top_k=1 if temperature == 0.0 else 40,
            seed=0,
        )
        for chunk in cast(Iterator[dict[str, Any]], chunks):
            delta = chunk["choices"][0]["delta"]
            text = delta.get("content")
            if text:
                yield str(text)
