"""Evaluated prompt prefixes shared by the llama.cpp contexts of one model.

A conversation's instructions are evaluated once, on its own context, when they arrive
(``session.update`` warms them).  A long instruction block (a conference assistant's knowledge
base: 10,000 tokens, about 45 s on two cores) is often the same for every caller of a
deployment, so the KV cells of such a prefix are copied out of the context that evaluated it
(``llama_state_seq_get_data``) and into any other context whose prompt starts with the same
tokens and has less of it cached (``llama_state_seq_set_data``): a copy of ~12 KB a token for
Qwen2.5 0.5B instead of a prefill.

Only prefixes of at least ``min_tokens`` are kept (below that a prefill is cheap), at most
``limit`` of them, least recently used out first.  The store is touched only from the model's
executor thread (every context call runs there), so it needs no lock.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SharedPrefix", "SharedPrefixes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SharedPrefix:
    """The KV cells of sequence 0 after evaluating ``tokens`` (llama.cpp's serialised form)."""

    tokens: tuple[int, ...]
    data: bytes


class SharedPrefixes:
    """The prefixes one model's contexts share (module docstring)."""

    def __init__(self, min_tokens: int = 512, limit: int = 4) -> None:
        self.min_tokens = min_tokens
        self.limit = limit
        self._items: collections.OrderedDict[tuple[int, ...], SharedPrefix] = collections.OrderedDict()
        self.adopted = 0
        """Times a context took a prefix from here instead of evaluating it."""
        self.adopted_tokens = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, tokens: object) -> bool:
        return tokens in self._items

    @property
    def nbytes(self) -> int:
        return sum(len(p.data) for p in self._items.values())

    def add(self, tokens: Sequence[int], data: bytes) -> None:
        """Keep ``data``, the cells of a context that holds exactly ``tokens`` (if long enough)."""
        key = tuple(tokens)
        if len(key) < self.min_tokens or not data:
            return
        self._items[key] = SharedPrefix(key, data)
        self._items.move_to_end(key, last=False)
        while len(self._items) > self.limit:
            self._items.popitem(last=True)

    def best(self, tokens: Sequence[int], cached: int) -> SharedPrefix | None:
        """The longest kept prefix of ``tokens`` that is longer than the ``cached`` tokens a
        context already holds by at least ``min_tokens`` (a shorter gain is cheaper to evaluate
        than the copy is worth); None if there is none."""
        found: SharedPrefix | None = None
        for prefix in self._items.values():
            n = len(prefix.tokens)
            longer = n >= cached + self.min_tokens and n <= len(tokens) and (found is None or n > len(found.tokens))
            if longer and tuple(tokens[:n]) == prefix.tokens:
                found = prefix
        if found is not None:
            self._items.move_to_end(found.tokens, last=False)
        return found
