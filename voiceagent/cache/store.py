"""A semantic reply cache's entries: question embeddings, their replies, LRU and time-to-live.

An entry holds the user's question (its transcript and its unit-length embedding), the reply's
text and its clauses with their synthesized audio, and the *scope* it was made in: a hash of everything
besides the question that decides the answer (the instructions, the tools, the LLM model, the
voice).  A lookup only considers entries of its own scope, so two deployments (or two sessions
with different instructions) never share answers.

A lookup hits when the best entry of the scope has a cosine similarity of at least
``threshold`` with the question **and** the two questions pass the lexical guards of
:mod:`voiceagent.text.question_match` (the same numbers, negation, names, content words).
Expired entries are dropped when met; past ``max_entries``, or past ``max_bytes`` of audio, the
least recently used go.

Not thread-safe: one owner (the event loop) calls it; lookups are a matrix-vector product over
the scope's entries (a few thousand at most: well under a millisecond).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from voiceagent.text.question_match import mismatch

__all__ = ["CacheEntry", "CachedClause", "Lookup", "ReplyStore", "scope_of"]


def scope_of(**parts: Any) -> str:
    """A short, stable hash of what decides an answer besides the question (JSON-serialisable
    values: instructions, tool schemas, model names, voice, speed)."""
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


@dataclass(frozen=True)
class CachedClause:
    """One clause of a stored reply: its text and its audio (mono int16 at ``rate``)."""

    text: str
    pcm: npt.NDArray[np.int16]
    rate: int


@dataclass
class CacheEntry:
    scope: str
    question: str
    vector: npt.NDArray[np.float32]
    reply: str
    clauses: tuple[CachedClause, ...]
    created: float
    hits: int = 0

    @property
    def nbytes(self) -> int:
        return sum(c.pcm.nbytes for c in self.clauses)


@dataclass(frozen=True)
class Lookup:
    """What a lookup found: ``entry`` on a hit; else ``reason`` (``empty``: nothing in scope,
    ``below_threshold``, or the lexical guard that failed) and the nearest ``similarity``."""

    entry: CacheEntry | None
    similarity: float
    reason: str = ""
    nearest: str = ""


@dataclass
class ReplyStore:
    threshold: float
    ttl_s: float
    max_entries: int
    max_bytes: int = 128 * 2**20
    clock: Callable[[], float] = time.monotonic
    _entries: OrderedDict[int, CacheEntry] = field(default_factory=OrderedDict)
    _ids: int = 0
    _bytes: int = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, scope: str, question: str, vector: npt.NDArray[np.float32]) -> Lookup:
        """The best live entry of ``scope`` for ``question`` (module docstring); a hit counts as
        a use (it becomes the most recently used)."""
        self._expire()
        keys = [k for k, e in self._entries.items() if e.scope == scope]
        if not keys:
            return Lookup(None, 0.0, "empty")
        matrix = np.stack([self._entries[k].vector for k in keys])
        sims = matrix @ vector
        order = np.argsort(-sims)
        best = self._entries[keys[int(order[0])]]
        top = float(sims[order[0]])
        if top < self.threshold:
            return Lookup(None, top, "below_threshold", best.question)
        # The most similar entry that also passes the guards (a near duplicate can fail one
        # where a slightly less similar one passes).
        first_reason = ""
        for i in order:
            if float(sims[i]) < self.threshold:
                break
            entry = self._entries[keys[int(i)]]
            reason = mismatch(question, entry.question)
            if reason is None:
                self._entries.move_to_end(keys[int(i)])
                entry.hits += 1
                return Lookup(entry, float(sims[i]))
            first_reason = first_reason or reason
        return Lookup(None, top, first_reason, best.question)

    def add(
        self, scope: str, question: str, vector: npt.NDArray[np.float32], reply: str, clauses: Sequence[CachedClause] = ()
    ) -> CacheEntry:
        """Store a reply; the least recently used entries go past ``max_entries`` or ``max_bytes``."""
        self._expire()
        entry = CacheEntry(scope, question, np.asarray(vector, dtype=np.float32), reply, tuple(clauses), self.clock())
        self._ids += 1
        self._entries[self._ids] = entry
        self._bytes += entry.nbytes
        while len(self._entries) > self.max_entries or (self._bytes > self.max_bytes and len(self._entries) > 1):
            self._bytes -= self._entries.popitem(last=False)[1].nbytes
        return entry

    @property
    def nbytes(self) -> int:
        """The audio held, in bytes."""
        return self._bytes

    def questions(self, scope: str) -> Sequence[str]:
        return [e.question for e in self._entries.values() if e.scope == scope]

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, e in self._entries.items() if now - e.created > self.ttl_s]:
            self._bytes -= self._entries.pop(key).nbytes
