"""Whether a transcript stops where an English sentence cannot end ("Tell me the capital of").

The turn model (Smart Turn) judges a pause by its sound.  A speaker who pauses to think often
drops the voice as if the sentence were over, and then the model calls the turn complete: on the
spoken evaluation (benchmarks/eval_quality.py) it gave the first halves of the paused questions a
completion probability of 0.5 or more in 42 of 45 cases.  The words say otherwise, and cheaply.

The rule is deliberately narrow: only words that almost never end an English sentence (articles,
possessives, conjunctions, "of" and "to", arithmetic operators, fillers), and Whisper's own
marks of an unfinished clause (a trailing comma, dash or ellipsis).  Other prepositions are left
to the turn model: they end many questions ("Where are you from?").  "of" and "to" end a few
("What is it made of?"); there, and wherever else the rule is wrong, the cost is a longer wait
(``turn.incomplete_ms``), never lost words.
"""

from __future__ import annotations

import re

__all__ = ["UNFINISHED_WORDS", "ends_unfinished"]

UNFINISHED_WORDS = frozenset(
    {
        # articles and possessive determiners: a noun must follow
        "a", "an", "the", "my", "your", "our", "their", "its",
        # coordinating and subordinating conjunctions
        "and", "or", "but", "nor", "because", "although", "unless", "whether", "than",
        # "the capital of", "remind me to": a complement must follow
        "of", "to",
        # arithmetic said aloud
        "plus", "minus",
        # fillers: the speaker is still thinking
        "um", "uh", "erm", "er", "uhm", "umm",
    }
)  # fmt: skip
"""Last words after which a sentence is not over (lower case, without punctuation)."""

_TRAILING_MARK = re.compile(r"(,|;|:|-|\u2013|\u2014|\.\.\.|\u2026)\s*$")
_WORD = re.compile(r"[a-z0-9']+")


def ends_unfinished(text: str) -> bool:
    """True when ``text`` (a transcript) stops mid-sentence: it ends with a comma, dash, colon or
    ellipsis, or its last word is one of :data:`UNFINISHED_WORDS` (a final "." or "?" that
    Whisper adds out of habit does not count against that: "Tell me the capital of." is
    unfinished).  Empty text is not unfinished."""
    stripped = text.strip()
    if not stripped:
        return False
    if _TRAILING_MARK.search(stripped):
        return True
    words = _WORD.findall(stripped.lower())
    return bool(words) and words[-1] in UNFINISHED_WORDS
