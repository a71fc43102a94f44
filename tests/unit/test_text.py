"""voiceagent.text.clauses: clause splitting, cleaning for speech, cutting to what was heard."""

from __future__ import annotations

import random
import re

import pytest

from voiceagent.text.clauses import ClauseSplitter, clean_for_speech, cut_to_fraction

SAMPLES = [
    "Well, I think, that is fine. Next one!",
    "Hello there. How can I help you today?",
    "The capital of France is Paris.",
    "Sure! Here's the plan: first, we go; then, we rest — and finally we eat.",
    "  Leading spaces,  double  spaces, and trailing ones.   ",
    "One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five twenty-six.",
    "Wait... what?! Really?\nYes.\n\nOkay",
    "3.14 is pi, e.g. roughly; it's (about) right.",
    "",
    "No punctuation at all here",
    "Ünïcödé, émojis 😀, and “quotes.” Done.",
]


def tokens(text: str, rng: random.Random) -> list[str]:
    """Cut ``text`` into random pieces (like LLM tokens: 1-6 characters)."""
    out = []
    i = 0
    while i < len(text):
        n = rng.randint(1, 6)
        out.append(text[i : i + n])
        i += n
    return out


def split(pieces: list[str], splitter: ClauseSplitter | None = None) -> list[str]:
    s = splitter or ClauseSplitter()
    out: list[str] = []
    for piece in pieces:
        out.extend(s.push(piece))
    out.extend(s.flush())
    return out


@pytest.mark.parametrize("text", SAMPLES)
def test_join_of_everything_emitted_equals_the_input(text: str) -> None:
    rng = random.Random(text)
    for _ in range(20):
        assert "".join(split(tokens(text, rng))) == text
    assert "".join(split([text])) == text
    assert "".join(split(list(text))) == text


def test_first_clause_is_cut_at_a_comma_after_three_words() -> None:
    s = ClauseSplitter()
    assert s.push("Well, I") == []  # a comma after one word is too early
    assert s.push(" think,") == []  # the comma needs the following space
    assert s.push(" that") == ["Well, I think, "]
    # later clauses need six words before a comma counts
    assert s.push(" is, fine") == []
    assert s.push(" and we go on, yes") == ["that is, fine and we go on, "]


def test_sentences_are_cut_at_sentence_ends() -> None:
    s = ClauseSplitter()
    out = []
    for piece in ["Hi", ".", " How", " are", " you", "?", " Good", "!", " Bye"]:
        out.extend(s.push(piece))
    assert out == ["Hi. ", "How are you? ", "Good! "]
    assert s.flush() == ["Bye"]


def test_flush_returns_the_rest_and_empties_the_buffer() -> None:
    s = ClauseSplitter()
    assert s.push("Almost done") == []
    assert s.flush() == ["Almost done"]
    assert s.flush() == []


@pytest.mark.parametrize("max_words", [5, 8])
def test_hard_cut_at_max_words_token_by_token(max_words: int) -> None:
    words = [f"w{i}" for i in range(23)]
    text = " ".join(words)
    clauses = split([w + " " for w in words[:-1]] + [words[-1]], ClauseSplitter(max_words=max_words))
    assert "".join(clauses) == text
    assert [len(c.split()) for c in clauses[:-1]] == [max_words] * (len(clauses) - 1)
    assert 1 <= len(clauses[-1].split()) <= max_words


@pytest.mark.parametrize("max_words", [5, 8])
def test_hard_cut_at_max_words_when_a_long_piece_arrives_at_once(max_words: int) -> None:
    text = " ".join(f"w{i}" for i in range(23))
    clauses = split([text], ClauseSplitter(max_words=max_words))
    assert "".join(clauses) == text
    assert all(len(c.split()) <= max_words for c in clauses), clauses


@pytest.mark.parametrize("text", SAMPLES)
def test_no_clause_exceeds_max_words_however_the_text_is_chunked(text: str) -> None:
    rng = random.Random(f"max:{text}")
    for pieces in ([text], tokens(text, rng), list(text)):
        clauses = split(pieces, ClauseSplitter(max_words=6))
        assert all(len(c.split()) <= 6 for c in clauses), clauses


def test_clauses_end_on_whitespace_boundaries_only() -> None:
    rng = random.Random(7)
    for text in SAMPLES:
        clauses = split(tokens(text, rng))
        for c in clauses[:-1]:
            assert c[-1].isspace(), (text, clauses)


def test_clean_for_speech_removes_markdown() -> None:
    assert clean_for_speech("**Bold** and _italic_ and `code`") == "Bold and italic and code"
    assert clean_for_speech("# Title\n> quoted | table ~strike~") == "Title quoted table strike"
    assert clean_for_speech("See [the docs](https://example.com/a_b*c) now.") == "See the docs now."
    assert clean_for_speech("  spaced \n\n out\t") == "spaced out"
    assert clean_for_speech("***") == ""
    assert clean_for_speech("Plain sentence, with commas; and colons: fine.") == "Plain sentence, with commas; and colons: fine."


def test_clean_for_speech_leaves_no_markup_characters() -> None:
    messy = "## Steps\n1. **Mix** the _flour_\n2. `bake` it ~~now~~ > done | [ok](http://x)"
    cleaned = clean_for_speech(messy)
    assert not re.search(r"[*_`#>|~\[\]()]", cleaned)
    assert cleaned.split() == ["Steps", "1.", "Mix", "the", "flour", "2.", "bake", "it", "now", "done", "ok"]


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [(0.0, ""), (-1.0, ""), (0.24, ""), (0.25, "one"), (0.5, "one two"), (0.99, "one two three"), (1.0, "one  two three four ")],
)
def test_cut_to_fraction(fraction: float, expected: str) -> None:
    assert cut_to_fraction("one  two three four ", fraction) == expected


def first_clause(text: str, first_max_words: int = 4) -> str:
    s = ClauseSplitter(first_max_words=first_max_words)
    out: list[str] = []
    for w in text.split(" "):
        out.extend(s.push(w + " "))
    out.extend(s.flush())
    return out[0]


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("The capital of Italy is Rome.", "The capital of Italy "),  # ends on a content word: kept
        ("The largest planet in our solar system is Jupiter.", "The largest planet "),  # "in" leads on
        ("The moon is the only planet in our solar system.", "The moon is "),  # never below three words
        ("Once upon a time in a small village", "Once upon a time "),
        ("And it is of the kind", "And it is "),  # all function words: three words, not fewer
    ],
)
def test_a_hard_first_cut_backs_off_before_function_words(text: str, first: str) -> None:
    assert first_clause(text) == first


@pytest.mark.parametrize("text", SAMPLES)
def test_first_clause_cut_does_not_depend_on_chunking(text: str) -> None:
    rng = random.Random(f"first:{text}")
    want = split([text], ClauseSplitter(first_max_words=4))
    for pieces in (tokens(text, rng), list(text)):
        assert split(pieces, ClauseSplitter(first_max_words=4)) == want
    assert "".join(want) == text
