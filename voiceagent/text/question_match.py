"""Lexical guards for a semantic cache: two questions close in meaning may still want different
answers.

A sentence embedding places "What is the capital of Austria?" next to "… of Australia?"
(cosine 0.71), "Set a timer for ten minutes" next to "… two minutes" (0.84) and "Is the museum
open on Mondays?" next to "… closed on Mondays?" (0.95), while true paraphrases can score lower
("When do you close?" / "What time do you close today?", 0.81).  No threshold alone separates
them, so a hit also needs the two questions to agree on what an embedding blurs:

* **numbers**: the same numbers, written as digits or words ("ten" = "10");
* **negation**: both negated or neither ("not", "n't", "never", "no", "without");
* **opposites**: not one word of a pair of opposites on each side (open/closed, before/after);
* **names**: the same capitalised words that do not start the sentence (Whisper capitalises
  names: "Austria", "Paris"), compared in lower case;
* **question words**: the same ones (who, what, when, where, why, how; "what time" is "when",
  "which" is "what"): "Where is the meeting?" / "When is the meeting?" score 0.84;
* **persons**: who does what to whom, the order of first, second and third persons ("Can I call
  you later?" / "Can you call me later?" score 0.97), where both name any;
* **content words**: the same words besides the common ones (``COMMON``), crudely stemmed: even
  one more word can narrow a question ("… open?" / "… open on Sundays?");
* **order**: where a name is involved, the names and content words in the same order ("a flight
  from Paris to London" is not "from London to Paris"; "Who works for John?" is not "Who does
  John work for?", 0.96).

:func:`mismatch` returns the first guard that fails, or None.
"""

from __future__ import annotations

import re

__all__ = ["COMMON", "mismatch", "signature"]

_QUESTION_WORDS = {
    "who": "who",
    "whom": "who",
    "whose": "whose",
    "what": "what",
    "which": "what",
    "when": "when",
    "where": "where",
    "why": "why",
    "how": "how",
}
_PERSONS = {
    **dict.fromkeys(("i", "me", "my", "mine", "myself", "i'm", "i'd", "i'll", "i've"), "1"),
    **dict.fromkeys(("you", "your", "yours", "yourself", "you're", "you'd", "you'll", "you've"), "2"),
    **dict.fromkeys(("we", "us", "our", "ours", "ourselves", "we're", "we'll", "we've"), "1p"),
    **dict.fromkeys(("he", "him", "his", "himself"), "3m"),
    **dict.fromkeys(("she", "her", "hers", "herself"), "3f"),
    **dict.fromkeys(("they", "them", "their", "theirs"), "3p"),
}

_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*|\d+(?:[.,]\d+)?")

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen twenty"
)
_TENS = {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_OTHER_NUMBERS = {"hundred": 100, "thousand": 1000, "million": 10**6, "half": 0.5, "quarter": 0.25, "once": 1, "twice": 2}
_NUMBER_WORDS: dict[str, float] = {w: i for i, w in enumerate(_UNITS.split())} | _TENS | _OTHER_NUMBERS

_NEGATIONS = {"not", "no", "never", "without", "nobody", "nothing", "none", "neither", "nor", "cannot"}

_OPPOSITES = [
    ("open", "closed"),
    ("open", "close"),
    ("opens", "closes"),
    ("opening", "closing"),
    ("before", "after"),
    ("early", "late"),
    ("earliest", "latest"),
    ("first", "last"),
    ("start", "end"),
    ("starts", "ends"),
    ("begin", "end"),
    ("arrive", "leave"),
    ("arrival", "departure"),
    ("in", "out"),
    ("on", "off"),
    ("up", "down"),
    ("left", "right"),
    ("north", "south"),
    ("east", "west"),
    ("more", "less"),
    ("most", "least"),
    ("cheap", "expensive"),
    ("cheapest", "dearest"),
    ("buy", "sell"),
    ("hot", "cold"),
    ("yes", "no"),
    ("today", "tomorrow"),
    ("today", "yesterday"),
    ("tomorrow", "yesterday"),
    ("morning", "evening"),
    ("morning", "afternoon"),
    ("afternoon", "evening"),
    ("day", "night"),
    ("weekday", "weekend"),
    ("minimum", "maximum"),
    ("min", "max"),
    ("add", "remove"),
    ("include", "exclude"),
    ("enable", "disable"),
    ("allow", "forbid"),
    ("allowed", "forbidden"),
    ("from", "to"),
    ("above", "below"),
    ("inside", "outside"),
    ("upstairs", "downstairs"),
    ("he", "she"),
    ("his", "her"),
    ("man", "woman"),
    ("men", "women"),
    ("adult", "child"),
    ("adults", "children"),
]
_OPPOSITE_OF: dict[str, set[str]] = {}
for _a, _b in _OPPOSITES:
    _OPPOSITE_OF.setdefault(_a, set()).add(_b)
    _OPPOSITE_OF.setdefault(_b, set()).add(_a)

_COMMON_TEXT = """
a an the and or but if so to of in on at by for with about as into from up down out over under again then
is are was were be been being am do does did doing done have has had having will would shall should can could
may might must let lets i me my mine we us our you your yours he him his she her it its they them their this
that these those there here what which who whom whose when where why how whether than too very just also only
even still please thanks thank hello hi hey okay ok yes well really tell say said know want need like get got
go going gets give take make makes made way time times today now soon much many some any all every each
one ones thing things something anything lot kind sort bit place there's what's where's when's how's who's
it's i'm you're we're they're i'd i'll you'll we'll can't don't doesn't didn't isn't aren't wasn't won't
usually normally generally typically exactly roughly about around approximately long far often actually
able help tell show explain find look see mean means usually happen happens does take takes
"""
COMMON = frozenset(_COMMON_TEXT.split())
"""Words a question can gain or lose without changing what it asks (besides the guards above)."""


def _words(text: str) -> list[str]:
    # "the venue's address" is "the venue address"; "what's" is "what" (common either way).
    return [w.lower().replace("’", "'").removesuffix("'s") for w in _WORD.findall(text)]


def _numbers(words: list[str]) -> list[float]:
    out: list[float] = []
    for w in words:
        if w[0].isdigit():
            out.append(float(w.replace(",", "")))
        elif w in _NUMBER_WORDS and w != "one":  # "one" is as often a pronoun ("the blue one")
            out.append(float(_NUMBER_WORDS[w]))
    return sorted(out)


def _negated(words: list[str]) -> bool:
    return sum(w in _NEGATIONS or w.endswith("n't") for w in words) % 2 == 1


def _names(text: str) -> set[str]:
    names = set()
    for sentence in re.split(r"[.!?]\s+", text.strip()):
        tokens = _WORD.findall(sentence)
        names |= {t.lower() for t in tokens[1:] if t[0].isupper() and t.lower() not in {"i", "i'm", "i'd", "i'll"}}
    return names


def _stem(word: str) -> str:
    """A crude stem, enough to equate close/closes/closed/closing."""
    for suffix in ("ing", "es", "s", "ed"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    return word.removesuffix("e") if len(word) > 3 else word


def signature(text: str) -> dict[str, object]:
    """What the guards compare, for logs and tests."""
    words = _words(text)
    return {
        "numbers": _numbers(words),
        "negated": _negated(words),
        "names": sorted(_names(text)),
        "content": sorted({_stem(w) for w in words if w not in COMMON and w not in _NUMBER_WORDS and not w[0].isdigit()}),
    }


def _question_words(words: list[str]) -> set[str]:
    found = set()
    for i, w in enumerate(words):
        if w in _QUESTION_WORDS:
            found.add("when" if w == "what" and i + 1 < len(words) and words[i + 1] == "time" else _QUESTION_WORDS[w])
    return found


def _persons(words: list[str]) -> list[str]:
    out: list[str] = []
    for w in words:
        person = _PERSONS.get(w)
        if person and (not out or out[-1] != person):
            out.append(person)
    return out


def _content(words: list[str]) -> list[str]:
    return [_stem(w) for w in words if w not in COMMON and w not in _NUMBER_WORDS and not w[0].isdigit()]


def mismatch(a: str, b: str) -> str | None:
    """The first guard (``numbers``, ``negation``, ``opposites``, ``names``, ``question``,
    ``persons``, ``content``, ``order``) on which questions ``a`` and ``b`` differ, or None when
    none does."""
    wa, wb = _words(a), _words(b)
    if _numbers(wa) != _numbers(wb):
        return "numbers"
    if _negated(wa) != _negated(wb):
        return "negation"
    sa, sb = set(wa), set(wb)
    for w in sa - sb:
        if _OPPOSITE_OF.get(w, set()) & (sb - sa):
            return "opposites"
    names = _names(a)
    if names != _names(b):
        return "names"
    if _question_words(wa) != _question_words(wb):
        return "question"
    pa, pb = _persons(wa), _persons(wb)
    if pa and pb and pa != pb:
        return "persons"
    ca, cb = _content(wa), _content(wb)
    if set(ca) != set(cb):  # even one more word can narrow the question ("… open?" / "… open on Sundays?")
        return "content"
    if names and list(dict.fromkeys(ca)) != list(dict.fromkeys(cb)):
        return "order"
    return None
