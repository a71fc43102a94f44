"""Scoring the spoken evals' transcripts and replies (eval_quality.py, eval_answers.py,
eval_stt.py): text normalized for comparison (numbers as words, contractions and British
spellings undone), word error rate, whether a reply holds an accepted answer, whether it can be
spoken, and the judge of a reply with its guess of the stage that failed."""

from __future__ import annotations

import re
import unicodedata

from benchmarks.common.questions import Question

__all__ = [
    "NUMBER_WORDS",
    "STT_FAIL_WER",
    "answer_correct",
    "count_sentences",
    "echoes",
    "edit_distance",
    "failure_guess",
    "judge",
    "normalize",
    "number_words",
    "speakable_problems",
    "unfinished",
    "wer",
]

STT_FAIL_WER = 0.25
"""A failed question whose transcript has a higher word error rate is put down to STT, else to the LLM."""

_SMALL = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_SMALL += ["eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
NUMBER_WORDS = frozenset([*_SMALL, *_TENS[2:], "hundred", *(name for _, name in _SCALES)])
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
_CONTRACTIONS = {
    "what's": "what is",
    "that's": "that is",
    "it's": "it is",
    "there's": "there is",
    "here's": "here is",
    "how's": "how is",
    "where's": "where is",
    "who's": "who is",
    "let's": "let us",
    "i'm": "i am",
    "you're": "you are",
    "we're": "we are",
    "they're": "they are",
    "i've": "i have",
    "you've": "you have",
    "i'll": "i will",
    "you'll": "you will",
    "i'd": "i would",
    "don't": "do not",
    "doesn't": "does not",
    "didn't": "did not",
    "isn't": "is not",
    "aren't": "are not",
    "can't": "cannot",
    "won't": "will not",
}
_SPELLING = {
    "colour": "color",
    "colours": "colors",
    "favourite": "favorite",
    "grey": "gray",
    "okay": "ok",
    "metres": "meters",
    "metre": "meter",
    "kilometres": "kilometers",
    "kilometre": "kilometer",
}
_TOKEN = re.compile(r"\d+(?:\.\d+)?(?:st|nd|rd|th)?|[a-z]+(?:'[a-z]+)*")


def number_words(n: int) -> list[str]:
    """``n`` (≥ 0) in English words, without "and": 8848 → eight thousand eight hundred forty eight."""
    if n < 20:
        return [_SMALL[n]]
    if n < 100:
        return [_TENS[n // 10], *([_SMALL[n % 10]] if n % 10 else [])]
    if n < 1000:
        return [_SMALL[n // 100], "hundred", *(number_words(n % 100) if n % 100 else [])]
    for value, name in _SCALES:
        if n >= value:
            return [*number_words(n // value), name, *(number_words(n % value) if n % value else [])]
    raise AssertionError(n)  # pragma: no cover


def _number_token(tok: str) -> list[str]:
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?(st|nd|rd|th)?", tok)
    assert m is not None
    whole, frac, suffix = m.groups()
    words = number_words(int(whole)) if len(whole) <= 15 else [_SMALL[int(d)] for d in whole]
    if frac:
        words += ["point", *(_SMALL[int(d)] for d in frac)]
    if suffix:
        last = words[-1]
        words[-1] = _ORDINAL.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return words


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation; numbers written as words; common contractions and
    British spellings undone; the "and" inside a number dropped ("one hundred and five")."""
    t = text.lower().replace("’", "'").replace("‘", "'")
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)  # 8,848 → 8848
    t = t.replace("%", " percent ").replace("°", " degrees ").replace("&", " and ").replace("+", " plus ").replace("=", " equals ")
    words: list[str] = []
    for tok in _TOKEN.findall(t):
        if tok[0].isdigit():
            words += _number_token(tok)
            continue
        tok = _CONTRACTIONS.get(tok, tok)
        for w in tok.split():
            w = w.replace("'", "")
            words.append(_SPELLING.get(w, w))
    return [
        w
        for i, w in enumerate(words)
        if not (w == "and" and 0 < i < len(words) - 1 and words[i - 1] in NUMBER_WORDS and words[i + 1] in NUMBER_WORDS)
    ]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Word-level Levenshtein distance (substitutions, insertions, deletions)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i]
        for j, h in enumerate(hyp, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
        prev = cur
    return prev[-1]


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of ``hypothesis`` against ``reference``, both normalized."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    return edit_distance(ref, hyp) / max(1, len(ref))


def _same_word(a: str, b: str) -> bool:
    return a == b or a in (b + "s", b + "es") or b in (a + "s", a + "es")


def _contains(hay: list[str], needle: list[str]) -> bool:
    """``needle`` occurs in ``hay`` as whole words; a number in it is not part of a longer one."""
    n = len(needle)
    for i in range(len(hay) - n + 1):
        if not all(_same_word(h, w) for h, w in zip(hay[i : i + n], needle, strict=True)):
            continue
        before = hay[i - 1] if i else ""
        after = hay[i + n] if i + n < len(hay) else ""
        if needle[0] in NUMBER_WORDS and (before in NUMBER_WORDS or before == "point"):
            continue
        if needle[-1] in NUMBER_WORDS and (after in NUMBER_WORDS or after == "point"):
            continue
        return True
    return False


ECHO_MIN_WORDS = 4


def echoes(question: str, reply: str) -> bool:
    """The reply only repeats the question (all of a question of ``ECHO_MIN_WORDS`` or more words
    appears in it as one run, or the reply is the question's words): not an answer, whatever the
    accepted words say ("Remind me to buy milk." answered "Remind me to buy milk.")."""
    q, r = normalize(question), normalize(reply)
    if not q or not r:
        return False
    return r == q or (len(q) >= ECHO_MIN_WORDS and _contains(r, q))


def answer_correct(reply: str, accept: tuple[str, ...] | list[str], reject: tuple[str, ...] | list[str] = ()) -> bool:
    """The reply contains one of ``accept`` (words or phrases, numbers as digits or words) and
    none of ``reject``."""
    words = normalize(reply)
    if any(_contains(words, normalize(r)) for r in reject):
        return False
    return any(_contains(words, normalize(a)) for a in accept if normalize(a))


_ABBREVIATIONS = re.compile(r"\b(?:mr|mrs|ms|dr|st|vs|etc|e\.g|i\.e|u\.s|u\.k|a\.m|p\.m|approx|no)\.", re.IGNORECASE)
_LIST = re.compile(r"(?:^|\n)\s*(?:[-*•+]|\d+[.)])\s+\S")
_INLINE_LIST = re.compile(r"(?:^|\s)\d+[.)]\s+\S")
_MARKDOWN = re.compile(r"\*\*|__|`|^\s*#|\[[^\]]+\]\([^)]*\)|^\s*>|\*[^*\s][^*\n]*\*", re.MULTILINE)


def count_sentences(text: str) -> int:
    """Sentences in ``text``: ends at . ! ? …, not inside 3.14 or after Mr. or e.g."""
    t = _ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", ""), text)
    t = re.sub(r"(?<=\d)\.(?=\d)", "", t)
    return sum(1 for part in re.split(r"[.!?…]+", t) if re.search(r"\w", part))


def _is_emoji(ch: str) -> bool:
    cp = ord(ch)
    return cp >= 0x1F000 or 0x2600 <= cp <= 0x27BF or cp == 0xFE0F or unicodedata.category(ch) == "So"


def speakable_problems(reply: str, max_sentences: int = 2) -> list[str]:
    """Why ``reply`` is not fit to be spoken: a list, markdown, emoji, more than ``max_sentences``
    sentences.  Empty: speakable."""
    problems = []
    if _LIST.search(reply) or len(_INLINE_LIST.findall(reply)) >= 2:
        problems.append("list")
    if _MARKDOWN.search(reply):
        problems.append("markdown")
    if any(_is_emoji(ch) for ch in reply):
        problems.append("emoji")
    n = count_sentences(reply)
    if n > max_sentences:
        problems.append(f"{n} sentences")
    return problems


def unfinished(reply: str) -> bool:
    """The reply stops mid-sentence (``llm.max_tokens`` reached, or cut by a barge-in)."""
    return bool(reply.strip()) and not re.search(r"[.!?…][\"')\]]*\s*$", reply.strip())


def judge(
    q: Question, transcript: str, reply: str, answered: bool, turn_wer: float, error: str | None, lead_wer: float | None
) -> tuple[bool, str | None]:
    """Whether the reply to ``q`` is right (an accepted answer, not an echo of the question or of
    what was heard), and if not, the stage that most likely failed."""
    echo = answered and not q.echo_ok and (echoes(q.spoken, reply) or echoes(transcript, reply))
    correct = answered and not echo and answer_correct(reply, q.accept, q.reject)
    return correct, None if correct else failure_guess(turn_wer, answered, error, lead_wer)


def failure_guess(turn_wer: float, answered: bool, error: str | None = None, lead_wer: float | None = None) -> str:
    """Which stage most likely failed a question answered wrongly (or not at all)."""
    if error:
        return "error"
    if turn_wer > STT_FAIL_WER:
        return "stt"
    if lead_wer is not None and lead_wer > STT_FAIL_WER:
        return "stt (the lead question)"
    if not answered:
        return "no reply (endpointing or timeout)"
    return "llm"
