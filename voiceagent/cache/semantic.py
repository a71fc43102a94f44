"""The semantic reply cache as the pipeline uses it: one per process, shared by every session.

:meth:`SemanticCache.key` embeds a question on the embedding model's own executor (one thread:
about 7 ms for a short question; never on the event loop, never in another model's executor, so
other sessions' critical-path work does not wait behind it).  :meth:`lookup` and :meth:`add`
run on the event loop (:class:`~voiceagent.cache.store.ReplyStore`: well under a millisecond).

What may be reused is decided by its callers (:mod:`voiceagent.stages.llm`): a conversation's
first question, a reply without tool calls, sampled no hotter than ``max_temperature``.

Cancellation: cancelling :meth:`key` abandons the embedding (it finishes in its thread, unused).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from voiceagent.cache.store import CachedClause, CacheEntry, Lookup, ReplyStore, scope_of

__all__ = ["CacheKey", "SemanticCache"]

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


@dataclass(frozen=True)
class CacheKey:
    """A question as the cache looks it up: its scope, its transcript, its embedding."""

    scope: str
    question: str
    vector: npt.NDArray[np.float32]


class SemanticCache:
    """``embed`` (blocking, confined to ``executor``) keys a :class:`ReplyStore`."""

    def __init__(self, embed: Embed, executor: Executor, store: ReplyStore, max_temperature: float) -> None:
        self._embed = embed
        self.executor = executor
        self.store = store
        self.max_temperature = max_temperature
        self.lookups: Counter[str] = Counter()
        """Lookups by result: ``hit``, or why not (``empty``, ``below_threshold``, a guard)."""

    @staticmethod
    def scope(**parts: Any) -> str:
        """What decides an answer besides the question, hashed (:func:`~voiceagent.cache.store.scope_of`)."""
        return scope_of(**parts)

    async def key(self, scope: str, question: str) -> CacheKey:
        """Embed ``question`` (on the executor) for ``scope``."""
        loop = asyncio.get_running_loop()
        vectors = await loop.run_in_executor(self.executor, self._embed, [question])
        return CacheKey(scope, question, vectors[0])

    def lookup(self, key: CacheKey) -> Lookup:
        found = self.store.lookup(key.scope, key.question, key.vector)
        self.lookups["hit" if found.entry is not None else found.reason] += 1
        return found

    def add(self, key: CacheKey, reply: str, clauses: Sequence[CachedClause]) -> CacheEntry:
        return self.store.add(key.scope, key.question, key.vector, reply, clauses)
