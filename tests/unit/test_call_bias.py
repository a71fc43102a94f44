"""llm.call_bias: the first generated token only leans towards opening a tool call."""

from __future__ import annotations

import numpy as np

from voiceagent.backends.llama_cpp import first_token_bias


def test_the_bias_moves_the_first_position_only_and_only_its_tokens() -> None:
    process = first_token_bias([2, 5], 1.5)
    prompt = np.arange(7)
    first = process(prompt, np.zeros(8, dtype=np.float32))
    assert first.tolist() == [0, 0, 1.5, 0, 0, 1.5, 0, 0]
    # Every later position of the same generation is left as the model made it.
    for n in (8, 9, 30):
        assert not process(np.arange(n), np.zeros(8, dtype=np.float32)).any()


def test_a_near_tie_at_the_first_token_tips_towards_the_call() -> None:
    # Measured on the 1.5B: "To" (describe the call) 15.80 against "<" (make it) 15.74.
    scores = np.array([15.80, 15.74, 9.0], dtype=np.float32)
    assert int(np.argmax(first_token_bias([1], 1.0)(np.arange(3), scores.copy()))) == 1
    # A reply that needs no tool ("You" 21.58 against "<" 8.84) keeps its first word.
    clear = np.array([21.58, 8.84], dtype=np.float32)
    assert int(np.argmax(first_token_bias([1], 1.0)(np.arange(3), clear))) == 0


def test_each_generation_has_its_own_start() -> None:
    one, two = first_token_bias([0], 1.0), first_token_bias([0], 1.0)
    assert one(np.arange(4), np.zeros(2))[0] == 1.0
    assert two(np.arange(10), np.zeros(2))[0] == 1.0  # a longer prompt: still its first position
    assert one(np.arange(10), np.zeros(2))[0] == 0.0
