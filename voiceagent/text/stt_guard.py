"""Repetition-loop guard for speech-to-text output: is this decode a loop, and where to cut it.

Whisper's greedy decoder can fall into a loop and write one phrase again and again until its
length limit ("Tell me... Tell me... Tell me..." for 0.6 s of audio, or a whole sentence ten
times for 5 s).  :func:`check` takes the decoded text, the duration of the audio it came from and,
when known, the number of tokens the decoder wrote, and says whether the decode looped and which
text may be passed on instead.  It is pure (no model, no I/O) and cheap (microseconds for the
224 tokens Whisper can write).

A decode is a loop (``Verdict.reason``) when any of these holds:

* ``"repeat"`` — one run of a repeated word n-gram (words compared case- and punctuation-blind)
  holds at least :data:`MIN_REPEATED_WORDS` words beyond its first copy, and at least one whole
  second copy.  Speech repeats short units ("no no no", "very very good", "can you hear me? can
  you hear me?"): those stay far below the bar; a decoder loop passes it within a few copies.
* ``"rate"`` — more words than :data:`MAX_WORDS_PER_S` per second of audio (plus a small
  allowance), which no speaker reaches; or, when the token count is given, at least
  :func:`max_tokens` tokens: a decoder given that length limit (the Whisper backend is) and
  filling it was cut off mid-loop, not done.
* ``"compression"`` — the UTF-8 text compresses with gzip by more than
  :data:`MAX_COMPRESSION_RATIO`, Whisper's own rule (2.4) for repetitive output.

``Verdict.text`` is the text to use: unchanged when there is no loop.  Otherwise it is cut at
the end of the first copy of the repeated unit (what came before the loop is kept, nothing after
it: once a decoder loops, what follows is not transcription) — for a ``"repeat"`` loop, and for
the others when a run of at least one whole repeat reaches the end of the text (a loop the
length limit stopped).  Then, if that is still more words than the audio can hold, only the
first words it can hold are kept, and then words are dropped from the end while the rest still
compresses too well (a loop with no word structure, such as ``"hahahahaha…"``, can end empty).
``Verdict.text`` never loops itself: ``check(v.text, audio_s).looped`` is false.
"""

from __future__ import annotations

import gzip
import math
import re
from dataclasses import dataclass

__all__ = [
    "MAX_COMPRESSION_RATIO",
    "MAX_TOKENS_PER_S",
    "MAX_WORDS_PER_S",
    "MIN_REPEATED_WORDS",
    "Verdict",
    "check",
    "compression_ratio",
    "max_tokens",
    "max_words",
]

MIN_REPEATED_WORDS = 8
"""Words a repeated run must hold beyond its first copy to count as a loop."""
MAX_WORDS_PER_S = 6.0
"""Fast speech is about 4 words per second; 6 with the allowance is beyond any speaker."""
WORDS_ALLOWANCE = 4
MAX_TOKENS_PER_S = 12.0
"""Whisper writes about 1.3 tokens per English word; numbers and spelled letters take more."""
TOKENS_ALLOWANCE = 12
MAX_COMPRESSION_RATIO = 2.4
"""Whisper's ``compression_ratio_threshold``."""

_WORD = re.compile(r"\S+")
_PUNCT = re.compile(r"[^\w']+")


@dataclass(frozen=True)
class Verdict:
    looped: bool
    reason: str
    """``""`` when not looped, else ``"repeat"``, ``"rate"`` or ``"compression"`` (the first that held)."""
    text: str
    """The text to pass on: the input unchanged, or the loop cut off it."""


def max_words(audio_s: float) -> int:
    """The most words ``audio_s`` seconds of speech can hold."""
    return WORDS_ALLOWANCE + math.floor(MAX_WORDS_PER_S * max(audio_s, 0.0))


def max_tokens(audio_s: float) -> int:
    """The most tokens a transcript of ``audio_s`` seconds needs (a decoder length limit)."""
    return TOKENS_ALLOWANCE + math.ceil(MAX_TOKENS_PER_S * max(audio_s, 0.0))


def compression_ratio(text: str) -> float:
    """Whisper's measure: UTF-8 length over gzip length (0 for empty text)."""
    data = text.encode()
    return len(data) / len(gzip.compress(data)) if data else 0.0


def _key(word: str) -> str:
    stripped = _PUNCT.sub("", word.lower())
    return stripped or word


def _longest_run(keys: list[str]) -> tuple[int, int, int]:
    """The repeated run with the most words beyond its first copy: (start, unit length, extra
    words).  A shorter unit wins a tie (it is the true period)."""
    best = (0, 0, 0)
    n_words = len(keys)
    for n in range(1, n_words // 2 + 1):
        run = 0
        for j in range(n_words - n):
            if keys[j] == keys[j + n]:
                run += 1
                if run >= n and run > best[2]:
                    best = (j - run + 1, n, run)
            else:
                run = 0
    return best


def _rate_reason(n_words: int, tokens: int | None, audio_s: float) -> bool:
    if n_words > max_words(audio_s):
        return True
    return tokens is not None and tokens >= max_tokens(audio_s)


def check(text: str, audio_s: float, tokens: int | None = None) -> Verdict:
    """Judge one decode of ``audio_s`` seconds of audio; ``tokens``: the decoder's output length,
    when known (not counting its prompt)."""
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    keys = [_key(text[a:b]) for a, b in spans]
    start, unit, extra = _longest_run(keys)
    if extra >= MIN_REPEATED_WORDS:
        reason, end = "repeat", start + unit  # up to the end of the loop's first copy
    elif _rate_reason(len(keys), tokens, audio_s):
        reason, end = "rate", len(spans)
    elif compression_ratio(text) > MAX_COMPRESSION_RATIO:
        reason, end = "compression", len(spans)
    else:
        return Verdict(False, "", text)
    if reason != "repeat" and extra >= unit > 0 and start + unit + extra == len(keys):
        end = start + unit  # a loop that ran into the length limit
    end = min(end, max_words(audio_s))

    def kept(n: int) -> str:
        return text[: spans[n - 1][1]].strip() if n > 0 else ""

    # Repetition inside words, or too little text for a word run: drop words from the end.
    while end > 0 and compression_ratio(kept(end)) > MAX_COMPRESSION_RATIO:
        end -= 1
    cut = kept(end)
    if cut == text and end > 0:  # only a token count said "loop": the text itself cannot be trusted either
        cut = kept(end - 1)
    # Shorter than ``text`` every time, so this ends; it catches a second loop before the first.
    again = check(cut, audio_s)
    return Verdict(True, reason, again.text)
