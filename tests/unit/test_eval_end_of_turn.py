"""The pure parts of benchmarks/eval_end_of_turn.py: which utterances are judged, the AUC and the
held shares.  No models."""

from __future__ import annotations

import pytest

from benchmarks import eval_end_of_turn as et
from benchmarks.common.questions import Question


def test_whole_questions_their_truncations_and_paused_halves_lose_their_final_punctuation() -> None:
    plain = Question("q1", "What is two plus two?", ("four",), "arithmetic")
    short = Question("q2", "Hello there.", ("hello",), "small_talk")
    paused = Question("q3", "Tell me the capital | of France.", ("Paris",), "facts", pause_ms=700)
    got = et.texts([plain, short, paused])
    assert got == [
        ("complete", "q1", "What is two plus two"),
        ("truncated", "q1", "What is two plus"),
        ("truncated", "q1", "What is two"),
        ("complete", "q2", "Hello there"),  # too short to drop a word and keep two
        ("complete", "q3", "Tell me the capital of France"),
        ("truncated", "q3", "Tell me the capital of"),
        ("truncated", "q3", "Tell me the capital"),
        ("half", "q3", "Tell me the capital"),
    ]
    assert et.bare("How many wheels? ") == "How many wheels"


def test_auc_is_the_chance_a_whole_utterance_scores_above_an_unfinished_one() -> None:
    assert et.auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert et.auc([0.1], [0.9]) == 0.0
    assert et.auc([0.5, 0.9], [0.5]) == pytest.approx(0.75)  # a tie counts half
    assert et.auc([], [0.1]) is None


def test_held_shares_per_threshold_and_the_report() -> None:
    r = et.judged([0.002, 0.5, 0.9, 0.95], {"half": [0.0001, 0.02], "truncated": []}, (0.001, 0.01))
    assert r["n_complete"] == 4 and r["auc"] == {"half": pytest.approx(0.875), "truncated": None}
    assert r["held"] == [
        {"threshold": 0.001, "complete": 0.0, "half": 0.5, "truncated": None},
        {"threshold": 0.01, "complete": 0.25, "half": 0.5, "truncated": None},
    ]
    text = et.markdown({"machine": "2 cores", "command": "python -m benchmarks.eval_end_of_turn", "judges": {"LLM x, text": r}})
    assert "AUC whole vs half 0.875." in text
    assert "| 0.01 | 25 % | 50 % | – |" in text
