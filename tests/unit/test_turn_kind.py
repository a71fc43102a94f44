"""text.turn_kind: which turns the router may give the small model (narrow: a wrong "small" is a
worse answer)."""

from __future__ import annotations

import pytest

from voiceagent.text.turn_kind import KINDS, MAX_WORDS, small_talk_kind


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Hello there.", "greeting"),
        ("Hi!", "greeting"),
        ("That\u2019s right.", "confirmation"),  # a curly apostrophe, as some transcripts have
        ("Good morning, how are you today?", "greeting"),
        ("How's it going?", "how_are_you"),
        ("Thank you very much.", "thanks"),
        ("Thanks a lot, goodbye.", "thanks"),
        ("Goodbye, have a nice day.", "farewell"),
        ("See you later!", "farewell"),
        ("Yes.", "confirmation"),
        ("No thanks, that is all.", "confirmation"),
        ("Um, yes please.", "confirmation"),
        ("Okay, sounds good.", "confirmation"),
        ("My name is Sam.", "introduction"),
        ("Nice to meet you too.", "introduction"),
        ("What's your name?", "about_you"),
    ],
)
def test_social_turns_have_a_kind(text: str, kind: str | None) -> None:
    assert small_talk_kind(text) == kind


@pytest.mark.parametrize(
    "text",
    [
        "What is the capital of France?",
        "Yes, what is the capital of France?",  # a question after the confirmation
        "Thank you, and set a timer for ten minutes.",
        "Hey, what time is it?",
        "Can you tell me a joke?",
        "I'm feeling a bit tired today.",
        "Remind me to call mom at six.",
        "What is two plus two?",
        "No, I meant the other one.",
        "Um.",
        "Call me tomorrow.",  # a request, not a name
        "Call me at six.",
        "Call me an ambulance.",
        "This is an emergency.",
        "My name is not Bob.",
        "Yes, 42.",  # digits are content
        "Hi! 2+2?",
        "No thanks, \u20ac5",
        "",
        "   ",
        " ".join(["thanks"] * (MAX_WORDS + 1)),  # too long to be only glue
    ],
)
def test_anything_with_content_goes_to_the_large_model(text: str) -> None:
    assert small_talk_kind(text) is None


def test_every_kind_is_reachable() -> None:
    said = ["Hello.", "How are you?", "Thanks.", "Bye.", "Okay.", "Call me Al.", "Who are you?"]
    assert {small_talk_kind(t) for t in said} == set(KINDS)
