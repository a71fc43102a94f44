"""The cache's lexical guards: what an embedding blurs must still agree."""

from __future__ import annotations

import pytest

from voiceagent.text.question_match import mismatch, signature


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("When do you close?", "What time do you close today?"),
        ("Where is the meeting?", "Where does the meeting take place?"),
        ("What's the Wi-Fi password?", "What is the Wi-Fi password?"),
        ("What is the address of the venue?", "What's the venue's address?"),
        ("Where are the toilets?", "Where is the toilet?"),
        ("Hello.", "Hi there."),
    ],
)
def test_paraphrases_pass_every_guard(a: str, b: str) -> None:
    assert mismatch(a, b) is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Set a timer for ten minutes.", "Set a timer for 2 minutes."),
        ("Where is room 101?", "Where is room 110?"),
        ("Is parking free?", "Is parking not free?"),
        ("Is the museum open on Mondays?", "Isn't the museum open on Mondays?"),
        ("Is the museum open on Mondays?", "Is the museum closed on Mondays?"),
        ("When does the first train leave?", "When does the last train leave?"),
        ("What is the capital of Austria?", "What is the capital of Australia?"),
        ("what is the capital of austria", "what is the capital of australia"),
        ("What time does the museum open?", "What time does the museum open for groups?"),
        ("Where is the meeting?", "When is the meeting?"),
        ("Why is the meeting cancelled?", "Is the meeting cancelled?"),
        ("Can I call you later?", "Can you call me later?"),
        ("Who works for John?", "Who does John work for?"),
        ("Is there a flight from Paris to London?", "Is there a flight from London to Paris?"),
    ],
    ids=[
        "numbers",
        "digits",
        "negation",
        "contraction",
        "open-closed",
        "first-last",
        "names",
        "lower-case",
        "narrower",
        "where-when",
        "why-yes-no",
        "persons",
        "roles",
        "direction",
    ],
)
def test_near_misses_fail_a_guard(a: str, b: str) -> None:
    assert mismatch(a, b) is not None
    assert mismatch(b, a) is not None


def test_numbers_in_words_and_digits_are_the_same_number() -> None:
    assert mismatch("Set a timer for ten minutes.", "Set a timer for 10 minutes.") is None
    assert signature("Ten or 10")["numbers"] == [10.0, 10.0]


def test_the_guard_that_fails_is_named() -> None:
    assert mismatch("Book a table for two.", "Book a table for four.") == "numbers"
    assert mismatch("Is parking free?", "Is parking not free?") == "negation"
    assert mismatch("Turn the lights on.", "Turn the lights off.") == "opposites"
    assert mismatch("Who is the CEO of Apple?", "Who is the CEO of Google?") == "names"
    assert mismatch("Tell me a joke.", "Tell me a story.") == "content"
    assert mismatch("How do I cancel?", "Why do I cancel?") == "question"
    assert mismatch("Do I need a ticket?", "Do you need a ticket?") == "persons"
    assert mismatch("Who works for John?", "Who does John work for?") == "order"


def test_what_time_is_when_and_which_is_what() -> None:
    assert mismatch("When do you close?", "What time do you close today?") is None
    assert mismatch("What languages do you speak?", "Which languages do you speak?") is None
