"""Pure text helpers: splitting a streamed reply into speakable clauses, cleaning text for TTS,
and cutting a reply to the part a listener heard."""

from __future__ import annotations

import re

__all__ = ["ClauseSplitter", "clean_for_speech", "cut_to_fraction", "unpunctuated"]

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:\u2014]\s")
_MARKUP = re.compile(r"[*_`#>|~]+|\[(.*?)\]\(.*?\)")
_WORD = re.compile(r"\s*(\S+)\s+")
_PUNCT = "\"'()[]“”‘’"
# Words that lead into what follows them: a first clause cut after one of them sounds broken off.
_FUNCTION_WORDS = frozenset(
    word
    for line in (
        "a an the this that these those my your his her its our their some any no every each",
        "of in on at to for with from by about into onto over under after before between through than as",
        "and or but so nor if because while when where which who whom whose what how",
        "is are was were be been being am has have had do does did will would can could shall should may",
        "might must not very also just it's i'm you're we're they're there's that's",
    )
    for word in line.split()
)


class ClauseSplitter:
    """Cut a token stream into clauses as early as they are speakable.

    A clause ends at a sentence end, or at a comma/semicolon/colon once it has ``min_words``
    (fewer for the very first clause, which decides the time to first audio), or after
    ``max_words`` words (``first_max_words`` for the first clause, when set).  A hard cut of the
    first clause moves back before trailing function words ("the", "of", "is", …) while at least
    ``first_min_words`` remain, so the voice ends it on a whole phrase.
    The pieces returned keep their original spacing, so ``"".join`` of everything pushed and
    flushed equals the input exactly.
    """

    def __init__(self, first_min_words: int = 3, min_words: int = 6, max_words: int = 24, first_max_words: int = 0) -> None:
        self._buf = ""
        self._first_min = first_min_words
        self._min = min_words
        self._max = max_words
        self._first_max = first_max_words or max_words
        self._emitted = 0

    def push(self, piece: str) -> list[str]:
        self._buf += piece
        out: list[str] = []
        while True:
            cut = self._find_cut()
            if cut is None:
                return out
            out.append(self._buf[:cut])
            self._buf = self._buf[cut:]
            self._emitted += 1

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, ""
        if rest.strip():
            self._emitted += 1
            return [rest]
        return [rest] if rest else []

    def _find_cut(self) -> int | None:
        # The earliest cut wins: a piece may carry several candidates (a comma and a later full
        # stop, or many words at once), and the output must not depend on how text was chunked.
        cuts: list[int] = []
        m = _SENTENCE_END.search(self._buf)
        if m and m.end() - 1 > 0 and _words(self._buf[: m.end()]) >= 1:
            cuts.append(m.end())
        need = self._first_min if self._emitted == 0 else self._min
        for m in _CLAUSE_END.finditer(self._buf):
            if _words(self._buf[: m.end()]) >= need:
                cuts.append(m.end())
                break
        limit = self._first_max if self._emitted == 0 else self._max
        if _words(self._buf) > limit:
            # Hard cut after the limit-th word so a run-on clause does not delay audio indefinitely
            # (the first clause's limit is lower: it decides when the listener hears anything).
            m = _first_words(limit).match(self._buf)
            if m:
                cuts.append(self._phrase_end(m.end(), need) if self._emitted == 0 else m.end())
        return min(cuts) if cuts else None

    def _phrase_end(self, end: int, min_words: int) -> int:
        """Move a hard cut at ``end`` back before trailing function words, keeping ``min_words``
        (at least one).

        A voice reads a clause as a whole phrase, falling at its end: "The moon is the" sounds
        broken, "The moon is" + "the only planet…" does not.  Only words already complete move, so
        the cut comes no later and does not depend on how the text was chunked.
        """
        words = list(_WORD.finditer(self._buf, 0, end))
        while len(words) > max(min_words, 1) and words[-1].group(1).strip(_PUNCT).lower().replace("’", "'") in _FUNCTION_WORDS:
            words.pop()
        return words[-1].end() if words else end


def _first_words(n: int) -> re.Pattern[str]:
    """Matches ``n`` words from the start, each followed by whitespace."""
    return re.compile(rf"\s*(?:\S+\s+){{{n}}}")


def _words(text: str) -> int:
    return len(text.split())


def clean_for_speech(text: str) -> str:
    """Remove markdown and symbols a TTS voice would read aloud or stumble on."""
    text = _MARKUP.sub(lambda m: m.group(1) or " ", text)
    return " ".join(text.split())


def cut_to_fraction(text: str, fraction: float) -> str:
    """The first ``fraction`` of ``text``, at a word boundary (rounded down)."""
    if fraction >= 1.0:
        return text
    if fraction <= 0.0:
        return ""
    words = text.split()
    keep = int(len(words) * fraction)
    return " ".join(words[:keep])


def unpunctuated(text: str) -> str:
    """``text`` without its final punctuation and spaces: the words alone (Whisper punctuates
    half a sentence as a whole one, "How many wheels?")."""
    return text.strip().rstrip(".?!,;: ").strip()
