"""A transcript with the transcriber's confidence: it stays a ``str`` everywhere a ``str`` goes."""

from __future__ import annotations

import math

import pytest

from voiceagent.backends.protocols import Transcript, confidence_of
from voiceagent.backends.whisper import confidence


def test_a_transcript_is_its_text_and_carries_its_confidence() -> None:
    heard = Transcript("Stop.", 0.4)
    assert heard == "Stop." and hash(heard) == hash("Stop.") and f"{heard}" == "Stop." and heard.strip(".") == "Stop"
    assert {heard: 1}["Stop."] == 1
    assert confidence_of(heard) == 0.4
    assert confidence_of("Stop.") is None and confidence_of(Transcript("Stop.")) is None
    assert confidence_of(heard.strip()) is None  # a new string made from it is a plain one


def test_whispers_confidence_is_the_tokens_mean_probability_times_the_chance_of_speech() -> None:
    assert confidence(math.log(0.5), 0.2) == pytest.approx(0.4)
    assert confidence(0.0, 0.0) == 1.0
    assert confidence(0.3, -0.1) == 1.0  # clamped: a probability, whatever rounding gave
    assert confidence(-50.0, 0.0) < 1e-20 and confidence(-1.0, 1.0) == 0.0
