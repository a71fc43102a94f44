"""Where a prompt is a cached one with a run of tokens taken out: the KV cache's context shift.

When a conversation outgrows ``llm.context``, its oldest turns are dropped
(:mod:`voiceagent.conversation.prompt_fit`) and the next prompt is the instructions, then the turns
kept.  Its longest common prefix with the cached tokens ends where the first dropped turn began,
so without more the whole kept history (~1,300 tokens in the soak, 5 s or more of prefill on two
cores) would be evaluated again.  Those tokens are still in the cache, only further on: llama.cpp
can remove the dropped run's cells and move the later ones back by its length
(``llama_memory_seq_rm`` and ``llama_memory_seq_add``; the keys are re-rotated to their new
positions at the next decode), after which the kept history is a cached prefix again.

The cells kept were computed while the dropped turns were in view: the model sees a trace of
what the client was told is gone.  llama.cpp's own server makes the same trade by default
(``--context-shift``); ``llm.context_shift = false`` re-reads instead
(docs/decisions/context-shift.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MIN_KEPT", "Gap", "find_gap"]

MIN_KEPT = 32
"""The fewest kept tokens a shift must bring back to be made: below that a re-read is as cheap."""

Gap = tuple[int, int, int]
"""(start, removed, kept): remove the cached tokens ``[start, start + removed)`` and move the
next ``kept`` ones back by ``removed``; the cache then holds ``start + kept`` tokens of the prompt."""


def find_gap(cached: Sequence[int], prompt: Sequence[int], start: int, min_kept: int = MIN_KEPT) -> Gap | None:
    """The gap to close so that more of ``prompt`` is cached, or None.

    ``start`` is the longest common prefix of ``cached`` and ``prompt``.  Among the cut points
    after it, the one whose following cached tokens match the most of ``prompt[start:]`` wins (the
    nearest on a tie); cached tokens after the matched run are not kept (the caller drops them, as
    it would anyway).  None when no cut point brings back at least ``min_kept`` tokens."""
    if start >= len(cached) or start >= len(prompt):
        return None
    rest = np.asarray(cached[start:], dtype=np.int64)
    want = np.asarray(prompt[start:], dtype=np.int64)
    best: Gap | None = None
    # A cut point must be followed by the prompt's next token: few positions in practice (the
    # token after a turn's "<|im_start|>user\n" is a word of its text).
    for removed in np.flatnonzero(rest[1:] == want[0]) + 1:
        tail = rest[removed:]
        n = min(len(tail), len(want))
        diff = np.flatnonzero(tail[:n] != want[:n])
        kept = int(diff[0]) if diff.size else n
        if kept >= min_kept and (best is None or kept > best[2]):
            best = (start, int(removed), kept)
    return best
