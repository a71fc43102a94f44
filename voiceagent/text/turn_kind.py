"""Which user turns a small model answers as well as a large one: rules on the transcript.

Per-turn routing (:mod:`voiceagent.backends.router`) sends a turn to the small model only when
the whole utterance is social glue that needs no knowledge to answer: a greeting, "how are you",
thanks, a farewell, a yes/no or short confirmation, the user giving their name, or asking the
agent's.  Everything else (a fact, a sum, a reminder, a joke, advice, anything with a question
in it beyond those) goes to the large model.

The rule is deliberately narrow: a wrong "small" costs a worse answer, a wrong "large" only
costs time.  A piece with digits or symbols only ("Yes, 42.") is content; "call me" takes one
name, not "back", "at six" or "tomorrow".  The utterance is cut at its punctuation and at the joins ``and``/``but``/``then``;
every piece, after leading fillers ("oh", "um", "well"), must be one of the phrases below, and the
whole must be short (``MAX_WORDS``).  "Yes, what is the capital of France?" is large: its second
piece is not a phrase here.

:func:`small_talk_kind` returns the kind of the first piece (``greeting``, ``how_are_you``,
``thanks``, ``farewell``, ``confirmation``, ``introduction``, ``about_you``), or None for the
large model.  Pure: no I/O.
"""

from __future__ import annotations

import re

__all__ = ["KINDS", "MAX_WORDS", "small_talk_kind"]

MAX_WORDS = 12
"""Longer utterances carry content: the large model answers them."""

_ADDRESS = r"(?: there| again| everyone| everybody| friend| buddy| assistant| agent)?"
_WHEN = r"(?: today| tonight| this (?:morning|afternoon|evening))?"

_PHRASES: dict[str, str] = {
    "greeting": rf"(?:hi|hello|hey|hiya|howdy|greetings|good (?:morning|afternoon|evening|day)){_ADDRESS}",
    "how_are_you": (
        rf"(?:how (?:are|r) (?:you|ya)(?: doing)?{_WHEN}|how (?:is|s) it going|how's it going|what's up|whats up|"
        rf"how have you been|how do you do|how's your day(?: going)?|how is your day(?: going)?|are you (?:well|ok|okay){_WHEN})"
    ),
    "thanks": (
        r"(?:thank you|thanks|many thanks|cheers|thank you kindly)"
        r"(?: (?:so|very) much| a lot| again| for (?:your|the|all the) help| for that| anyway)?"
    ),
    "farewell": (
        r"(?:good ?bye|bye(?: bye)?|see (?:you|ya)(?: later| soon| tomorrow)?|talk (?:to you )?(?:later|soon)|"
        r"good night|take care|have a (?:nice|good|great|lovely) (?:day|evening|night|one|weekend))"
    ),
    "confirmation": (
        r"(?:yes|yeah|yep|yup|sure|no|nope|nah|okay|ok|alright|all right|right|correct|exactly|absolutely|"
        r"of course|great|perfect|cool|awesome|fine|good|got it|i see|understood|sounds good|that sounds good|"
        r"that's (?:right|correct|fine|great|perfect|good|all)|that is (?:right|correct|fine|all)|"
        r"no thanks|no thank you|not really|never mind|nevermind|that'll be all|that will be all|"
        r"(?:yes|no) please|please|please do|go ahead|(?:i'm|i am) good|(?:i'm|i am) fine|me too)"
    ),
    "introduction": (
        r"(?:my name is|my name's) (?!not\b)[a-z]+(?: [a-z]+)?|nice to meet you(?: too)?|"
        r"call me (?!(?:back|at|in|on|later|tomorrow|tonight|now|soon|when|if|a|an|the|up)\b)[a-z]+"
    ),
    "about_you": r"(?:what(?:'s| is) your name|who are you|what are you)",
}

KINDS = tuple(_PHRASES)

_MATCHERS = [(kind, re.compile(rf"(?:{pattern})")) for kind, pattern in _PHRASES.items()]
_FILLERS = re.compile(r"^(?:(?:oh|um|uh|uhm|erm|hmm|well|so|and|but|hey|ah|okay so|ok so)\s+)+")
_SPLIT = re.compile(r"[.,!?;:]+|\s(?:and|but|then)\s")
_CLEAN = re.compile(r"[^a-z' ]+")


def small_talk_kind(text: str) -> str | None:
    """The kind of social turn ``text`` is (module docstring), or None: the large model answers."""
    lowered = text.lower().replace("\u2019", "'")
    if not lowered.strip() or len(lowered.split()) > MAX_WORDS:
        return None
    first: str | None = None
    for piece in _SPLIT.split(f" {lowered} "):
        words = " ".join(_CLEAN.sub(" ", piece).split())
        if not words and piece.strip():
            return None  # digits, symbols or another script: content ("Yes, 42.")
        if not words or not _FILLERS.sub("", f"{words} "):
            continue  # nothing, or only fillers ("um,")
        # "Hey there" is a greeting, "hey, what time is it" is not: a filler is tried both ways.
        kind = next((k for k, m in _MATCHERS for w in (words, _FILLERS.sub("", words)) if w and m.fullmatch(w)), None)
        if kind is None:
            return None
        first = first or kind
    return first
