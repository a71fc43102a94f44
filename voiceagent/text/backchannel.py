"""Whether words said over the agent take the turn, or only show that the listener follows.

A listener says "yeah", "right", "uh-huh" or "I see" while the agent talks without asking it to
stop.  :func:`real_words` removes such phrases (and fillers) from a transcript and returns what is
left: the words that can interrupt.  The phrases are per language (:data:`BACKCHANNELS`); a
configured list (``turn.backchannels``) replaces the built-in one.

Matching is on whole words, lower case, without punctuation, longest phrase first, so "all
right" goes as one phrase and "right" inside "right now" is not special ("now" is left, a real
word).  The lists hold what the transcriber writes too: Whisper tiny hears "uh-huh" as "Uh-uh."

Whatever the language, a word that only writes down a sound is no word either
(:data:`NONVERBAL`): syllables joined by hyphens, each of vowels, h and m or of one or two letters
("a-a", "mm-mm", "a-ha-ha", "d-d-m"), a hum ("hmm", "mhm"), a vowel with an h ("ahh", "eh"), or
Latin consonants with no vowel at all, y counted as one ("tch", "bff", "pfff", "c'm'm").
Whisper writes a hummed "uh-huh" or "mm-hmm", a laugh, a throat-clear, a click of the tongue or a
puff of breath that way.  The words that take the floor are kept even when they look like a sound
("shh", "psst"), and so are words with digits or letters outside a-z.  An acronym alone ("BBC")
counts as a sound: said over the agent with no other word, it is not a request; so do letters
spelled with dots ("M.A.K.", Whisper's writing of a hummed "mhm").  A stutter before a word
("b-b-but") keeps the word; a real word of short hyphenated parts ("re-do") counts as a sound,
which matters only when it is all the user said over the agent.

A short word said again and again with nothing else ("dot, dot, dot", "tusk, tusk", "la la la")
is a sound written down as syllables too: Whisper writes a tut-tut, a click of the tongue or a
hum that way.  Only words of letters, up to :data:`ECHO_MAX_LETTERS` of them, and never a floor
word ("no, no, no" and "wait, wait" take the floor).

Some words take the floor (:data:`FLOOR_WORDS`: "stop", "wait", "hey", "sorry"...): a listener
says them to make the speaker yield, or to change how it speaks ("slower", "louder", "repeat").
:func:`takes_floor` finds one in a transcript; the interruption policy never doubts such a
transcript, however unsure the transcriber is of it (a short "Hey," and "wait" cut into two
segments each came out under the doubt threshold).
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "BACKCHANNELS",
    "ECHO_MAX_LETTERS",
    "FLOOR_WORDS",
    "NONVERBAL",
    "QUESTION_WORDS",
    "SOUND_SPELLINGS",
    "asks",
    "floor_words",
    "phrases_for",
    "real_words",
    "takes_floor",
]

BACKCHANNELS: dict[str, tuple[str, ...]] = {
    "en": (
        "yeah", "yes", "yep", "yup", "ya", "uh-huh", "uh huh", "uh-uh", "mm-hmm", "mm hmm", "mhm", "mm", "mmm",
        "hmm", "hm", "uh", "um", "ah", "oh", "ooh", "aha", "okay", "ok", "right", "sure", "i see", "go on",
        "got it", "true", "exactly", "really", "wow", "cool", "nice", "great", "alright", "all right",
        "interesting", "totally", "of course", "indeed", "i know", "makes sense", "that's right", "yeah right",
        "huh", "eh", "ha", "haha", "ahem",
        "i make him",  # Whisper tiny's writing of a hummed "mhm" (runs 14, 17 and 18)
    ),
    "es": ("sí", "si", "ajá", "aja", "vale", "claro", "ya", "bueno", "mm", "mhm", "ah", "oh", "ok", "okay", "exacto", "entiendo"),
    "fr": ("oui", "ouais", "d'accord", "ok", "okay", "mm", "mhm", "ah", "oh", "bien sûr", "je vois", "exactement", "voilà", "bon"),
    "de": ("ja", "genau", "okay", "ok", "mhm", "mm", "ah", "oh", "stimmt", "richtig", "klar", "aha", "verstehe", "gut"),
}  # fmt: skip
"""Backchannels and fillers by language (``stt.language``); a language missing here gets none,
so any word interrupts there."""

SOUND_SPELLINGS: tuple[str, ...] = (
    "mm", "mmm", "hmm", "hm", "mhm", "mm-hmm", "uh-huh", "uh", "um", "ah", "ahh", "oh", "ooh", "huh", "ha", "ha ha",
    "haha", "hah", "heh", "ugh", "ahem", "achoo", "pfft", "pff", "tsk", "tut", "tch", "hmph", "oof", "whew", "phew",
    "brr", "grr", "aww", "eh", "er", "erm", "la", "da", "ta", "psh",
)  # fmt: skip
"""How a sound a listener makes is written (a hum, a laugh, a click of the tongue, a sneeze), in
any language: with the backchannels, the words a second reading of speech over the agent may
use (:mod:`voiceagent.backends.whisper_sounds`)."""

FLOOR_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset((
        "stop", "wait", "hold", "hang", "pause", "halt", "cancel", "enough", "quiet", "shh", "hush", "hey",
        "excuse", "sorry", "pardon", "no", "nope", "listen", "actually", "psst", "pst",
        "slow", "slower", "faster", "louder", "quieter", "softer", "repeat",
    )),
    "es": frozenset(("para", "espera", "basta", "oye", "perdón", "perdona", "no", "alto", "calla", "despacio", "repite")),
    "fr": frozenset((
        "stop", "attends", "attendez", "arrête", "arrêtez", "pardon", "non", "écoute", "écoutez", "doucement", "répète", "répétez",
    )),
    "de": frozenset((
        "stopp", "stop", "halt", "warte", "moment", "nein", "entschuldigung", "hör", "ruhe", "pst", "psst", "langsamer", "lauter",
        "leiser", "schneller",
    )),
}  # fmt: skip
"""Words a listener says to make the speaker yield or speak otherwise, by language: a transcript
holding one is never doubted (:func:`takes_floor`).  A language missing here has none."""

QUESTION_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset(("who", "whom", "whose", "what", "why", "how", "where", "when", "which")),
    "es": frozenset(("qué", "quién", "quiénes", "cómo", "dónde", "cuándo", "cuál", "cuánto")),
    "fr": frozenset(("qui", "quoi", "pourquoi", "comment", "où", "quand", "quel", "quelle", "combien")),
    "de": frozenset(("wer", "wen", "wem", "was", "warum", "wieso", "wie", "wo", "wann", "welche", "welcher")),
}  # fmt: skip
"""Words that ask, by language: short speech over the agent holding one is a question ("Why?",
"Okay, but why?"), never read again as sounds (:func:`asks`).  No sound over the agent was ever
transcribed with one in the interruption set's runs, while two short real questions were read in
backchannels within 2.1 nats (docs/decisions/interruptions.md).  A language missing here has none."""

_WORD = re.compile(r"[\w'-]+")
_SPELLED = re.compile(r"\b(?:[^\W\d_]\.){2,}(?:[^\W\d_]\b)?")
"""Letters spelled with dots ("M.A.K.", "U.S."): made one hyphenated token, which
:data:`NONVERBAL` reads as a sound."""
ECHO_MAX_LETTERS = 4
"""The longest word that, said again and again with nothing else, is taken for a sound."""
_SOUND_PART = r"(?:[aeiouhm]{1,4}|[a-z]{1,2})"
NONVERBAL = re.compile(rf"^(?:{_SOUND_PART}(?:-{_SOUND_PART})+|[hm]{{2,}}|h?[aeiou]h+|[b-df-hj-np-tv-xz'-]+)$")
"""A transcribed sound rather than a word (see the module docstring)."""


def _primary(language: str) -> str:
    """A language tag's primary subtag, lower case (``en-GB`` → ``en``): the lists' keys."""
    return language.split("-")[0].lower()


def _words(text: str) -> list[str]:
    text = _SPELLED.sub(lambda m: "-".join(c for c in m.group(0) if c != "."), text)
    return [w.strip("'-") for w in _WORD.findall(text.lower()) if w.strip("'-")]


def phrases_for(language: str, configured: str = "") -> tuple[str, ...]:
    """The backchannel phrases of a session: ``configured`` (comma-separated) when given, else
    the built-in list of ``language`` (its primary tag: ``en-GB`` reads ``en``)."""
    if configured.strip():
        return tuple(p.strip() for p in configured.split(",") if p.strip())
    return BACKCHANNELS.get(_primary(language), ())


@functools.lru_cache(maxsize=16)
def _patterns(phrases: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """``phrases`` as word tuples, longest first (made once per list: every judgement reads them)."""
    return tuple(sorted({p for p in map(tuple, map(_words, phrases)) if p}, key=len, reverse=True))


def real_words(text: str, phrases: tuple[str, ...], keep: frozenset[str] = frozenset()) -> list[str]:
    """The words of ``text`` that are not part of a backchannel phrase nor a sound
    (:data:`NONVERBAL`, letters spelled with dots, or one short word said again and again with
    nothing else), in order; a word in ``keep`` (the floor words) is never taken for a sound."""
    patterns = _patterns(phrases)
    words = _words(text)
    out: list[str] = []
    i = 0
    while i < len(words):
        for pat in patterns:
            if tuple(words[i : i + len(pat)]) == pat:
                i += len(pat)
                break
        else:
            if words[i] in keep or not NONVERBAL.match(words[i]):
                out.append(words[i])
            i += 1
    if len(out) >= 2 and len(set(out)) == 1 and out[0].isalpha() and len(out[0]) <= ECHO_MAX_LETTERS and out[0] not in keep:
        return []  # "dot, dot, dot": a sound written as a word said again and again
    return out


def floor_words(language: str) -> frozenset[str]:
    """The words that take the floor in ``language`` (its primary tag; none for a language
    missing from :data:`FLOOR_WORDS`)."""
    return FLOOR_WORDS.get(_primary(language), frozenset())


def asks(words: list[str], language: str) -> bool:
    """Whether ``words`` (from :func:`real_words`) hold a question word of ``language`` (its
    primary tag): :data:`QUESTION_WORDS`."""
    question = QUESTION_WORDS.get(_primary(language), frozenset())
    return any(w in question for w in words)


def takes_floor(words: list[str], language: str) -> bool:
    """Whether ``words`` (from :func:`real_words`) hold a word that takes the floor in
    ``language`` (its primary tag)."""
    floor = floor_words(language)
    return any(w in floor for w in words)
