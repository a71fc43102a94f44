"""A pause longer than the silence fallback, after a word no sentence ends on (``turn.incomplete_ms``,
voiceagent/text/turn_words.py) or after words the LLM judges unlikely to end a sentence
(``turn.text_threshold``), does not end the turn: real models, the in-process talk driver.

The same audio with the rule off is cut in two, which shows the tests can fail."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.integration.local_talk import talk_file
from tests.profile import profile_config
from voiceagent.talk.conversation import TalkResult

pytestmark = pytest.mark.models


def _talk(engines: Any, run: Any, wav: Path, out: Path, incomplete_ms: int, text_threshold: float = 0.0) -> tuple[TalkResult, str, int]:
    """The talk's result, what it printed, and how many turns were transcribed again as one clip."""
    base = profile_config()
    turn = dataclasses.replace(base.turn, incomplete_ms=incomplete_ms, text_threshold=text_threshold)
    result, printed, session = talk_file(engines, run, wav, out, dataclasses.replace(base, turn=turn))
    return result, printed, session.turn.rejoined


def test_a_long_pause_after_an_unfinished_word_is_not_the_end_of_the_turn(
    engines: Any, speech: dict[str, Path], run: Any, tmp_path: Path
) -> None:
    assert profile_config().turn.incomplete_ms > 800  # the fixture's pause (0.8 s) is within the default
    result, printed, rejoined = _talk(engines, run, speech["pause_unfinished"], tmp_path / "a.wav", profile_config().turn.incomplete_ms)
    users = [t.text.lower() for t in result.turns if t.role == "user"]
    assert len(users) == 1 and "capital" in users[0] and "germany" in users[0], printed
    assert rejoined == 1  # its two segments were transcribed again as one clip (stt.rejoin)
    answers = [t.text.lower() for t in result.turns if t.role == "assistant" and t.text]
    assert answers and "berlin" in answers[-1], printed


def test_without_the_rule_the_same_pause_cuts_the_user_off(engines: Any, speech: dict[str, Path], run: Any, tmp_path: Path) -> None:
    result, printed, rejoined = _talk(engines, run, speech["pause_unfinished"], tmp_path / "b.wav", 0)
    users = [t.text.lower() for t in result.turns if t.role == "user"]
    assert len(users) == 2 and "germany" not in users[0], printed  # answered "What is the capital of"
    assert rejoined == 0  # two turns of one segment each


@pytest.mark.parametrize("text_threshold", [0.003, 0.0])
def test_a_long_pause_after_words_the_llm_doubts_end_a_sentence_is_not_the_end_of_the_turn(
    engines: Any, speech: dict[str, Path], run: Any, tmp_path: Path, text_threshold: float
) -> None:
    """ "How many wheels" ... "does a bicycle have?": no unfinished word, so only the LLM's
    judgement of the words holds the turn over the 0.8 s pause; without it the user is cut off."""
    incomplete_ms = profile_config().turn.incomplete_ms
    result, printed, rejoined = _talk(engines, run, speech["pause_wheels"], tmp_path / "w.wav", incomplete_ms, text_threshold)
    users = [t.text.lower() for t in result.turns if t.role == "user"]
    if text_threshold:
        # (Whisper tiny hears espeak's "a bicycle" as "my sickle" as often as not: the words that
        # show one turn are the first half's and the second half's last.)
        assert len(users) == 1 and "wheels" in users[0] and "have" in users[0], printed
        assert rejoined == 1
    else:
        assert len(users) == 2 and "have" not in users[0], printed
